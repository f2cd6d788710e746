//! Listing: every filter and pagination over workflows in every shape the filters tell apart,
//! and the steps of a workflow, each recorded call in order.

use super::*;
use stead::client::ListSteps;

/// Workflows in every shape the filters tell apart, and the moment between d2 and d3. Shuts
/// `rt` down and returns another executor (an embedded database serves one at a time).
async fn populate(rt: Runtime, db: &common::TestDb) -> (SystemTime, Runtime) {
    for (id, n) in [("d1", 1u64), ("d2", 2)] {
        rt.start("double", n, WorkflowOptions::with_id(id))
            .await
            .unwrap()
            .result::<u64>()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let d3 = rt
        .start("double", 3u64, WorkflowOptions::with_id("d3"))
        .await
        .unwrap();
    d3.result::<u64>().await.unwrap();
    // d3's own stamp, not the wall clock: a process's `created_at` may run ahead of the clock
    // after a burst of starts (other tests in this process make them).
    let created = d3.status().await.unwrap().created_at_ms;
    let mid = SystemTime::UNIX_EPOCH + Duration::from_millis(created as u64);
    let e1 = rt
        .start("refuse", (), WorkflowOptions::with_id("e1"))
        .await
        .unwrap();
    assert!(e1.result::<()>().await.is_err());
    rt.enqueue(
        "q",
        "double",
        9u64,
        WorkflowOptions::with_id("qv").app_version("v9"),
    )
    .await
    .unwrap();
    rt.start("parent", 5u64, WorkflowOptions::with_id("p1"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let f1 = rt
        .client()
        .fork("d1", 1, ForkOptions::new().id("f1"))
        .await
        .unwrap();
    assert_eq!(common::within(f1.result::<u64>()).await.unwrap(), 2);
    // Launched last, so it claims none of the work above.
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let other = builder(db).executor_id("other").launch().await.unwrap();
    other
        .start("double", 7u64, WorkflowOptions::with_id("o1"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    (mid, other)
}

both_backends! {
async fn every_list_filter_and_pagination(db) {
    let rt = builder(&db).launch().await.unwrap();
    let (mid, other) = populate(rt, &db).await;
    let client = client(&db).await;
    let list = |f: ListWorkflows| {
        let client = client.clone();
        async move { client.list_workflows(f).await.unwrap() }
    };
    let all = ["d1", "d2", "d3", "e1", "qv", "p1", "p1-1", "f1", "o1"];
    assert_eq!(ids(&list(ListWorkflows::new()).await), all);

    assert_eq!(
        ids(&list(ListWorkflows::new().ids(["d3", "d1", "missing"])).await),
        ["d1", "d3"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().status(Status::Error)).await),
        ["e1"]
    );
    assert_eq!(
        ids(&list(
            ListWorkflows::new()
                .status(Status::Error)
                .status(Status::Enqueued)
        )
        .await),
        ["e1", "qv"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().name("refuse")).await),
        ["e1"]
    );
    assert_eq!(ids(&list(ListWorkflows::new().queue("q")).await), ["qv"]);
    assert_eq!(
        ids(&list(ListWorkflows::new().app_version("v9")).await),
        ["qv"]
    );
    assert_eq!(
        list(ListWorkflows::new().app_name("shop")).await.len(),
        all.len()
    );
    assert!(list(ListWorkflows::new().app_name("elsewhere"))
        .await
        .is_empty());
    assert_eq!(
        ids(&list(ListWorkflows::new().created_before(mid)).await),
        ["d1", "d2"]
    );
    let after = list(ListWorkflows::new().created_after(mid)).await;
    assert_eq!(ids(&after)[0], "d3");
    assert_eq!(after.len(), all.len() - 2);
    assert_eq!(
        ids(&list(ListWorkflows::new().parent("p1")).await),
        ["p1-1"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().forked_from("d1")).await),
        ["f1"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().executor("other")).await),
        ["o1"]
    );

    // Pagination, both orders.
    assert_eq!(
        ids(&list(ListWorkflows::new().limit(2)).await),
        ["d1", "d2"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().limit(3).offset(2)).await),
        ["d3", "e1", "qv"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().newest_first().limit(2)).await),
        ["o1", "f1"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().newest_first().offset(7)).await),
        ["d2", "d1"]
    );

    // Payloads only when asked.
    let bare = &list(ListWorkflows::new().ids(["d2", "e1"])).await;
    assert!(bare
        .iter()
        .all(|w| w.input.is_none() && w.output.is_none() && w.error.is_none()));
    let full = list(ListWorkflows::new().ids(["d2", "e1"]).with_payloads()).await;
    assert_eq!(full[0].input, Some(serde_json::json!(2)));
    assert_eq!(full[0].output, Some(serde_json::json!(4)));
    let error = full[1].error.as_ref().expect("e1's error");
    assert_eq!(error.message, "refused");
    assert_eq!(full[1].status.status, Status::Error);

    // Queued: waiting, delayed or running from a queue.
    assert_eq!(
        ids(&client
            .list_queued_workflows(ListWorkflows::new())
            .await
            .unwrap()),
        ["qv"]
    );
    // The runtime offers the same operations.
    assert_eq!(
        other.client().list_workflows(ListWorkflows::new()).await.unwrap().len(),
        all.len()
    );
    other.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn steps_list_each_recorded_call_in_order(db) {
    let rt = builder(&db).launch().await.unwrap();
    rt.start("five", 10u32, WorkflowOptions::with_id("st"))
        .await
        .unwrap()
        .result::<u32>()
        .await
        .unwrap();
    rt.start("parent", 1u64, WorkflowOptions::with_id("sp"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let client = client(&db).await;
    let steps = client.steps("st").await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["s1", "s2", "s3", "s4", "s5"]);
    assert_eq!(steps[2].function_id, 3);
    assert_eq!(steps[2].output, Some(serde_json::json!(13)));
    assert!(steps.iter().all(|s| s.completed_at_ms >= s.started_at_ms));
    let parent = client.steps("sp").await.unwrap();
    assert_eq!(parent[0].child_workflow_id.as_deref(), Some("sp-1"));
    assert_eq!(parent[1].name, "DBOS.getResult");
    assert!(client.steps("missing").await.unwrap().is_empty());

    // Pages of two without outputs: each call once, in order, with its output's size only.
    let pages = ListSteps::new().without_outputs().limit(2);
    let mut page = client.list_steps("st", pages).await.unwrap();
    let mut seen = Vec::new();
    loop {
        seen.extend(page.steps.iter().map(|s| (s.function_id, s.output.clone(), s.output_bytes)));
        let Some(last) = page.next else { break };
        page = client.list_steps("st", pages.after(last)).await.unwrap();
    }
    assert_eq!(
        seen,
        (1..=5).map(|i| (i, None, Some(2))).collect::<Vec<_>>(),
        "outputs 11 to 15, two bytes each"
    );
    // A full last page says so: no cursor to an empty one.
    let last = client.list_steps("st", ListSteps::new().after(3).limit(2)).await.unwrap();
    assert_eq!((last.steps.len(), last.next), (2, None));
    // One step's output on demand.
    let third = client.step("st", 3).await.unwrap().expect("step 3");
    assert_eq!((third.name.as_str(), third.output), ("s3", Some(serde_json::json!(13))));
    assert_eq!(client.step("st", 6).await.unwrap(), None);
    assert_eq!(client.step("st", i32::MIN).await.unwrap(), None);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

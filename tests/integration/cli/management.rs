//! Changing workflows with the binary: cancel, pause, resume, fork and delete (seen through a
//! `Client`), and `gc` deleting only old or surplus finished workflows.

use super::*;

both_backends! {
async fn cancel_resume_fork_and_delete_change_the_workflows(db) {
    let rt = builder(&db).launch().await.unwrap();
    let client = Client::connect(&db.url).await.unwrap();
    let url = db.url.as_str();

    rt.start("waiter", (), WorkflowOptions::with_id("w"))
        .await
        .unwrap();
    wait_for(&client, "w", &[Status::Pending]).await;
    let out = ok(url, &["workflow", "cancel", "w"]).await;
    assert!(out.contains("CANCELLED"), "{out}");
    assert_eq!(
        client.handle("w").status().await.unwrap().status,
        Status::Cancelled
    );

    let resumed = json(url, &["workflow", "resume", "w"]).await;
    assert_eq!(resumed["id"], "w");
    wait_for(&client, "w", &[Status::Pending]).await;

    // Paused, it shows as PAUSED (its stored status beside it); resumed, it runs on.
    let paused = json(url, &["workflow", "pause", "w"]).await;
    assert_eq!(paused["paused"], true, "{paused}");
    wait_for(&client, "w", &[Status::Enqueued]).await;
    let shown = ok(url, &["workflow", "get", "w"]).await;
    assert!(shown.contains("PAUSED") && shown.contains("ENQUEUED"), "{shown}");
    let out = ok(url, &["workflow", "resume", "w"]).await;
    assert!(!out.contains("PAUSED"), "{out}");
    wait_for(&client, "w", &[Status::Pending]).await;
    client.send("w", &"go", Some("go")).await.unwrap();
    let got: Option<String> = common::within(client.handle("w").result()).await.unwrap();
    assert_eq!(got.as_deref(), Some("go"));

    let d = rt.start("double", 4u64, WorkflowOptions::with_id("d"));
    assert_eq!(d.await.unwrap().result::<u64>().await.unwrap(), 8);
    let fork = ["workflow", "fork", "d", "--step", "1", "--new-id", "d-copy"];
    let forked = json(url, &fork).await;
    assert_eq!(forked["new_id"], "d-copy");
    let copy: u64 = common::within(client.handle("d-copy").result())
        .await
        .unwrap();
    assert_eq!(copy, 8);
    let fork = [
        "workflow",
        "fork",
        "d",
        "--step",
        "2",
        "--queue",
        "q",
        "--app-version",
        "test-1",
    ];
    let text = ok(url, &fork).await;
    let new_id = text.trim_end().rsplit('\'').nth(1).unwrap().to_owned();
    let second: u64 = common::within(client.handle(&new_id).result())
        .await
        .unwrap();
    assert_eq!(second, 8);
    let copy = client.handle(&new_id).status().await.unwrap();
    assert_eq!(
        (copy.queue_name.as_deref(), copy.forked_from.as_deref()),
        (Some("q"), Some("d"))
    );
    let forks = json(url, &["workflow", "list", "--forked-from", "d"]).await;
    let got: BTreeSet<String> = ids_of(&forks).into_iter().collect();
    assert_eq!(got, set(&["d-copy", &new_id]));

    let out = ok(url, &["workflow", "delete", "d-copy"]).await;
    assert_eq!(out, "deleted workflow 'd-copy'\n");
    let left = client
        .list_workflows(ListWorkflows::new().ids(["d-copy"]))
        .await
        .unwrap();
    assert!(left.is_empty(), "still there: {left:?}");

    for args in [
        ["workflow", "delete", "d-copy"],
        ["workflow", "get", "d-copy"],
        ["workflow", "cancel", "nope"],
        ["workflow", "pause", "nope"],
        ["workflow", "resume", "nope"],
        ["workflow", "steps", "nope"],
    ] {
        let r = stead(url, &args).await;
        let id = args[2];
        // Worded as the library words it (and the admin API): one wording everywhere.
        assert_eq!(failed(&r, 3), format!("error: {}", stead::Error::NotFound(id.into())));
        assert_eq!(failed(&r, 3), format!("error: workflow \"{id}\" not found"));
    }
    let r = stead(url, &["workflow", "fork", "nope", "--step", "1"]).await;
    assert_eq!(failed(&r, 3), "error: workflow \"nope\" not found");

    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn gc_deletes_old_or_surplus_finished_workflows_only(db) {
    let rt = builder(&db).launch().await.unwrap();
    let url = db.url.as_str();
    for (i, id) in ["g1", "g2", "g3"].into_iter().enumerate() {
        let h = rt.start("double", i as u64, WorkflowOptions::with_id(id));
        h.await.unwrap().result::<u64>().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rt.start("waiter", (), WorkflowOptions::with_id("running"))
        .await
        .unwrap();
    let later = WorkflowOptions::with_id("later").delay(Duration::from_secs(3600));
    rt.enqueue("q", "double", 1u64, later).await.unwrap();

    assert_eq!(
        ok(url, &["gc", "--older-than", "1h"]).await,
        "deleted 0 finished workflow(s)\n"
    );
    let collected = json(url, &["gc", "--keep", "1"]).await;
    assert_eq!(collected["deleted"], 2);
    let left = rt.client().list_workflows(ListWorkflows::new()).await.unwrap();
    let left: BTreeSet<String> = left.into_iter().map(|w| w.status.id).collect();
    assert_eq!(left, set(&["g3", "running", "later"]));

    let r = stead(url, &["gc"]).await;
    assert_eq!(
        r.code, 2,
        "gc without a policy is a usage error: {}",
        r.stderr
    );

    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn executor_list_shows_the_live_executor_and_rewind_reruns_a_finished_workflow(db) {
    let rt = builder(&db).launch().await.unwrap();
    let client = Client::connect(&db.url).await.unwrap();
    let url = db.url.as_str();

    // An embedded database serves one process and keeps no roster.
    let ours = rt.client().list_executors().await.unwrap();
    let listed = json(url, &["executor", "list"]).await;
    let listed = listed.as_array().expect("a JSON array");
    if db.is_sqlite() {
        assert!(ours.is_empty() && listed.is_empty(), "{listed:?}");
    } else {
        assert_eq!((ours.len(), listed.len()), (1, 1), "{listed:?}");
        assert_eq!(listed[0]["executor_id"], ours[0].executor_id.as_str());
        assert_eq!(listed[0]["live"], true);
        let table = ok(url, &["executor", "list"]).await;
        let row = table
            .lines()
            .find(|l| l.starts_with(&ours[0].executor_id))
            .unwrap_or_else(|| panic!("no row for the executor: {table}"));
        assert!(row.contains("live"), "{table}");
    }

    let d = rt.start("double", 5u64, WorkflowOptions::with_id("rw"));
    assert_eq!(d.await.unwrap().result::<u64>().await.unwrap(), 10);
    let first = client.steps("rw").await.unwrap();
    let rewound = json(url, &["workflow", "rewind", "rw", "--step", "1"]).await;
    assert_eq!((&rewound["action"], &rewound["id"]), (&serde_json::json!("rewind"), &serde_json::json!("rw")));
    let again: u64 = common::within(client.handle("rw").result()).await.unwrap();
    assert_eq!(again, 10);
    let second = client.steps("rw").await.unwrap();
    assert_eq!(second.len(), 1);
    assert!(
        second[0].started_at_ms > first[0].started_at_ms,
        "the step ran again: {first:?} then {second:?}"
    );

    rt.start("waiter", (), WorkflowOptions::with_id("busy")).await.unwrap();
    wait_for(&client, "busy", &[Status::Pending]).await;
    let refused = stead(url, &["workflow", "rewind", "busy"]).await;
    let message = failed(&refused, 1);
    assert!(message.contains("busy"), "{message}");
    let unknown = stead(url, &["workflow", "rewind", "nobody"]).await;
    assert_eq!(failed(&unknown, 3), "error: workflow \"nobody\" not found");
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}
}

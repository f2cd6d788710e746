//! Forks: from a step (the steps before replayed, the rest run), replayed inside a workflow (the
//! same copy), and numbered when created.

use super::*;

both_backends! {
async fn a_fork_from_step_three_replays_one_and_two_and_runs_three_to_five(db) {
    let rt = builder(&db).launch().await.unwrap();
    let original = rt
        .start("five", 100u32, WorkflowOptions::with_id("fk"))
        .await
        .unwrap();
    assert_eq!(original.result::<u32>().await.unwrap(), 515);
    let client = client(&db).await;
    let fork = client.fork("fk", 3, ForkOptions::new()).await.unwrap();
    assert_ne!(fork.id(), "fk");
    assert_eq!(common::within(fork.result::<u32>()).await.unwrap(), 515);
    let per_step: Vec<u32> = (1..=5).map(|i| common::body_run(fork.id(), i)).collect();
    assert_eq!(per_step, [0, 0, 1, 1, 1], "steps 1-2 replayed, 3-5 run");
    let status = fork.status().await.unwrap();
    assert_eq!(status.forked_from.as_deref(), Some("fk"));
    assert_eq!(client.steps(fork.id()).await.unwrap().len(), 5);

    // A new version and queue for the copy.
    let moved = client
        .fork(
            "fk",
            5,
            ForkOptions::new().id("fk-v9").app_version("v9").queue("q"),
        )
        .await
        .unwrap();
    let status = moved.status().await.unwrap();
    assert_eq!(status.app_version.as_deref(), Some("v9"));
    assert_eq!(status.queue_name.as_deref(), Some("q"));
    assert_eq!(status.status, Status::Enqueued);
    assert!(matches!(
        client.fork("missing", 1, ForkOptions::new()).await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn a_replayed_fork_inside_a_workflow_returns_the_same_copy(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    rt.start("double", 1u64, WorkflowOptions::with_id("src"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    rt.start("forker", "src", WorkflowOptions::with_id("fw"))
        .await
        .unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'fw'",
        1,
    )
    .await;
    // Stop it mid-way and run it again: the fork call replays.
    rt.client().cancel("fw").await.unwrap();
    common::wait_status(&pool, "fw", "CANCELLED").await;
    let h = rt.client().resume("fw").await.unwrap();
    rt.client().send("fw", &"go", Some("go")).await.unwrap();
    let fork_id = common::within(h.result::<String>()).await.unwrap();
    assert_eq!(fork_id, "fw-1");
    let forks = rt
        .client()
        .list_workflows(ListWorkflows::new().forked_from("src"))
        .await
        .unwrap();
    assert_eq!(ids(&forks), ["fw-1"]);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_fork_is_numbered_when_created_not_when_first_polled(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    rt.start("double", 1u64, WorkflowOptions::with_id("src"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let h = rt
        .start("fork_then_now", "src", WorkflowOptions::with_id("fn"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "fn-1");
    let calls = common::scalar(
        &pool,
        "SELECT string_agg(CAST(function_id AS TEXT) || ':' || function_name, ',' \
         ORDER BY function_id) FROM dbos.operation_outputs WHERE workflow_uuid = 'fn'",
    )
    .await;
    assert_eq!(calls.as_deref(), Some("1:stead.fork,2:stead.now"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

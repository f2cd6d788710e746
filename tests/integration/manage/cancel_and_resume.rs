//! Cancel, alone or with children, and resume: on from the checkpoint, and of a workflow live in
//! another process (Postgres), each step running once.

use super::*;

both_backends! {
async fn cancel_alone_or_with_children(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let client = client(&db).await;
    for id in ["alone", "tree"] {
        rt.start("waiting_parent", (), WorkflowOptions::with_id(id))
            .await
            .unwrap();
        common::wait_status(&pool, &format!("{id}-1"), "PENDING").await;
    }
    client.cancel("alone").await.unwrap();
    let h = client.handle("alone");
    assert!(matches!(
        common::within(h.result::<()>()).await,
        Err(Error::Cancelled { .. })
    ));
    assert_eq!(
        common::status_of(&pool, "alone-1").await.as_deref(),
        Some("PENDING")
    );

    client.cancel_with_children("tree").await.unwrap();
    common::wait_status(&pool, "tree", "CANCELLED").await;
    common::wait_status(&pool, "tree-1", "CANCELLED").await;
    assert!(matches!(
        client.cancel("missing").await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn resume_runs_a_cancelled_workflow_on_from_its_checkpoint(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let client = client(&db).await;
    rt.start("waiter", (), WorkflowOptions::with_id("r1"))
        .await
        .unwrap();
    common::wait_status(&pool, "r1", "PENDING").await;
    client.cancel("r1").await.unwrap();
    common::wait_status(&pool, "r1", "CANCELLED").await;
    let h = client.resume("r1").await.unwrap();
    client.send("r1", &"again", Some("go")).await.unwrap();
    assert_eq!(
        common::within(h.result::<Option<String>>()).await.unwrap(),
        Some("again".into())
    );
    let status = h.status().await.unwrap();
    assert_eq!(status.queue_name.as_deref(), Some("_dbos_internal_queue"));

    // A finished workflow stays as it is; an unknown one is an error.
    client.resume("r1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(common::status_of(&pool, "r1").await.as_deref(), Some("SUCCESS"));
    assert!(matches!(
        client.resume("missing").await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Entry point of the process that runs the workflow the test resumes from outside.
#[tokio::test]
#[ignore = "run by resuming_a_live_workflow_from_another_process_runs_each_step_once"]
async fn resume_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = common::TestDb::existing(&url);
    let rt = builder(&db).executor_id("worker").launch().await.unwrap();
    rt.start("effects", (), WorkflowOptions::with_id("live"))
        .await
        .unwrap();
    std::future::pending::<()>().await;
}

/// Postgres only: the resume stops the run in the other process through NOTIFY.
#[tokio::test]
async fn resuming_a_live_workflow_from_another_process_runs_each_step_once() {
    let db = common::TestDb::new().await;
    let pool = db.pool().await;
    sqlx::query("CREATE TABLE effects (id text, step text)")
        .execute(&pool)
        .await
        .unwrap();
    let _child = common::KillOnDrop(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "manage::cancel_and_resume::resume_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_DB, &db.url)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Step one is checkpointed: the live run waits in recv.
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'live' AND function_name = 'one'",
        1,
    )
    .await;
    let owner = |pool: PgPool| async move {
        common::scalar(
            &pool,
            "SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = 'live'",
        )
        .await
    };
    let before = owner(pool.clone()).await;
    // A resume hands the workflow to a new run under a new owner.
    let client = client(&db).await;
    client.resume("live").await.unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'live' AND status = 'PENDING'",
        1,
    )
    .await;
    client.send("live", &"go", Some("go")).await.unwrap();
    let got = common::within(client.handle("live").result::<Option<String>>())
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some("go"));
    assert_ne!(owner(pool.clone()).await, before, "a new run took over");
    let runs: Vec<(String, i64)> =
        sqlx::query_as("SELECT step, count(*) FROM effects GROUP BY step ORDER BY step")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(runs, [("one".into(), 1), ("two".into(), 1)]);
}

//! Connection loss: every connection of the runtime is terminated, repeatedly, while 100
//! workflows run. All finish with the right results, no step body runs twice, no checkpoint is
//! written twice, and nothing was restarted: callers retried and the lanes reconnected.

use std::time::Duration;

use stead::{Context, WorkflowOptions};

use crate::common;

async fn counted(ctx: Context, steps: u32) -> stead::Result<u32> {
    common::counted_steps(&ctx, steps, Duration::from_millis(5)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_every_connection_loses_nothing_and_restarts_nothing() {
    const WORKFLOWS: u32 = 100;
    const STEPS: u32 = 20;
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .workflow("counted", counted)
        .launch()
        .await
        .unwrap();
    let admin = db.pool().await;

    let mut handles = Vec::new();
    for w in 0..WORKFLOWS {
        handles.push(
            rt.start("counted", STEPS, WorkflowOptions::with_id(format!("w-{w}")))
                .await
                .unwrap(),
        );
    }
    let killer = {
        let (admin, name) = (admin.clone(), db.name.clone());
        tokio::spawn(async move {
            let mut killed = 0i64;
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(40)).await;
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = $1 AND application_name = 'stead' AND pid <> pg_backend_pid()",
                )
                .bind(&name)
                .fetch_one(&admin)
                .await
                .unwrap();
                killed += n;
            }
            killed
        })
    };
    for (w, h) in handles.iter().enumerate() {
        let result = tokio::time::timeout(common::wait::SETUP, h.result::<u32>())
            .await
            .unwrap_or_else(|_| panic!("w-{w} did not finish"))
            .unwrap();
        assert_eq!(result, STEPS * (STEPS - 1) / 2);
    }
    let killed = killer.await.unwrap();
    assert!(killed >= 10, "the test terminated connections ({killed})");

    let bodies = common::body_runs("w-");
    assert_eq!(bodies.len() as u32, WORKFLOWS * STEPS);
    assert!(bodies.iter().all(|&n| n == 1), "a step body ran twice");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM dbos.operation_outputs")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(rows as u32, WORKFLOWS * STEPS);
    let redispatched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dbos.workflow_status WHERE recovery_attempts <> 1 OR status <> 'SUCCESS'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(redispatched, 0, "no workflow was restarted");
    let stats = rt.stats();
    eprintln!("killed {killed} backends; {stats:?}");
    assert_eq!(
        stats.actor_restarts, 0,
        "the database actor was never restarted"
    );
    assert!(
        stats.db_connections_opened > 4,
        "the lanes reconnected: {stats:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

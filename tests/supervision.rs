//! Supervision: a poisoned database or queue actor is restarted by the supervisor without losing
//! a workflow; one that keeps failing stops the runtime with a fatal error instead of looping.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stead::{Context, Error, Fault, RestartPolicy, WorkflowOptions};

static GATE: AtomicBool = AtomicBool::new(false);

/// `steps` steps; after the first it waits for the gate. Counts every step body run.
async fn gated(ctx: Context, steps: u32) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 0..steps {
        if i == 1 {
            while !GATE.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let id = ctx.workflow_id().to_owned();
        sum += ctx
            .step("s", || {
                let id = id.clone();
                async move {
                    common::count_body(&id, i);
                    Ok::<_, std::io::Error>(i)
                }
            })
            .await?;
    }
    Ok(sum)
}

#[tokio::test]
async fn supervised_actors_are_restarted_and_lose_nothing() {
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .restart_policy(
            RestartPolicy::default().backoff(Duration::from_millis(10), Duration::from_millis(100)),
        )
        .workflow("gated", gated)
        .launch()
        .await
        .unwrap();
    let pool = db.pool().await;

    // The queue actor dies with its workflow actors (parked after step 1); its successor takes
    // the workflows back and replays them.
    let mut handles = Vec::new();
    for w in 0..10 {
        handles.push(
            rt.start("gated", 5, WorkflowOptions::with_id(format!("q-{w}")))
                .await
                .unwrap(),
        );
    }
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid LIKE 'q-%'",
        10,
        10,
    )
    .await;
    assert!(rt.inject_fault(Fault::PanicQueue("_dbos_internal_queue".into())));
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE 'q-%' AND recovery_attempts = 2",
        10,
        10,
    )
    .await;

    // The database actor dies while checkpoints are in flight; callers retry against its
    // successor.
    GATE.store(true, Ordering::SeqCst);
    for w in 0..40 {
        handles.push(
            rt.start("gated", 5, WorkflowOptions::with_id(format!("d-{w}")))
                .await
                .unwrap(),
        );
    }
    assert!(rt.inject_fault(Fault::PanicDatabase));

    for h in &handles {
        assert_eq!(
            common::within(h.result::<u32>()).await.unwrap(),
            10,
            "{}",
            h.id()
        );
    }
    assert_eq!(
        rt.stats().actor_restarts,
        2,
        "the queue actor and the database actor"
    );
    let q = common::body_runs("q-");
    assert_eq!(q.len(), 50);
    assert!(
        q.iter().all(|&n| n == 1),
        "a replayed step ran again: {q:?}"
    );
    let d = common::body_runs("d-");
    assert_eq!(d.len(), 200);
    assert!(
        d.iter().all(|&n| n == 1),
        "a step ran twice across the database restart"
    );
    let rows = common::scalar(&pool, "SELECT count(*)::text FROM dbos.operation_outputs").await;
    assert_eq!(rows.as_deref(), Some("250"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn an_actor_that_keeps_failing_stops_the_runtime_with_a_fatal_error() {
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .restart_policy(
            RestartPolicy::default()
                .max_restarts(2)
                .window(Duration::from_secs(60))
                .backoff(Duration::from_millis(5), Duration::from_millis(20)),
        )
        .workflow("gated", gated)
        .launch()
        .await
        .unwrap();
    for expected in 1..=3u64 {
        assert!(
            rt.inject_fault(Fault::PanicDatabase),
            "panic #{expected} delivered"
        );
        if expected < 3 {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while rt.stats().actor_restarts < expected {
                assert!(std::time::Instant::now() < deadline, "restart #{expected}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let stopped = common::within(rt.stopped()).await;
    match stopped {
        Err(Error::Fatal(reason)) => assert!(reason.contains("database"), "{reason}"),
        other => panic!("expected a fatal stop, got {other:?}"),
    }
    assert!(matches!(
        rt.start("gated", 1, WorkflowOptions::default()).await,
        Err(Error::Fatal(_))
    ));
}

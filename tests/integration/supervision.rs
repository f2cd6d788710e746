//! Supervision: a poisoned database or queue actor is restarted by the supervisor without losing
//! a workflow; one that keeps failing stops the runtime with a fatal error instead of looping.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use stead::{runtime::RestartPolicy, Context, Error, Fault, WorkflowOptions};

use crate::common;

/// The open gates, by the first part of a workflow id (both backends' tests share the process).
static GATES: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();

fn is_open(id: &str) -> bool {
    let gate = id.split('-').next().unwrap_or_default();
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .contains(gate)
}

/// `steps` steps; after the first it waits for the gate. Counts every step body run.
async fn gated(ctx: Context, steps: u32) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 0..steps {
        if i == 1 {
            while !is_open(ctx.workflow_id()) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let id = ctx.workflow_id().to_owned();
        sum += ctx
            .step("s", || {
                let id = id.clone();
                async move {
                    common::count_body(&id, i);
                    Ok(i)
                }
            })
            .await?;
    }
    Ok(sum)
}

both_backends! {
async fn supervised_actors_are_restarted_and_lose_nothing(db) {
    let rt = common::builder(&db)
        .restart_policy(
            RestartPolicy::default().backoff(Duration::from_millis(10), Duration::from_millis(100)),
        )
        .workflow("gated", gated)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let b = format!("{:?}", db.backend);

    // The queue actor dies with its workflow actors (parked after step 1); its successor takes
    // the workflows back and replays them.
    let mut handles = Vec::new();
    for w in 0..10 {
        handles.push(
            rt.start("gated", 5, WorkflowOptions::with_id(format!("{b}-q-{w}")))
                .await
                .unwrap(),
        );
    }
    common::wait_count(
        &pool,
        &format!("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid LIKE '{b}-q-%'"),
        10,
    )
    .await;
    assert!(rt.inject_fault(Fault::PanicQueue("_dbos_internal_queue".into())));
    common::wait_count(
        &pool,
        &format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE '{b}-q-%' AND recovery_attempts = 2"),
        10,
    )
    .await;

    // The database actor dies while checkpoints are in flight; callers retry against its
    // successor.
    GATES.get_or_init(Default::default).lock().unwrap().insert(b.clone());
    for w in 0..40 {
        handles.push(
            rt.start("gated", 5, WorkflowOptions::with_id(format!("{b}-d-{w}")))
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
    let q = common::body_runs(&format!("{b}-q-"));
    assert_eq!(q.len(), 50);
    assert!(
        q.iter().all(|&n| n == 1),
        "a replayed step ran again: {q:?}"
    );
    let d = common::body_runs(&format!("{b}-d-"));
    assert_eq!(d.len(), 200);
    assert!(
        d.iter().all(|&n| n == 1),
        "a step ran twice across the database restart"
    );
    let rows = common::scalar(&pool, "SELECT CAST(count(*) AS TEXT) FROM dbos.operation_outputs").await;
    assert_eq!(rows.as_deref(), Some("250"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn an_actor_that_keeps_failing_stops_the_runtime_with_a_fatal_error(db) {
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
        // The restart is counted before the new actor is in place: retry until one takes it.
        let delivered = format!("panic #{expected} delivered");
        common::wait::until_async(&delivered, Duration::from_millis(5), || async {
            rt.inject_fault(Fault::PanicDatabase)
        })
        .await;
        if expected < 3 {
            let restarted = format!("restart #{expected}");
            common::wait::until_async(&restarted, Duration::from_millis(5), || async {
                rt.stats().actor_restarts >= expected
            })
            .await;
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
}

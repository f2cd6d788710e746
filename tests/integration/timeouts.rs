//! Step timeouts: an attempt past its step's timeout is dropped and fails typed, the retry
//! policy applies, a replay reads the recorded timeout back; a workflow's deadline stops a
//! step whose body hangs.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use stead::{
    client::ForkOptions, error::StepTimeout, Context, Error, RetryPolicy, WorkflowOptions,
};

use crate::common;

/// Counts the bodies dropped before they finished.
struct Dropped(&'static AtomicU32);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

both_backends! {
async fn a_step_past_its_timeout_fails_typed_after_its_attempts(db) {
    static STARTED: AtomicU32 = AtomicU32::new(0);
    static DROPPED: AtomicU32 = AtomicU32::new(0);
    async fn slow(ctx: Context, _: ()) -> stead::Result<u32> {
        let policy = RetryPolicy::attempts(2)
            .interval(Duration::from_millis(10))
            // The predicate sees each timed-out attempt as a `StepTimeout`.
            .retry_if(|e| e.downcast_ref::<StepTimeout>().is_some());
        ctx.step("slow", || async {
            STARTED.fetch_add(1, Ordering::SeqCst);
            let _guard = Dropped(&DROPPED);
            tokio::time::sleep(Duration::from_secs(10)).await;
            std::mem::forget(_guard);
            Ok(1)
        })
        .timeout(Duration::from_millis(200))
        .retry(policy)
        .await
    }
    let _turn = one_backend_at_a_time!();
    STARTED.store(0, Ordering::SeqCst);
    DROPPED.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("slow", slow)
        .launch()
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start("slow", (), WorkflowOptions::with_id("t"))
        .await
        .unwrap();
    let err = common::within(h.result::<u32>()).await.unwrap_err();
    let took = began.elapsed();
    // Behaviour: two 200 ms attempts, each dropped at its timeout; the body alone would hang. The
    // rest (a start, two records) is a few statements, well inside the remaining 600 ms under load.
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(STARTED.load(Ordering::SeqCst), 2, "two attempts");
    assert_eq!(DROPPED.load(Ordering::SeqCst), 2, "each body dropped at its timeout");
    // The step's outcome is stored in DBOS's shape for a step timeout.
    match err {
        Error::WorkflowFailed { error, .. } => {
            assert_eq!(error.name, "DBOSStepTimeoutError");
            assert_eq!(
                error.message,
                "DBOS Error 18: Step slow was cancelled after exceeding its timeout of 0.2 seconds"
            );
            assert_eq!(error.code, Some(serde_json::json!(18)));
        }
        other => panic!("expected WorkflowFailed, got {other}"),
    }

    // A replay of the recorded step gives the typed error back without running the body.
    async fn replays(ctx: Context, _: ()) -> stead::Result<String> {
        match ctx.step("slow", || async { Ok(1) }).await {
            Err(Error::StepTimeout(t)) => Ok(format!(
                "{}:{}:{}",
                t.step,
                t.timeout.as_millis(),
                t.attempts.len()
            )),
            other => Ok(format!("unexpected {other:?}")),
        }
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let rt = common::builder(&db)
        .workflow("slow", replays)
        .launch()
        .await
        .unwrap();
    let fork = rt
        .client()
        .fork("t", 2, ForkOptions::new().id("t-replay"))
        .await
        .unwrap();
    let replayed: String = common::within(fork.result()).await.unwrap();
    assert_eq!(replayed, "slow:200:2");
    assert_eq!(STARTED.load(Ordering::SeqCst), 2, "not run again");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_step_within_its_timeout_keeps_its_output(db) {
    async fn quick(ctx: Context, _: ()) -> stead::Result<u32> {
        ctx.step("quick", || async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(7)
        })
        .timeout(Duration::from_secs(5))
        .await
    }
    async fn zero(ctx: Context, _: ()) -> stead::Result<String> {
        let r = ctx
            .step("zero", || async { Ok(1) })
            .timeout(Duration::ZERO)
            .await;
        Ok(format!("{r:?}"))
    }
    let rt = common::builder(&db)
        .workflow("quick", quick)
        .workflow("zero", zero)
        .launch()
        .await
        .unwrap();
    let h = rt.start("quick", (), WorkflowOptions::default()).await.unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 7);
    let h = rt.start("zero", (), WorkflowOptions::default()).await.unwrap();
    let refused: String = common::within(h.result()).await.unwrap();
    assert!(refused.contains("InvalidArgument") && refused.contains("zero timeout"), "{refused}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_workflow_deadline_stops_a_hung_step(db) {
    static DROPPED: AtomicU32 = AtomicU32::new(0);
    async fn hung(ctx: Context, _: ()) -> stead::Result<()> {
        ctx.step("hung", || async {
            let _guard = Dropped(&DROPPED);
            std::future::pending::<()>().await;
            Ok(())
        })
        .await
    }
    let _turn = one_backend_at_a_time!();
    DROPPED.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("hung", hung)
        .launch()
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start(
            "hung",
            (),
            WorkflowOptions::with_id("h").timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let err = common::within(h.result::<()>()).await.unwrap_err();
    let took = began.elapsed();
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
    // Behaviour: stopped at its 300 ms deadline; the body alone never ends, so the 1.7 s of room
    // only absorbs a loaded machine's scheduling.
    assert!(took < Duration::from_secs(2), "stopped at the deadline, took {took:?}");
    assert_eq!(DROPPED.load(Ordering::SeqCst), 1, "the body was dropped");
    let pool = db.checks().await;
    common::wait_status(&pool, "h", "CANCELLED").await;
    let steps = common::scalar(
        &pool,
        "SELECT CAST(count(*) AS TEXT) FROM dbos.operation_outputs WHERE workflow_uuid = 'h'",
    )
    .await;
    assert_eq!(steps.as_deref(), Some("0"), "nothing recorded for the stopped step");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! Steps: retries, recorded failures, replay without re-execution, and non-determinism.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use stead::{Context, Error, RetryPolicy, Status, WorkflowOptions};

use crate::common;

fn fast(attempts: u32) -> RetryPolicy {
    RetryPolicy::attempts(attempts)
        .interval(Duration::from_millis(5))
        .backoff_rate(2.0)
        .max_interval(Duration::from_millis(20))
}

both_backends! {
async fn a_step_that_fails_twice_then_succeeds_is_checkpointed_once(db) {
    static ATTEMPTS: AtomicU32 = AtomicU32::new(0);
    async fn flaky(ctx: Context, _: ()) -> stead::Result<String> {
        ctx.step_typed("flaky", || async {
            match ATTEMPTS.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(std::io::Error::other("not yet")),
                _ => Ok("done".to_string()),
            }
        })
        .retry(fast(5))
        .await
    }
    let _turn = one_backend_at_a_time!();
    ATTEMPTS.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("flaky", flaky)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("flaky", (), WorkflowOptions::with_id("f"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "done");
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 3);
    let pool = db.checks().await;
    let rows = common::scalar(
        &pool,
        "SELECT CAST(count(*) AS TEXT) || ':' || max(output) FROM dbos.operation_outputs \
         WHERE workflow_uuid = 'f'",
    )
    .await;
    assert_eq!(rows.as_deref(), Some(r#"1:"done""#));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn exhausted_retries_give_a_typed_error_listing_every_attempt(db) {
    static ATTEMPTS: AtomicU32 = AtomicU32::new(0);
    async fn doomed(ctx: Context, _: ()) -> stead::Result<u32> {
        let r = ctx
            .step_typed("doomed", || async {
                let n = ATTEMPTS.fetch_add(1, Ordering::SeqCst) + 1;
                Err::<u32, _>(std::io::Error::other(format!("failure {n}")))
            })
            .retry(fast(3))
            .await;
        match r {
            Err(Error::Step(e)) => {
                assert_eq!(e.step, "doomed");
                assert_eq!(e.function_id, 1);
                assert_eq!(e.attempts, vec!["failure 1", "failure 2", "failure 3"]);
                Err(Error::Step(e))
            }
            other => panic!("expected a step error, got {other:?}"),
        }
    }
    let _turn = one_backend_at_a_time!();
    ATTEMPTS.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("doomed", doomed)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("doomed", (), WorkflowOptions::with_id("d"))
        .await
        .unwrap();
    match common::within(h.result::<u32>()).await.unwrap_err() {
        Error::WorkflowFailed { error, .. } => {
            assert_eq!(error.name, "StepError");
            let data = error.data.expect("attempts stored");
            assert_eq!(
                data["attempts"],
                serde_json::json!(["failure 1", "failure 2", "failure 3"])
            );
        }
        other => panic!("expected WorkflowFailed, got {other}"),
    }
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 3);
    let pool = db.checks().await;
    let step_error = common::scalar(
        &pool,
        "SELECT error FROM dbos.operation_outputs WHERE workflow_uuid = 'd' AND function_id = 1",
    )
    .await
    .expect("the failure is checkpointed");
    assert!(step_error.contains(r#""name":"StepError""#), "{step_error}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn the_retry_predicate_stops_retries_of_permanent_errors(db) {
    static ATTEMPTS: AtomicU32 = AtomicU32::new(0);
    async fn declined(ctx: Context, _: ()) -> stead::Result<u32> {
        ctx.step_typed("charge", || async {
            ATTEMPTS.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(std::io::Error::other("card declined"))
        })
        .retry(fast(5).retry_if(|e| !e.to_string().contains("declined")))
        .await
    }
    let _turn = one_backend_at_a_time!();
    ATTEMPTS.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("declined", declined)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("declined", (), WorkflowOptions::default())
        .await
        .unwrap();
    assert!(common::within(h.result::<u32>()).await.is_err());
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 1);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Runs two steps, then panics on its first run only: the restart replays both steps from their
/// checkpoints (their bodies do not run again) and finishes.
async fn a_replay_returns_recorded_outputs_without_running_the_steps(db) {
    static BODY_RUNS: AtomicU32 = AtomicU32::new(0);
    static CRASHED: AtomicBool = AtomicBool::new(false);
    async fn replayed(ctx: Context, _: ()) -> stead::Result<Vec<u32>> {
        let a = ctx
            .step("a", || async {
                Ok(BODY_RUNS.fetch_add(1, Ordering::SeqCst) + 10)
            })
            .await?;
        let b = ctx
            .step("b", || async {
                Ok(BODY_RUNS.fetch_add(1, Ordering::SeqCst) + 20)
            })
            .await?;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash after two steps");
        }
        let c = ctx
            .step("c", || async { Ok(30) })
            .await?;
        Ok(vec![a, b, c])
    }
    let _turn = one_backend_at_a_time!();
    BODY_RUNS.store(0, Ordering::SeqCst);
    CRASHED.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("replayed", replayed)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("replayed", (), WorkflowOptions::with_id("rp"))
        .await
        .unwrap();
    assert_eq!(
        common::within(h.result::<Vec<u32>>()).await.unwrap(),
        vec![10, 21, 30]
    );
    assert_eq!(
        BODY_RUNS.load(Ordering::SeqCst),
        2,
        "steps a and b ran once each"
    );
    let status = h.status().await.unwrap();
    assert_eq!(
        status.recovery_attempts, 2,
        "the panic restart counted as a dispatch"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_replay_that_calls_a_different_step_is_a_non_determinism_error(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    async fn drifting(ctx: Context, _: ()) -> stead::Result<u32> {
        if !CRASHED.load(Ordering::SeqCst) {
            ctx.step("old_name", || async { Ok(1) })
                .await?;
            CRASHED.store(true, Ordering::SeqCst);
            panic!("crash; the code 'changes' before the replay");
        }
        ctx.step("new_name", || async { Ok(2) })
            .await
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("drifting", drifting)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("drifting", (), WorkflowOptions::with_id("nd"))
        .await
        .unwrap();
    match common::within(h.result::<u32>()).await.unwrap_err() {
        Error::WorkflowFailed { error, .. } => {
            assert_eq!(error.name, "NonDeterminism");
            assert!(
                error.message.contains("old_name") && error.message.contains("new_name"),
                "{}",
                error.message
            );
        }
        other => panic!("expected WorkflowFailed(NonDeterminism), got {other}"),
    }
    assert_eq!(h.status().await.unwrap().status, Status::Error);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_recorded_step_failure_replays_as_the_same_error(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    static RUNS: AtomicU32 = AtomicU32::new(0);
    async fn fails_then_crashes(ctx: Context, _: ()) -> stead::Result<String> {
        let r = ctx
            .step_typed("boom", || async {
                RUNS.fetch_add(1, Ordering::SeqCst);
                Err::<u32, _>(std::io::Error::other("boom"))
            })
            .await;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash after the failed step");
        }
        match r {
            Err(Error::Step(e)) => Ok(format!("{}:{}", e.step, e.attempts.join("|"))),
            other => panic!("expected the recorded failure, got {other:?}"),
        }
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    RUNS.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("f", fails_then_crashes)
        .launch()
        .await
        .unwrap();
    let h = rt.start("f", (), WorkflowOptions::default()).await.unwrap();
    assert_eq!(
        common::within(h.result::<String>()).await.unwrap(),
        "boom:boom"
    );
    assert_eq!(
        RUNS.load(Ordering::SeqCst),
        1,
        "the failed step was replayed, not re-run"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Without retries a step's closure is called once, so it may move an owned value out of its
/// captures (`FnOnce`); `Ok(v)` needs no annotation and `?` turns any error into the step's
/// failure. A replay calls neither closure again.
async fn a_step_moves_owned_values_and_question_mark_converts_errors(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    static RUNS: AtomicU32 = AtomicU32::new(0);
    async fn moving(ctx: Context, name: String) -> stead::Result<String> {
        let greeting = ctx
            .step("greet", move || async move {
                RUNS.fetch_add(1, Ordering::SeqCst);
                Ok(format!("hi {name}"))
            })
            .await?;
        let parsed = ctx
            .step("parse", || async {
                RUNS.fetch_add(1, Ordering::SeqCst);
                let n: u32 = "x".parse()?;
                Ok(n)
            })
            .await;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash after the steps");
        }
        match parsed {
            Err(Error::Step(e)) => Ok(format!("{greeting}; {}", e.attempts.join("|"))),
            other => panic!("expected the parse failure, got {other:?}"),
        }
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    RUNS.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("moving", moving)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("moving", "ada", WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(
        common::within(h.result::<String>()).await.unwrap(),
        "hi ada; invalid digit found in string"
    );
    assert_eq!(RUNS.load(Ordering::SeqCst), 2, "each closure ran once");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

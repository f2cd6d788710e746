//! Typed errors that survive the database: a workflow's or a step's own serde error type,
//! registered with `typed_error`, comes back to the caller as that type (also after a replay),
//! and is stored in DBOS's portable shape, which DBOS's Python client reads.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use stead::{client::ForkOptions, Context, Error, RetryPolicy, WorkflowOptions};

use crate::common;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
enum PaymentError {
    #[error("card declined ({code})")]
    Declined { code: u32 },
    #[error("gateway unreachable")]
    Unreachable,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("not a payment error")]
struct OtherError {
    code: u32,
}

/// Fails with the workflow's own error type.
async fn pay(_: Context, code: u32) -> Result<String, PaymentError> {
    Err(PaymentError::Declined { code })
}

static CHARGES: AtomicU32 = AtomicU32::new(0);

async fn charge() -> Result<String, PaymentError> {
    CHARGES.fetch_add(1, Ordering::SeqCst);
    Err(PaymentError::Unreachable)
}

/// A step fails with its own error type; the body reads it back, then lets it fail the run.
async fn checkout(ctx: Context, _: ()) -> stead::Result<String> {
    let seen = ctx
        .step("note", || async { Ok("noted".to_string()) })
        .await?;
    let policy = RetryPolicy::attempts(2).interval(Duration::from_millis(5));
    match ctx.step_typed("charge", charge).retry(policy).await {
        Err(e) if e.user_error::<PaymentError>() == Some(PaymentError::Unreachable) => Err(e),
        other => Ok(format!("{seen}: unexpected {other:?}")),
    }
}

fn builder(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .app_name("typed")
        .typed_error::<PaymentError>()
        .workflow("pay", pay)
        .workflow("checkout", checkout)
}

both_backends! {
async fn a_workflows_own_error_comes_back_typed_and_stored_portably(db) {
    let rt = builder(&db).launch().await.unwrap();
    let h = rt.start("pay", 51, WorkflowOptions::with_id("p")).await.unwrap();
    let err = common::within(h.result::<String>()).await.unwrap_err();
    assert_eq!(
        err.user_error::<PaymentError>(),
        Some(PaymentError::Declined { code: 51 })
    );
    assert_eq!(err.user_error::<OtherError>(), None, "another type does not match");
    // The same from the database (not the in-process slot), through a fresh handle.
    let again = rt.client().handle("p").result::<String>().await.unwrap_err();
    assert_eq!(
        again.user_error::<PaymentError>(),
        Some(PaymentError::Declined { code: 51 })
    );
    let pool = db.checks().await;
    let stored = common::scalar(
        &pool,
        "SELECT error FROM dbos.workflow_status WHERE workflow_uuid = 'p'",
    )
    .await
    .expect("an error is stored");
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored,
        json!({"name": "PaymentError", "message": "card declined (51)",
               "data": {"Declined": {"code": 51}}})
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_steps_own_error_comes_back_typed_also_on_replay(db) {
    let _turn = one_backend_at_a_time!();
    CHARGES.store(0, Ordering::SeqCst);
    let rt = builder(&db).launch().await.unwrap();
    let h = rt.start("checkout", (), WorkflowOptions::with_id("c")).await.unwrap();
    let err = common::within(h.result::<String>()).await.unwrap_err();
    assert_eq!(err.user_error::<PaymentError>(), Some(PaymentError::Unreachable), "{err}");
    assert_eq!(CHARGES.load(Ordering::SeqCst), 2);
    // Forked past the failed step: the replayed step error is still a PaymentError, and
    // the step does not run again.
    let fork = rt
        .client()
        .fork("c", 3, ForkOptions::new().id("c-fork"))
        .await
        .unwrap();
    let err = common::within(fork.result::<String>()).await.unwrap_err();
    assert_eq!(err.user_error::<PaymentError>(), Some(PaymentError::Unreachable), "{err}");
    assert_eq!(CHARGES.load(Ordering::SeqCst), 2);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn an_unregistered_error_keeps_its_name_and_message_only(db) {
    let rt = common::builder(&db).workflow("pay", pay).launch().await.unwrap();
    let h = rt.start("pay", 7, WorkflowOptions::default()).await.unwrap();
    match common::within(h.result::<String>()).await.unwrap_err() {
        Error::WorkflowFailed { error, .. } => {
            assert_eq!((error.name.as_str(), error.data.as_ref()), ("PaymentError", None));
            assert_eq!(error.decode::<PaymentError>(), None);
        }
        other => panic!("{other}"),
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// DBOS's Python client reads stead's typed error as a portable error with the same fields.
#[tokio::test]
async fn dbos_reads_a_typed_error_with_its_data() {
    require_dbos!();
    let db = common::TestDb::new().await;
    let rt = builder(&db).launch().await.unwrap();
    let h = rt
        .start("pay", 51, WorkflowOptions::with_id("py"))
        .await
        .unwrap();
    common::within(h.result::<String>()).await.unwrap_err();
    let answer = common::dbos_py::py_client(&db.url, "typed", "result", json!({"id": "py"})).await;
    let error = &answer["error"];
    assert_eq!(error["type"], "PortableWorkflowError", "{answer}");
    assert_eq!(error["name"], "PaymentError", "{answer}");
    assert_eq!(error["message"], "card declined (51)", "{answer}");
    assert_eq!(error["data"], json!({"Declined": {"code": 51}}), "{answer}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

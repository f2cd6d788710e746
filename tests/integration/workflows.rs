//! Workflows: typed registration, start, handles, idempotent and conflicting starts, and what is
//! stored for DBOS tools to read.

use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};
use stead::{Context, Error, Status, WorkflowOptions};

use crate::common;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Order {
    id: u32,
    amount: i64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Receipt {
    order: u32,
    charged: i64,
}

static CHARGES: AtomicU32 = AtomicU32::new(0);

async fn checkout(ctx: Context, order: Order) -> stead::Result<Receipt> {
    let reserved = ctx.step("reserve", || async { Ok(order.amount) }).await?;
    let charged = ctx
        .step("charge", || async {
            CHARGES.fetch_add(1, Ordering::SeqCst);
            Ok(reserved)
        })
        .await?;
    Ok(Receipt {
        order: order.id,
        charged,
    })
}

async fn refuse(_ctx: Context, amount: i64) -> Result<i64, std::io::Error> {
    Err(std::io::Error::other(format!("amount {amount} refused")))
}

both_backends! {
async fn a_workflow_runs_its_steps_and_stores_what_dbos_reads(db) {
    let rt = common::builder(&db)
        .workflow("checkout", checkout)
        .launch()
        .await
        .unwrap();
    let handle = rt
        .start(
            "checkout",
            Order { id: 7, amount: 250 },
            WorkflowOptions::with_id("order-7"),
        )
        .await
        .unwrap();
    assert_eq!(handle.id(), "order-7");
    let receipt: Receipt = common::within(handle.result()).await.unwrap();
    assert_eq!(
        receipt,
        Receipt {
            order: 7,
            charged: 250
        }
    );
    let status = handle.status().await.unwrap();
    assert_eq!(status.status, Status::Success);
    assert_eq!(status.name, "checkout");
    assert_eq!(status.executor_id.as_deref(), Some("test-executor"));
    assert_eq!(status.app_version.as_deref(), Some("test-1"));

    let pool = db.checks().await;
    let q = |sql: &'static str| common::scalar(&pool, sql);
    assert_eq!(
        q("SELECT inputs FROM dbos.workflow_status WHERE workflow_uuid = 'order-7'")
            .await
            .unwrap(),
        r#"{"positionalArgs":[{"id":7,"amount":250}],"namedArgs":{}}"#
    );
    // The outcome lives in the status row, which DBOS reads when no payload row exists.
    assert_eq!(
        q("SELECT output FROM dbos.workflow_status WHERE workflow_uuid = 'order-7'")
            .await
            .unwrap(),
        r#"{"order":7,"charged":250}"#
    );
    assert_eq!(
        q("SELECT CAST(count(*) AS TEXT) FROM dbos.workflow_output WHERE workflow_uuid = 'order-7'").await,
        Some("0".into())
    );
    assert_eq!(
        q("SELECT serialization FROM dbos.workflow_status WHERE workflow_uuid = 'order-7'")
            .await
            .unwrap(),
        "portable_json"
    );
    assert_eq!(
        q(
            "SELECT string_agg(function_id || ':' || function_name || '=' || output || '/' || \
           serialization, ',' ORDER BY function_id) FROM dbos.operation_outputs \
           WHERE workflow_uuid = 'order-7'"
        )
        .await
        .unwrap(),
        "1:reserve=250/portable_json,2:charge=250/portable_json"
    );
    assert_eq!(
        q("SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = 'order-7'").await,
        None,
        "a finished workflow has no owner"
    );
    rt.shutdown(std::time::Duration::from_secs(5))
        .await
        .unwrap();
}

async fn starting_an_existing_id_returns_the_same_workflow_and_result(db) {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    async fn once(ctx: Context, n: u32) -> stead::Result<u32> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        ctx.step("double", || async move { Ok(n * 2) })
            .await
    }
    let _turn = one_backend_at_a_time!();
    RUNS.store(0, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("once", once)
        .launch()
        .await
        .unwrap();
    let a = rt
        .start("once", 21, WorkflowOptions::with_id("same"))
        .await
        .unwrap();
    let b = rt
        .start("once", 21, WorkflowOptions::with_id("same"))
        .await
        .unwrap();
    assert_eq!(common::within(a.result::<u32>()).await.unwrap(), 42);
    assert_eq!(common::within(b.result::<u32>()).await.unwrap(), 42);
    // After it finished, a third start still returns the recorded result.
    let c = rt
        .start("once", 99, WorkflowOptions::with_id("same"))
        .await
        .unwrap();
    assert_eq!(common::within(c.result::<u32>()).await.unwrap(), 42);
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "the body ran once");
    rt.shutdown(std::time::Duration::from_secs(5))
        .await
        .unwrap();
}

async fn the_same_id_under_another_workflow_is_a_typed_conflict(db) {
    let rt = common::builder(&db)
        .workflow("checkout", checkout)
        .workflow("refuse", refuse)
        .launch()
        .await
        .unwrap();
    rt.start("refuse", 1, WorkflowOptions::with_id("taken"))
        .await
        .unwrap();
    let err = rt
        .start(
            "checkout",
            Order { id: 1, amount: 1 },
            WorkflowOptions::with_id("taken"),
        )
        .await
        .unwrap_err();
    match err {
        Error::WorkflowConflict {
            id,
            existing,
            requested,
        } => {
            assert_eq!(
                (id.as_str(), existing.as_str(), requested.as_str()),
                ("taken", "refuse", "checkout")
            );
        }
        other => panic!("expected a conflict, got {other}"),
    }
    rt.shutdown(std::time::Duration::from_secs(5))
        .await
        .unwrap();
}

async fn a_returned_error_is_stored_and_reported_as_the_outcome(db) {
    let rt = common::builder(&db)
        .workflow("refuse", refuse)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("refuse", 5, WorkflowOptions::with_id("r-5"))
        .await
        .unwrap();
    match common::within(h.result::<i64>()).await.unwrap_err() {
        Error::WorkflowFailed { id, error } => {
            assert_eq!(id, "r-5");
            assert_eq!(error.name, "Error");
            assert_eq!(error.message, "amount 5 refused");
        }
        other => panic!("expected WorkflowFailed, got {other}"),
    }
    assert_eq!(h.status().await.unwrap().status, Status::Error);
    let pool = db.checks().await;
    let stored = common::scalar(
        &pool,
        "SELECT error FROM dbos.workflow_status WHERE workflow_uuid = 'r-5'",
    )
    .await
    .unwrap();
    assert_eq!(stored, r#"{"name":"Error","message":"amount 5 refused"}"#);
    rt.shutdown(std::time::Duration::from_secs(5))
        .await
        .unwrap();
}

async fn bad_requests_get_typed_errors_and_write_nothing(db) {
    let rt = common::builder(&db)
        .workflow("checkout", checkout)
        .launch()
        .await
        .unwrap();
    let unknown = rt
        .start("nope", 1, WorkflowOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, Error::UnknownWorkflow(ref n) if n == "nope"),
        "{unknown}"
    );
    let wrong_type = rt
        .start("checkout", "not an order", WorkflowOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(wrong_type, Error::Input { .. }), "{wrong_type}");
    let empty_id = rt
        .start(
            "checkout",
            Order { id: 1, amount: 1 },
            WorkflowOptions::with_id(""),
        )
        .await
        .unwrap_err();
    assert!(matches!(empty_id, Error::InvalidArgument(_)), "{empty_id}");
    let missing = rt.client().handle("never-started").status().await.unwrap_err();
    assert!(matches!(missing, Error::NotFound(_)), "{missing}");
    let pool = db.checks().await;
    let rows = common::scalar(&pool, "SELECT CAST(count(*) AS TEXT) FROM dbos.workflow_status").await;
    assert_eq!(rows.as_deref(), Some("0"));
    rt.shutdown(std::time::Duration::from_secs(5))
        .await
        .unwrap();
}

async fn registering_a_name_twice_fails_the_launch(db) {
    let err = common::builder(&db)
        .workflow("refuse", refuse)
        .workflow("refuse", refuse)
        .launch()
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::DuplicateWorkflow(ref n) if n == "refuse"),
        "{err}"
    );
}
}

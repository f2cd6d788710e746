//! The runtime's lifecycle: clear errors for bad or unreachable databases, shutdown, and a
//! dropped runtime that leaves nothing running.

use std::time::Duration;

use stead::{Context, Error, Runtime, WorkflowOptions};

use crate::common;

async fn forever(_ctx: Context, _: ()) -> stead::Result<()> {
    std::future::pending::<()>().await;
    Ok(())
}

async fn one_step(ctx: Context, n: u32) -> stead::Result<u32> {
    ctx.step("one", || async move { Ok(n) }).await
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error_with_the_password_redacted() {
    let err = Runtime::builder()
        .database_url("postgres://alice:hunter2@127.0.0.1:1/nowhere")
        .connect_timeout(Duration::from_secs(2))
        .workflow("one", one_step)
        .launch()
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, Error::Connect { .. }), "{text}");
    assert!(
        text.contains("postgres://alice:***@127.0.0.1:1/nowhere"),
        "{text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test]
async fn an_unparsable_url_is_a_clear_error_with_the_password_redacted() {
    let err = Runtime::builder()
        .database_url("postgres://alice:hunter2@127.0.0.1:notaport/db")
        .launch()
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidUrl { .. }), "{text}");
    // A URL that did not parse is not shown at all: only its scheme and what was wrong.
    assert!(
        text.contains("postgres:") && text.contains("port") && !text.contains("hunter2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_sqlite_file_that_cannot_be_created_is_a_clear_error() {
    let err = Runtime::builder()
        .database_url("sqlite:///no/such/directory/stead.sqlite")
        .workflow("one", one_step)
        .launch()
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(matches!(err, Error::Connect { .. }), "{text}");
    assert!(text.contains("/no/such/directory/stead.sqlite"), "{text}");
}

#[tokio::test]
async fn a_bad_schema_name_is_refused_before_connecting() {
    let err = Runtime::builder()
        .database_url("postgres://127.0.0.1:1/x")
        .schema("bad; drop")
        .launch()
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

/// Postgres only: schemas are Postgres's (a SQLite file holds one system database).
#[tokio::test]
async fn a_custom_schema_holds_the_tables() {
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .schema("tenant_a")
        .workflow("one", one_step)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("one", 5, WorkflowOptions::with_id("t"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 5);
    let pool = db.pool().await;
    let status = common::scalar(
        &pool,
        "SELECT status FROM tenant_a.workflow_status WHERE workflow_uuid = 't'",
    )
    .await;
    assert_eq!(status.as_deref(), Some("SUCCESS"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

both_backends! {
async fn after_shutdown_calls_fail_with_shutdown_and_stopped_resolves(db) {
    let rt = common::builder(&db)
        .workflow("one", one_step)
        .launch()
        .await
        .unwrap();
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
    assert!(matches!(
        rt.start("one", 1, WorkflowOptions::default()).await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(
        rt.client().handle("x").status().await,
        Err(Error::Shutdown)
    ));
    tokio::time::timeout(Duration::from_secs(1), rt.stopped())
        .await
        .unwrap()
        .unwrap();
}
}

both_backends! {
async fn a_dropped_runtime_leaves_no_tasks_running(db) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let rt = common::builder(&db)
        .workflow("forever", forever)
        .workflow("one", one_step)
        .launch()
        .await
        .unwrap();
    rt.start("forever", (), WorkflowOptions::default())
        .await
        .unwrap();
    let one = rt
        .start("one", 1, WorkflowOptions::default())
        .await
        .unwrap();
    common::within(one.result::<u32>()).await.unwrap();
    let during = metrics.num_alive_tasks();
    assert!(
        during > before + 3,
        "actors run as tasks ({before} → {during})"
    );
    drop(rt);
    // Every task ends (the behaviour); how soon depends on the machine's load.
    common::wait::until_async("the runtime's tasks ending after the drop", Duration::from_millis(20), || async {
        metrics.num_alive_tasks() <= before
    })
    .await;
}
}

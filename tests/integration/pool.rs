//! A runtime and a client on a pool the application already has (`RuntimeBuilder::pool`,
//! `Client::from_pool`): work runs through it, and shutting stead down leaves it open.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use stead::{
    client::ClientOptions, runtime::DatabasePool, Client, Context, Queue, Runtime, WorkflowOptions,
};

use crate::common;

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

/// The application's own pool on `db`, small, with a name its connections carry.
async fn app_pool(db: &common::TestDb) -> DatabasePool {
    if db.is_sqlite() {
        let options = SqliteConnectOptions::new()
            .filename(db.url.trim_start_matches("sqlite://"))
            .create_if_missing(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await;
        pool.expect("the application's SQLite pool").into()
    } else {
        let pool = PgPoolOptions::new()
            .max_connections(3)
            .connect(&db.url)
            .await;
        pool.expect("the application's Postgres pool").into()
    }
}

/// The pool still answers a query of the application's.
async fn still_open(pool: &DatabasePool) {
    match pool {
        DatabasePool::Postgres(p) => {
            assert!(!p.is_closed(), "stead closed the application's pool");
            let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(p).await.unwrap();
            assert_eq!(one, 1);
        }
        DatabasePool::Sqlite(p) => {
            assert!(!p.is_closed(), "stead closed the application's pool");
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_status")
                .fetch_one(p)
                .await
                .unwrap();
            assert!(n >= 2, "{n} workflows in the file the pool reads");
        }
    }
}

both_backends! {
async fn a_runtime_and_a_client_run_on_the_applications_pool_and_leave_it_open(db) {
    let pool = app_pool(&db).await;
    let runtime = Runtime::builder()
        .pool(pool.clone())
        .app_name("shop")
        .executor_id("pool-executor")
        .queue(Queue::new("q").polling_interval(Duration::from_millis(100)))
        .workflow("double", double)
        .launch()
        .await
        .unwrap();
    let started = runtime
        .start("double", 4u64, WorkflowOptions::with_id("p1"))
        .await
        .unwrap();
    assert_eq!(common::within(started.result::<u64>()).await.unwrap(), 8);

    // A client of its own on the same pool enqueues; the runtime claims and runs it.
    let options = ClientOptions { app_name: Some("shop".into()), ..Default::default() };
    let client = Client::from_pool(pool.clone(), options).await.unwrap();
    let queued = client
        .enqueue("q", "double", 5u64, WorkflowOptions::with_id("p2"))
        .await
        .unwrap();
    assert_eq!(common::within(queued.result::<u64>()).await.unwrap(), 10);

    client.shutdown(Duration::from_secs(5)).await.unwrap();
    runtime.shutdown(Duration::from_secs(5)).await.unwrap();
    still_open(&pool).await;
}
}

#[tokio::test]
async fn a_schema_is_refused_for_a_sqlite_pool() {
    let db = common::TestDb::sqlite().await;
    let pool = app_pool(&db).await;
    let err = Runtime::builder()
        .pool(pool)
        .schema("tenant")
        .launch()
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, stead::Error::Config(_)), "{err}");
    assert!(err.to_string().contains("SQLite pool"), "{err}");
}

#[tokio::test]
async fn a_postgres_pool_of_one_connection_is_refused() {
    let db = common::TestDb::new().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let err = Client::from_pool(pool, ClientOptions::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, stead::Error::Config(_)), "{err}");
    assert!(err.to_string().contains("at least 2"), "{err}");
}

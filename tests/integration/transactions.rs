//! Transactional steps (`Context::transaction`): the user's write and its record commit
//! together in the application database, so a crash between that commit and the system
//! checkpoint never writes twice; serialization failures are retried; failures are recorded.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sqlx::{PgPool, SqlitePool};
use stead::{durable::Datasource, Context, Fault, WorkflowOptions};

use crate::common;
use crate::common::TestDb;

/// Set in a child process: the system database URL it runs against.
const CHILD_DB: &str = "STEAD_TEST_TXN_CHILD_DB";
/// Set in a child process: what it does (`hold`: one workflow, parked after its commit;
/// `loop:N`: N workflows, run until killed).
const CHILD_MODE: &str = "STEAD_TEST_TXN_CHILD_MODE";

/// The application database of a test, on the backend of its system database.
#[derive(Clone)]
enum App {
    Pg(Datasource<sqlx::Postgres>),
    Lite(Datasource<sqlx::Sqlite>),
}

static APPS: OnceLock<Mutex<HashMap<String, App>>> = OnceLock::new();

/// The application database beside system database `url`: the same Postgres database (its
/// `public` schema), or `app.sqlite` next to the SQLite file. Opened once per process.
async fn app(url: &str) -> App {
    if let Some(app) = APPS.get_or_init(Default::default).lock().unwrap().get(url) {
        return app.clone();
    }
    let app = if let Some(path) = url.strip_prefix("sqlite://") {
        let file = std::path::Path::new(path).with_file_name("app.sqlite");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePool::connect_with(options).await.unwrap();
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY AUTOINCREMENT, \
             wf TEXT NOT NULL); \
             CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); \
             INSERT OR IGNORE INTO counter VALUES (1, 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        App::Lite(Datasource::new(pool).await.unwrap())
    } else {
        let pool = PgPool::connect(url).await.unwrap();
        for sql in [
            "CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, wf TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS counter (id INT PRIMARY KEY, n BIGINT NOT NULL)",
            "INSERT INTO counter VALUES (1, 0) ON CONFLICT DO NOTHING",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        App::Pg(Datasource::new(pool).await.unwrap())
    };
    APPS.get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(url.to_owned(), app.clone());
    app
}

/// Counts calls of the transaction closures per workflow id (this process only).
static CALLS: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();

fn called(id: &str) {
    *CALLS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(id.to_owned())
        .or_default() += 1;
}

fn calls(id: &str) -> u32 {
    CALLS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(id)
        .copied()
        .unwrap_or(0)
}

/// Inserts one order for this workflow in a transactional step; returns its id.
async fn insert_order(ctx: &Context, url: &str) -> stead::Result<i64> {
    let wf = ctx.workflow_id().to_owned();
    match app(url).await {
        App::Pg(ds) => {
            ctx.transaction(&ds, "insert_order", |tx| {
                let wf = wf.clone();
                Box::pin(async move {
                    called(&wf);
                    let id: i64 =
                        sqlx::query_scalar("INSERT INTO orders (wf) VALUES ($1) RETURNING id")
                            .bind(&wf)
                            .fetch_one(&mut **tx)
                            .await?;
                    Ok(id)
                })
            })
            .await
        }
        App::Lite(ds) => {
            ctx.transaction(&ds, "insert_order", |tx| {
                let wf = wf.clone();
                Box::pin(async move {
                    called(&wf);
                    let id: i64 =
                        sqlx::query_scalar("INSERT INTO orders (wf) VALUES (?1) RETURNING id")
                            .bind(&wf)
                            .fetch_one(&mut **tx)
                            .await?;
                    Ok(id)
                })
            })
            .await
        }
    }
}

/// A transactional insert, then an ordinary step; returns the order's id.
async fn order(ctx: Context, url: String) -> stead::Result<i64> {
    let id = insert_order(&ctx, &url).await?;
    ctx.step("after", || async move { Ok(id) }).await
}

/// Reads the counter, waits so concurrent transactions overlap, writes it back plus one.
async fn bump(ctx: Context, url: String) -> stead::Result<i64> {
    let wf = ctx.workflow_id().to_owned();
    macro_rules! body {
        ($ds:expr, $select:literal, $update:literal) => {
            ctx.transaction(&$ds, "bump", |tx| {
                let wf = wf.clone();
                Box::pin(async move {
                    called(&wf);
                    let n: i64 = sqlx::query_scalar($select).fetch_one(&mut **tx).await?;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    sqlx::query($update).bind(n + 1).execute(&mut **tx).await?;
                    Ok(n + 1)
                })
            })
            .await
        };
    }
    match app(&url).await {
        App::Pg(ds) => body!(
            ds,
            "SELECT n FROM counter WHERE id = 1",
            "UPDATE counter SET n = $1 WHERE id = 1"
        ),
        App::Lite(ds) => body!(
            ds,
            "SELECT n FROM counter WHERE id = 1",
            "UPDATE counter SET n = ?1 WHERE id = 1"
        ),
    }
}

/// A transaction whose closure fails: the step fails once, and is not retried.
async fn refused(ctx: Context, url: String) -> stead::Result<i64> {
    let wf = ctx.workflow_id().to_owned();
    macro_rules! body {
        ($ds:expr) => {
            ctx.transaction(&$ds, "refuse", |_tx| {
                let wf = wf.clone();
                Box::pin(async move {
                    called(&wf);
                    Err::<i64, _>("card declined".into())
                })
            })
            .await
        };
    }
    match app(&url).await {
        App::Pg(ds) => body!(ds),
        App::Lite(ds) => body!(ds),
    }
}

fn builder(db: &TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .workflow("order", order)
        .workflow("bump", bump)
        .workflow("refused", refused)
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    match app(&db.url).await {
        App::Pg(ds) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(ds.pool())
            .await
            .unwrap(),
        App::Lite(ds) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(ds.pool())
            .await
            .unwrap(),
    }
}

both_backends! {
async fn a_transaction_writes_once_and_is_recorded_as_a_step(db) {
    let rt = builder(&db).launch().await.unwrap();
    // Ids are per backend: both backends' tests share this process's call counts.
    let t1 = format!("{:?}-t-1", db.backend);
    let h = rt.start("order", db.url.clone(), WorkflowOptions::with_id(&t1)).await.unwrap();
    let id: i64 = common::within(h.result()).await.unwrap();
    assert_eq!(count(&db, "SELECT count(*) FROM orders WHERE wf LIKE '%t-1'").await, 1);
    assert_eq!(count(&db, "SELECT max(id) FROM orders WHERE wf LIKE '%t-1'").await, id);
    // Recorded in operation_outputs as DBOS records it, so `dbos workflow steps` shows it.
    let steps = rt.client().steps(&t1).await.unwrap();
    let names: Vec<_> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["insert_order", "after"]);
    // A finished workflow's datasource records are gone (its checkpoints cover them).
    let left = if db.is_sqlite() {
        "SELECT count(*) FROM datasource_outputs"
    } else {
        "SELECT count(*) FROM dbos.datasource_outputs"
    };
    assert_eq!(count(&db, left).await, 0);
    // A fork from step 1 runs the transaction again under the new id; from step 2 replays it.
    let again = rt.client().fork(&t1, 2, stead::client::ForkOptions::new()).await.unwrap();
    let replayed: i64 = common::within(again.result()).await.unwrap();
    assert_eq!(replayed, id);
    assert_eq!(calls(&t1), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM orders").await, 1);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn a_failing_transaction_is_recorded_and_not_rerun(db) {
    let rt = builder(&db).launch().await.unwrap();
    let r1 = format!("{:?}-r-1", db.backend);
    let h = rt.start("refused", db.url.clone(), WorkflowOptions::with_id(&r1)).await.unwrap();
    let err = common::within(h.result::<i64>()).await.unwrap_err();
    assert!(err.to_string().contains("card declined"), "{err}");
    assert_eq!(calls(&r1), 1, "a non-database error is not retried");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn contending_transactions_retry_serialization_failures_and_each_applies_once(db) {
    let rt = builder(&db).launch().await.unwrap();
    let n = 6;
    let mut handles = Vec::new();
    for i in 0..n {
        let id = format!("{:?}-c-{i}", db.backend);
        handles.push(rt.start("bump", db.url.clone(), WorkflowOptions::with_id(&id)).await.unwrap());
    }
    let mut seen = Vec::new();
    for h in handles {
        seen.push(common::within(h.result::<i64>()).await.unwrap());
    }
    seen.sort();
    assert_eq!(seen, (1..=n).collect::<Vec<i64>>(), "each increment applied once");
    assert_eq!(count(&db, "SELECT n FROM counter WHERE id = 1").await, n);
    let attempts: u32 = (0..n).map(|i| calls(&format!("{:?}-c-{i}", db.backend))).sum();
    if !db.is_sqlite() {
        // SERIALIZABLE: overlapping read-then-write transactions failed and were run again.
        assert!(attempts > n as u32, "expected retries, saw {attempts} attempts");
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Entry point of the child processes; does nothing when run as an ordinary test.
#[tokio::test]
#[ignore = "run by the kill tests"]
async fn txn_child() {
    let (Ok(url), Ok(mode)) = (std::env::var(CHILD_DB), std::env::var(CHILD_MODE)) else {
        return;
    };
    let db = TestDb::existing(&url);
    app(&url).await;
    let rt = builder(&db).launch().await.unwrap();
    if mode == "hold" {
        rt.inject_fault(Fault::HoldAfterTransactionCommit);
        rt.start("order", url.clone(), WorkflowOptions::with_id("k-1"))
            .await
            .unwrap();
    } else if let Some(n) = mode.strip_prefix("loop:") {
        for i in 0..n.parse::<u32>().unwrap() {
            rt.start(
                "order",
                url.clone(),
                WorkflowOptions::with_id(format!("kl-{i}")),
            )
            .await
            .unwrap();
        }
    }
    std::future::pending::<()>().await;
}

fn spawn_child(db: &TestDb, mode: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "transactions::txn_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DB, &db.url)
        .env(CHILD_MODE, mode)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_for(db: &TestDb, sql: &str, at_least: i64) {
    common::wait::until_async(
        &format!("{sql} reaching {at_least}"),
        Duration::from_millis(50),
        || async { count(db, sql).await >= at_least },
    )
    .await;
}

both_backends! {
async fn a_kill_between_the_app_commit_and_the_checkpoint_writes_once(db) {
    stead::migrate(&db.url, "dbos").await.unwrap();
    app(&db.url).await;
    let mut child = spawn_child(&db, "hold");
    wait_for(&db, "SELECT count(*) FROM orders WHERE wf = 'k-1'", 1).await;
    child.kill().unwrap(); // SIGKILL, after the commit, before the checkpoint
    child.wait().unwrap();
    let checks = db.checks().await;
    let checkpoints = common::scalar(
        &checks,
        "SELECT CAST(count(*) AS TEXT) FROM dbos.operation_outputs WHERE workflow_uuid = 'k-1'",
    )
    .await;
    assert_eq!(checkpoints.as_deref(), Some("0"), "killed before the system checkpoint");

    let rt = builder(&db).launch().await.unwrap();
    let id: i64 = common::within(rt.client().handle("k-1").result()).await.unwrap();
    assert_eq!(count(&db, "SELECT count(*) FROM orders WHERE wf = 'k-1'").await, 1);
    assert_eq!(count(&db, "SELECT max(id) FROM orders WHERE wf = 'k-1'").await, id);
    assert_eq!(calls("k-1"), 0, "the recovery replayed the recorded output");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Starts `n` workflows in a child, kills it with SIGKILL after a random while, `rounds`
/// times; then finishes them here. Every workflow's order must exist exactly once.
async fn kill_loop(db: &TestDb, n: u32, rounds: u32) {
    stead::migrate(&db.url, "dbos").await.unwrap();
    app(&db.url).await;
    static SEED: AtomicU32 = AtomicU32::new(7);
    for _ in 0..rounds {
        let mut child = spawn_child(db, &format!("loop:{n}"));
        let jitter = SEED.fetch_add(97, Ordering::Relaxed) % 400;
        tokio::time::sleep(Duration::from_millis(600 + u64::from(jitter))).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let rt = builder(db).launch().await.unwrap();
    for i in 0..n {
        let id = format!("kl-{i}");
        rt.start("order", db.url.clone(), WorkflowOptions::with_id(&id))
            .await
            .unwrap();
        let _: i64 =
            tokio::time::timeout(Duration::from_secs(120), rt.client().handle(&id).result())
                .await
                .unwrap()
                .unwrap();
    }
    assert_eq!(count(db, "SELECT count(*) FROM orders").await, i64::from(n));
    assert_eq!(
        count(db, "SELECT count(DISTINCT wf) FROM orders").await,
        i64::from(n)
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

both_backends! {
async fn workflows_under_a_kill_loop_write_no_duplicates(db) {
    kill_loop(&db, 40, 3).await;
}
}

/// The soak: 500 workflows, killed ten times. Run by `.ci/run`.
#[tokio::test]
#[ignore = "soak: run by .ci/run"]
async fn five_hundred_workflows_under_a_kill_loop_write_no_duplicates() {
    kill_loop(&TestDb::new().await, 500, 10).await;
    kill_loop(&TestDb::sqlite().await, 500, 10).await;
}

/// A transactional insert, then a wait for "go", then the order's id.
async fn gated_order(ctx: Context, url: String) -> stead::Result<i64> {
    let id = insert_order(&ctx, &url).await?;
    let _: Option<String> = ctx.recv(Some("go"), Duration::from_secs(60)).await?;
    Ok(id)
}

/// Runs `tests/py/datasource.py <command> <id>` with DBOS's Python.
async fn py_datasource(db: &TestDb, command: &str, id: &str) -> serde_json::Value {
    let python = common::dbos_py::dbos_cli().with_file_name("python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/datasource.py");
    let url = common::dbos_py::sqlalchemy_url(&db.url);
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args([&url, &url, command, id])
        .current_dir(std::env::temp_dir())
        .env_remove("DBOS_SYSTEM_DATABASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "datasource.py {command}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    last["ok"].clone()
}

#[tokio::test]
async fn dbos_python_datasources_share_the_application_database_with_stead() {
    require_dbos!();
    let db = TestDb::new().await;
    app(&db.url).await;
    let launch = || builder(&db).workflow("gated_order", gated_order).launch();
    let rt = launch().await.unwrap();
    let h = rt
        .start(
            "gated_order",
            db.url.clone(),
            WorkflowOptions::with_id("g-1"),
        )
        .await
        .unwrap();
    wait_for(&db, "SELECT count(*) FROM orders WHERE wf = 'g-1'", 1).await;
    // While the workflow runs, DBOS reads stead's record of its transaction by its own rules.
    let order_id = count(&db, "SELECT max(id) FROM orders WHERE wf = 'g-1'").await;
    assert_eq!(
        py_datasource(&db, "peek", "g-1").await,
        serde_json::json!(order_id)
    );
    rt.client().send("g-1", &"go", Some("go")).await.unwrap();
    assert_eq!(common::within(h.result::<i64>()).await.unwrap(), order_id);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    // A DBOS datasource transaction on the same tables and datasource_outputs.
    let py_id = py_datasource(&db, "txn", "py-1").await;
    assert_eq!(count(&db, "SELECT count(*) FROM orders").await, 2);
    assert_eq!(
        count(&db, "SELECT max(id) FROM orders WHERE wf = 'py-1'").await,
        py_id.as_i64().unwrap()
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM dbos.datasource_outputs").await,
        0
    );

    // DBOS's client forks the stead workflow from step 2: stead replays its transaction.
    let forked = py_datasource(&db, "fork", "g-1").await;
    let forked = forked.as_str().unwrap().to_owned();
    let rt = launch().await.unwrap();
    rt.client().send(&forked, &"go", Some("go")).await.unwrap();
    let again: i64 = common::within(rt.client().handle(&forked).result())
        .await
        .unwrap();
    assert_eq!(again, order_id);
    assert_eq!(
        count(&db, "SELECT count(*) FROM orders").await,
        2,
        "no second order"
    );
    assert_eq!(calls(&forked), 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

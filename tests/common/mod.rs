//! Shared harness for the integration tests: a fresh database per test, on Postgres or SQLite.
#![allow(dead_code)]

pub mod browser;
pub mod catalog;
pub mod citus;
pub mod cluster;
#[macro_use]
pub mod dbos_py;
#[macro_use]
pub mod dbos_ts;
pub mod http;
pub mod jobs;
pub mod marks;
pub mod proxy;
pub mod scratch;
pub mod wait;

use futures::future::BoxFuture;
use sqlx::any::AnyPoolOptions;
use sqlx::postgres::PgPoolOptions;
use sqlx::AnyPool;
use sqlx::{AssertSqlSafe, Executor, PgPool};

pub use scratch::{server_url, Backend, TestDb};

/// The harness's own checks on a test database (the database itself is `scratch`'s, shared
/// with the crate's storage suite).
impl TestDb {
    /// A small pool for the test's own checks, on either backend. Tables are reached as
    /// `dbos.<table>` on both: the SQLite file is attached under that name.
    pub async fn checks(&self) -> AnyPool {
        sqlx::any::install_default_drivers();
        match self.backend {
            Backend::Postgres | Backend::Citus(_) => AnyPoolOptions::new()
                .max_connections(4)
                .connect(&self.url)
                .await
                .expect("connect to test database"),
            Backend::Sqlite => {
                let file = self.url.trim_start_matches("sqlite://").to_owned();
                AnyPoolOptions::new()
                    .max_connections(4)
                    .after_connect(move |conn, _| {
                        let attach = format!("ATTACH DATABASE '{file}' AS dbos");
                        Box::pin(async move {
                            conn.execute(AssertSqlSafe(attach)).await?;
                            conn.execute("PRAGMA busy_timeout = 30000").await?;
                            Ok(())
                        })
                    })
                    .connect(&self.url)
                    .await
                    .expect("open test database")
            }
        }
    }

    /// A Postgres pool, for checks only Postgres can answer (catalog, functions, wire).
    pub async fn pool(&self) -> PgPool {
        assert!(
            matches!(self.backend, Backend::Postgres | Backend::Citus(_)),
            "a Postgres-only check"
        );
        PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.url)
            .await
            .expect("connect to test database")
    }
}

/// Reports a test skipped for a missing prerequisite: one line straight to the terminal (the
/// harness does not capture it), or a failure when `CI` is set, where nothing may be skipped.
pub fn skip(place: &str, why: &str) {
    use std::io::Write;
    assert!(
        std::env::var_os("CI").is_none(),
        "{place}: this test must run in CI: {why}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED {place}: {why}");
}

/// Skips the calling test (returns from it) unless a Citus cluster is named (`STEAD_TEST_CITUS`).
#[macro_export]
macro_rules! require_citus {
    () => {
        if $crate::common::scratch::citus_url().is_none() {
            $crate::common::skip(
                concat!(file!(), ":", line!()),
                "STEAD_TEST_CITUS names no Citus coordinator (../shared/tools/citus.sh up 2)",
            );
            return;
        }
    };
}

/// Skips the calling test (returns from it) unless Chromium and chromedriver are installed.
#[macro_export]
macro_rules! require_browser {
    () => {
        if let Err(why) = $crate::common::browser::locate() {
            $crate::common::skip(concat!(file!(), ":", line!()), &why);
            return;
        }
    };
}

/// Runs each test on both backends: `both_backends! { async fn name(db) { .. } }` makes a
/// module `name` with tests `postgres` and `sqlite`, each given a fresh `TestDb`.
#[macro_export]
macro_rules! both_backends {
    ($($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn run($db: $crate::common::TestDb) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                run($crate::common::TestDb::new().await).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                run($crate::common::TestDb::sqlite().await).await
            }
        }
    )*};
}

/// Inside a `both_backends!` body whose workflows keep process-wide state (statics): makes the
/// two backends' runs of that test take turns. Hold the guard for the whole run and reset the
/// statics right after taking it.
#[macro_export]
macro_rules! one_backend_at_a_time {
    () => {{
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        TURN.lock().await
    }};
}

/// A builder on `db` with a test-friendly fixed identity, and a small pool: eight tests at a
/// time must fit a default server's 100 connections (a runtime holds nine more for its lanes,
/// listener and lease).
pub fn builder(db: &TestDb) -> stead::RuntimeBuilder {
    stead::Runtime::builder()
        .database_url(db.stead_url())
        .pool_size(4)
        .app_version("test-1")
        .executor_id("test-executor")
        .internal_queue_poll(std::time::Duration::from_millis(100))
}

/// A pool the checks below run on: Postgres (`TestDb::pool`) or either backend
/// (`TestDb::checks`).
pub trait CheckPool: Sync {
    fn text<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Option<String>, sqlx::Error>>;
    fn count<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<i64, sqlx::Error>>;
}

macro_rules! check_pool {
    ($pool:ty) => {
        impl CheckPool for $pool {
            fn text<'a>(
                &'a self,
                sql: &'a str,
            ) -> BoxFuture<'a, Result<Option<String>, sqlx::Error>> {
                Box::pin(
                    sqlx::query_scalar::<_, Option<String>>(AssertSqlSafe(sql.to_owned()))
                        .fetch_one(self),
                )
            }
            fn count<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<i64, sqlx::Error>> {
                Box::pin(
                    sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.to_owned())).fetch_one(self),
                )
            }
        }
    };
}
check_pool!(PgPool);
check_pool!(AnyPool);

/// A client of application `app` on `db`.
pub async fn client(db: &TestDb, app: &str) -> stead::Client {
    let options = stead::client::ClientOptions {
        app_name: Some(app.into()),
        ..Default::default()
    };
    stead::Client::connect_with(&db.url, options)
        .await
        .expect("connect a client")
}

/// Reads one column of one row as text, for assertions on stored rows.
pub async fn scalar(pool: &impl CheckPool, sql: &str) -> Option<String> {
    pool.text(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The stored status of workflow `id`, or `None` when there is no such row.
pub async fn status_of(pool: &impl CheckPool, id: &str) -> Option<String> {
    let sql = format!("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = '{id}'");
    match pool.count(&format!("SELECT count(*) FROM ({sql}) s")).await {
        Ok(0) => None,
        _ => scalar(pool, &sql).await,
    }
}

/// Waits until workflow `id` has status `want` (a progress wait: bounded by [`wait::SETUP`]).
pub async fn wait_status(pool: &impl CheckPool, id: &str, want: &str) {
    let sql = format!(
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = '{id}' AND status = '{want}'"
    );
    wait_count(pool, &sql, 1).await;
}

/// Waits until `sql` (a count query) returns at least `n`, or panics after [`wait::SETUP`]: what
/// it waits for always comes, sooner or later with the machine's load. Errors count as "not yet"
/// (the tables may not exist until another process migrates).
pub async fn wait_count(pool: &impl CheckPool, sql: &str, n: i64) {
    let deadline = std::time::Instant::now() + wait::SETUP;
    loop {
        let got = pool.count(sql).await;
        if got.as_ref().is_ok_and(|&got| got >= n) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out: {sql} = {got:?}, wanted {n}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

pub mod wire;

/// Awaits `f`, failing the test instead of hanging: a guard against a hang, not a measure, so
/// bounded by [`wait::SETUP`].
pub async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(wait::SETUP, f)
        .await
        .unwrap_or_else(|_| panic!("timed out after {:?}", wait::SETUP))
}

static BODY_RUNS: std::sync::OnceLock<
    std::sync::Mutex<std::collections::HashMap<(String, u32), u32>>,
> = std::sync::OnceLock::new();

/// Runs `steps` steps, each counting its body's run ([`count_body`]) and pausing `pause`;
/// returns `0 + 1 + … + (steps - 1)`. The workload of the outage and exhaustion tests.
pub async fn counted_steps(
    ctx: &stead::Context,
    steps: u32,
    pause: std::time::Duration,
) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 0..steps {
        let id = ctx.workflow_id().to_owned();
        sum += ctx
            .step("work", move || {
                let id = id.clone();
                async move {
                    count_body(&id, i);
                    tokio::time::sleep(pause).await;
                    Ok(i)
                }
            })
            .await?;
    }
    Ok(sum)
}

/// Counts one run of step `i`'s body in workflow `id` (in this process).
pub fn count_body(id: &str, i: u32) {
    let runs = BODY_RUNS.get_or_init(Default::default);
    *runs.lock().unwrap().entry((id.to_owned(), i)).or_default() += 1;
}

/// Each counted step body of the workflows whose id starts with `prefix`, and how often it ran.
pub fn body_runs_by_step(prefix: &str) -> Vec<((String, u32), u32)> {
    let runs = BODY_RUNS.get_or_init(Default::default).lock().unwrap();
    let mut counted: Vec<_> = runs
        .iter()
        .filter(|((id, _), _)| id.starts_with(prefix))
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    counted.sort();
    counted
}

/// How often each counted step body of the workflows whose id starts with `prefix` ran.
pub fn body_runs(prefix: &str) -> Vec<u32> {
    let runs = BODY_RUNS.get_or_init(Default::default).lock().unwrap();
    runs.iter()
        .filter(|((id, _), _)| id.starts_with(prefix))
        .map(|(_, n)| *n)
        .collect()
}

/// How often step `i`'s body of workflow `id` ran (in this process).
pub fn body_run(id: &str, i: u32) -> u32 {
    let runs = BODY_RUNS.get_or_init(Default::default).lock().unwrap();
    runs.get(&(id.to_owned(), i)).copied().unwrap_or(0)
}

/// A child process killed (and reaped) when the test ends, even when it fails.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This test binary as a child process running its ignored test `path` (as
/// `recovery::crash_child`), stdout discarded; the caller adds the environment and spawns it.
pub fn child_test(path: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", path, "--ignored", "--nocapture"])
        .stdout(std::process::Stdio::null());
    cmd
}

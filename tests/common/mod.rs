//! Shared harness for the integration tests: a fresh Postgres database per test.
#![allow(dead_code)]

pub mod browser;
pub mod catalog;
pub mod dbos_py;
pub mod http;

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Executor, PgPool};

/// The server the tests use: `STEAD_TEST_PG` (a URL without a database name), else local trust.
pub fn server_url() -> String {
    std::env::var("STEAD_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A database created for one test and dropped when the value is dropped.
pub struct TestDb {
    pub name: String,
    pub url: String,
    owned: bool,
}

impl TestDb {
    /// Creates an empty database with a unique name.
    pub async fn new() -> TestDb {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "stead_t_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let admin = admin_pool().await;
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create test database");
        admin.close().await;
        let url = format!("{}/{name}", server_url());
        TestDb {
            name,
            url,
            owned: true,
        }
    }

    /// A database created by another process (a test's child); it is not dropped here.
    pub fn existing(url: &str) -> TestDb {
        TestDb {
            name: url.rsplit('/').next().unwrap_or_default().to_owned(),
            url: url.to_owned(),
            owned: false,
        }
    }

    /// A small pool on this database, for the test's own checks.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.url)
            .await
            .expect("connect to test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with its own runtime to finish it.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let admin = admin_pool().await;
                let _ = admin
                    .execute(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .await;
                admin.close().await;
            });
        })
        .join();
    }
}

async fn admin_pool() -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{}/postgres", server_url()))
        .await
        .expect("connect to the admin database (is Postgres up?)")
}

/// A builder on `db` with a test-friendly fixed identity.
pub fn builder(db: &TestDb) -> stead::RuntimeBuilder {
    stead::Runtime::builder()
        .database_url(&db.url)
        .app_version("test-1")
        .executor_id("test-executor")
        .internal_queue_poll(std::time::Duration::from_millis(100))
}

/// Reads one column of one row as text, for assertions on stored rows.
pub async fn scalar(pool: &PgPool, sql: &str) -> Option<String> {
    sqlx::query_scalar::<_, Option<String>>(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Waits until `sql` (a count query) returns at least `n`, or panics after `secs` seconds.
/// Errors count as "not yet" (the tables may not exist until another process migrates).
pub async fn wait_count(pool: &PgPool, sql: &str, n: i64, secs: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let got = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql.to_owned()))
            .fetch_one(pool)
            .await;
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

/// Awaits `f`, failing the test instead of hanging if it takes over a minute.
pub async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(60), f)
        .await
        .expect("timed out after 60 s")
}

static BODY_RUNS: std::sync::OnceLock<
    std::sync::Mutex<std::collections::HashMap<(String, u32), u32>>,
> = std::sync::OnceLock::new();

/// Counts one run of step `i`'s body in workflow `id` (in this process).
pub fn count_body(id: &str, i: u32) {
    let runs = BODY_RUNS.get_or_init(Default::default);
    *runs.lock().unwrap().entry((id.to_owned(), i)).or_default() += 1;
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

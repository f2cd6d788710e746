//! Scratch databases: a fresh Postgres database or SQLite file per test, dropped with its value.
//!
//! One copy for every test of the repository: the integration harness (`tests/common`) uses it
//! as a module, and the crate's own storage suite (`src/sysdb/suite`, `cfg(test)` only) through
//! `#[path]`. So it uses nothing beyond what both build with: std, sqlx, tokio and uuid.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

/// The server the tests use: `STEAD_TEST_PG` (a URL without a database name), else local trust.
pub fn server_url() -> String {
    std::env::var("STEAD_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// Which system database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// A database created for one test and dropped when the value is dropped (also when the test
/// panics): a Postgres database, or a SQLite file in a fresh temporary directory.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub backend: Backend,
    owned: bool,
    dir: Option<PathBuf>,
}

/// A name no other test database has, in this process or another: `stead_t_<pid>_<n>_<rand>`.
fn unique_name() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "stead_t_{}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// A connection to the server's `postgres` database, to create and drop databases.
async fn admin() -> PgConnection {
    PgConnection::connect(&format!("{}/postgres", server_url()))
        .await
        .expect("connect to the admin database (is Postgres up?)")
}

impl TestDb {
    /// Creates an empty Postgres database with a unique name.
    pub async fn new() -> TestDb {
        let name = unique_name();
        let mut admin = admin().await;
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create test database");
        let _ = admin.close().await;
        let url = format!("{}/{name}", server_url());
        TestDb {
            name,
            url,
            backend: Backend::Postgres,
            owned: true,
            dir: None,
        }
    }

    /// A SQLite file (not created yet) in a fresh temporary directory.
    pub async fn sqlite() -> TestDb {
        let name = unique_name();
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).expect("create test directory");
        let url = format!("sqlite://{}", dir.join("stead.sqlite").display());
        TestDb {
            name,
            url,
            backend: Backend::Sqlite,
            owned: true,
            dir: Some(dir),
        }
    }

    /// A fresh database on `backend`.
    pub async fn on(backend: Backend) -> TestDb {
        match backend {
            Backend::Postgres => TestDb::new().await,
            Backend::Sqlite => TestDb::sqlite().await,
        }
    }

    /// A database created by another process (a test's child); it is not dropped here.
    pub fn existing(url: &str) -> TestDb {
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        };
        TestDb {
            name: url.rsplit('/').next().unwrap_or_default().to_owned(),
            url: url.to_owned(),
            backend,
            owned: false,
            dir: None,
        }
    }

    pub fn is_sqlite(&self) -> bool {
        self.backend == Backend::Sqlite
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop runs inside the test's runtime; finish on a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok(mut admin) =
                    PgConnection::connect(&format!("{}/postgres", server_url())).await
                {
                    let _ = admin.execute(AssertSqlSafe(sql)).await;
                    let _ = admin.close().await;
                }
            });
        })
        .join();
    }
}

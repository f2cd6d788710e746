//! Scratch databases: a fresh Postgres database or SQLite file per test, dropped with its value.
//!
//! One copy for every test of the repository: the integration harness (`tests/common`) uses it
//! as a module, and the crate's own storage suite (`src/sysdb/suite`, `cfg(test)` only) through
//! `#[path]`. So it uses nothing beyond what both build with: std, sqlx, tokio and uuid.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The server the tests use: `STEAD_TEST_PG` (a URL without a database name), else local trust.
pub fn server_url() -> String {
    std::env::var("STEAD_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// The Citus cluster the sharded tests use: `STEAD_TEST_CITUS`, a coordinator's URL without a
/// database name (`.ci/run` starts one with `../shared/tools/citus.sh up 2`); `None` without it.
pub fn citus_url() -> Option<String> {
    std::env::var("STEAD_TEST_CITUS")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Which system database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
    /// A database of its own on the Citus cluster, sharded into this many buckets.
    Citus(u16),
}

/// A database created for one test and dropped when the value is dropped (also when the test
/// panics): a Postgres database, or a SQLite file in a fresh temporary directory.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub backend: Backend,
    owned: bool,
    dir: Option<PathBuf>,
    /// The test's turn on the server (`Turn`), released after the database is dropped.
    _turn: Option<Turn>,
}

/// One test's share of the server's connections. Tests run eight at a time and a runtime holds
/// a dozen connections or more; a server with the default `max_connections` (100) refuses some
/// when too many Postgres tests overlap. So Postgres tests take turns: as many at once as the
/// server has room for, at about 18 connections each. A test's second database (on the same
/// thread) rides on its first turn, so no test waits for itself.
struct Turn {
    thread: ThreadId,
    _permit: Option<OwnedSemaphorePermit>,
    _citus: Option<tokio::sync::SemaphorePermit<'static>>,
}

/// Turns held, by the thread that holds them.
static HELD: Mutex<Option<HashMap<ThreadId, usize>>> = Mutex::new(None);

impl Turn {
    async fn take() -> Turn {
        static TURNS: tokio::sync::OnceCell<Arc<Semaphore>> = tokio::sync::OnceCell::const_new();
        let thread = std::thread::current().id();
        let nested = {
            let mut held = HELD.lock().unwrap();
            let count = held
                .get_or_insert_with(HashMap::new)
                .entry(thread)
                .or_default();
            *count += 1;
            *count > 1
        };
        if nested {
            return Turn {
                thread,
                _permit: None,
                _citus: None,
            };
        }
        let turns = TURNS
            .get_or_init(|| async {
                let mut admin = admin().await;
                let max: String = sqlx::query_scalar("SHOW max_connections")
                    .fetch_one(&mut admin)
                    .await
                    .unwrap_or_else(|_| "100".into());
                let _ = admin.close().await;
                let max: usize = max.parse().unwrap_or(100);
                Arc::new(Semaphore::new((max.saturating_sub(10) / 18).clamp(1, 8)))
            })
            .await
            .clone();
        let permit = turns
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        Turn {
            thread,
            _permit: Some(permit),
            _citus: None,
        }
    }
}

impl Turn {
    /// A turn on the Citus cluster: its nodes keep the default `max_connections` (100), and
    /// each runtime's connections fan out to the workers, so three tests at a time.
    async fn citus() -> Turn {
        static TURNS: Semaphore = Semaphore::const_new(3);
        Turn {
            thread: std::thread::current().id(),
            _permit: None,
            _citus: Some(
                TURNS
                    .acquire()
                    .await
                    .expect("the semaphore is never closed"),
            ),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self._citus.is_some() {
            return; // not counted in HELD
        }
        if let Some(held) = HELD.lock().unwrap().as_mut() {
            if let Some(count) = held.get_mut(&self.thread) {
                *count = count.saturating_sub(1);
            }
        }
    }
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
        let turn = Turn::take().await;
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
            _turn: Some(turn),
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
            _turn: None,
        }
    }

    /// A fresh database on `backend`.
    pub async fn on(backend: Backend) -> TestDb {
        match backend {
            Backend::Postgres => TestDb::new().await,
            Backend::Sqlite => TestDb::sqlite().await,
            Backend::Citus(shards) => TestDb::citus(shards).await,
        }
    }

    /// A database of its own on the Citus cluster (`citus_url`), with the `citus` extension on
    /// every node and the workers added, as an operator sets one up; stead's URL for it
    /// (`stead_url`) asks for `shards` buckets. Panics without a cluster: callers check
    /// `citus_url` first.
    pub async fn citus(shards: u16) -> TestDb {
        let server = citus_url().expect("STEAD_TEST_CITUS names a Citus coordinator");
        let name = unique_name();
        let turn = Turn::citus().await;
        citus::create(&server, &name).await;
        TestDb {
            url: format!("{server}/{name}"),
            name,
            backend: Backend::Citus(shards),
            owned: true,
            dir: None,
            _turn: Some(turn),
        }
    }

    /// The URL stead is given: on Citus, with the layout's request (`sharding=citus&shards=N`,
    /// read by the first migration; later ones find the layout in the database).
    pub fn stead_url(&self) -> String {
        match self.backend {
            Backend::Citus(n) => format!("{}?sharding=citus&shards={n}", self.url),
            _ => self.url.clone(),
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
            _turn: None,
        }
    }

    pub fn is_sqlite(&self) -> bool {
        self.backend == Backend::Sqlite
    }
}

impl Backend {
    /// The same backend with one bucket (a Citus layout not spread over several), for a test
    /// that writes a workflow's rows itself.
    pub fn one_bucket(self) -> Backend {
        match self {
            Backend::Citus(_) => Backend::Citus(1),
            other => other,
        }
    }
}

/// Databases of their own on a Citus cluster: made as an operator makes one (the database on
/// every node, the extension in each, the workers added), dropped on every node.
mod citus {
    use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

    async fn connect(url: &str) -> PgConnection {
        PgConnection::connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect to the Citus cluster at {url}: {e}"))
    }

    /// The workers' `host:port`s, as the cluster's own `citus` database lists them.
    async fn workers(server: &str) -> Vec<(String, i32)> {
        let mut conn = connect(&format!("{server}/citus")).await;
        let nodes = sqlx::query_as(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 ORDER BY nodeid",
        )
        .fetch_all(&mut conn)
        .await
        .expect("the cluster's workers");
        let _ = conn.close().await;
        nodes
    }

    pub(super) async fn create(server: &str, name: &str) {
        let mut admin = connect(&format!("{server}/citus")).await;
        admin
            .execute("SET citus.enable_create_database_propagation = on")
            .await
            .expect("propagate CREATE DATABASE");
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create a Citus test database");
        let _ = admin.close().await;
        let (host, port) = host_port(server);
        let mut db = connect(&format!("{server}/{name}")).await;
        db.execute("CREATE EXTENSION IF NOT EXISTS citus")
            .await
            .expect("citus on the coordinator");
        let workers = workers(server).await;
        for (worker_host, worker_port) in &workers {
            let mut w = connect(&format!(
                "postgres://postgres@{worker_host}:{worker_port}/{name}"
            ))
            .await;
            w.execute("CREATE EXTENSION IF NOT EXISTS citus")
                .await
                .expect("citus on a worker");
            let _ = w.close().await;
        }
        sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
            .bind(&host)
            .bind(port)
            .execute(&mut db)
            .await
            .expect("the coordinator's address");
        // Adding a node syncs metadata to every node: another test's database being set up at
        // once may hold a lock it needs for a moment, so a failed attempt is tried again.
        for (worker_host, worker_port) in &workers {
            let mut attempt = 0;
            loop {
                let added = sqlx::query("SELECT citus_add_node($1, $2)")
                    .bind(worker_host)
                    .bind(worker_port)
                    .execute(&mut db)
                    .await;
                match added {
                    Ok(_) => break,
                    Err(e) if attempt >= 10 => panic!("add a worker: {e}"),
                    Err(_) => {
                        attempt += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                    }
                }
            }
        }
        let _ = db.close().await;
    }

    /// The coordinator's host and port, from a URL `postgres://user@host:port`.
    fn host_port(server: &str) -> (String, i32) {
        let rest = server.rsplit('@').next().unwrap_or(server);
        let rest = rest
            .trim_start_matches("postgres://")
            .trim_start_matches("postgresql://");
        let hostport = rest.split('/').next().unwrap_or(rest);
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(5432)),
            None => (hostport.to_owned(), 5432),
        }
    }

    pub(super) async fn drop(server: &str, name: &str) {
        if let Ok(mut admin) = PgConnection::connect(&format!("{server}/citus")).await {
            let _ = admin
                .execute("SET citus.enable_create_database_propagation = on")
                .await;
            let _ = admin
                .execute(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .await;
            let _ = admin.close().await;
        }
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
        if let Backend::Citus(_) = self.backend {
            let (server, name) = (citus_url().unwrap_or_default(), self.name.clone());
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(citus::drop(&server, &name));
            })
            .join();
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

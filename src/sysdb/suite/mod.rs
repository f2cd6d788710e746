//! The shared store suite: every [`Store`] and [`Session`] operation tested directly (no
//! runtime, no actors) on both implementations, as River's driver suite tests its drivers.
//!
//! A test is an `async fn(Kind)` in one of the concept files; [`store_tests!`] instantiates it
//! once on Postgres (a fresh database) and once on SQLite (a fresh file). A new storage
//! operation gets its test here. Rows are checked through [`Fixture`]'s probe, a connection of
//! its own that reads (`dbos.` qualifies a table on either backend).

mod attributes;
mod claims;
mod datasource;
mod definitions;
mod fleet;
mod manage;
mod reads;
mod rewind;
mod writes;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, PgPool, SqlitePool};

use super::{
    connect, next_created_at, ClaimOutcome, ClaimRequest, NewWorkflow, Session, StartOutcome,
    StepOutcome, StepWrite, Store, DEFAULT_SCHEMA,
};
use crate::base::clock::now_ms;
use crate::base::queue::Queue;

/// Instantiates each named test on both backends.
macro_rules! store_tests {
    ($($name:ident),* $(,)?) => {
        mod on_postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::sysdb::suite::Kind::Postgres).await;
                }
            )*
        }
        mod on_sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($crate::sysdb::suite::Kind::Sqlite).await;
                }
            )*
        }
    };
}
pub(super) use store_tests;

/// Which implementation a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Postgres,
    Sqlite,
}

/// The server the tests use: `STEAD_TEST_PG` (a URL without a database name), else local trust.
pub(crate) fn server_url() -> String {
    std::env::var("STEAD_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

fn unique_name() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "stead_s_{}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// A throwaway Postgres database, dropped with this value (also when the test panics).
pub(crate) struct PgScratch {
    name: String,
    pub(crate) url: String,
}

impl PgScratch {
    pub(crate) async fn new() -> PgScratch {
        let name = unique_name();
        let mut admin = PgConnection::connect(&format!("{}/postgres", server_url()))
            .await
            .expect("connect to the test server");
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .expect("create a test database");
        let _ = admin.close().await;
        let url = format!("{}/{name}", server_url());
        PgScratch { name, url }
    }
}

impl Drop for PgScratch {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop runs inside the test's runtime; finish on a thread with its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let admin = PgConnection::connect(&format!("{}/postgres", server_url()));
                if let Ok(mut admin) = admin.await {
                    let _ = admin.execute(AssertSqlSafe(sql)).await;
                }
            });
        })
        .join();
    }
}

/// A temporary directory holding a SQLite file, removed with this value.
struct LiteScratch {
    dir: std::path::PathBuf,
    url: String,
}

impl LiteScratch {
    fn new() -> LiteScratch {
        let dir = std::env::temp_dir().join(unique_name());
        std::fs::create_dir_all(&dir).expect("create a test directory");
        let url = format!("sqlite://{}", dir.join("stead.sqlite").display());
        LiteScratch { dir, url }
    }
}

impl Drop for LiteScratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

enum Scratch {
    Postgres(PgScratch),
    Sqlite(LiteScratch),
}

impl Scratch {
    fn url(&self) -> &str {
        match self {
            Scratch::Postgres(pg) => &pg.url,
            Scratch::Sqlite(lite) => &lite.url,
        }
    }
}

/// Reads rows on its own connection, to check what an operation wrote.
enum Probe {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// A store on a fresh database, with a probe on the same database.
pub(crate) struct Fixture {
    pub store: Arc<dyn Store>,
    probe: Probe,
    // Last: the database goes once the pools above are dropped.
    scratch: Scratch,
}

impl Fixture {
    /// The probe's pool on Postgres (as an application database would be).
    pub(crate) fn pg_pool(&self) -> Option<PgPool> {
        match &self.probe {
            Probe::Postgres(pool) => Some(pool.clone()),
            Probe::Sqlite(_) => None,
        }
    }

    /// The probe's pool on SQLite (as an application database would be).
    pub(crate) fn sqlite_pool(&self) -> Option<SqlitePool> {
        match &self.probe {
            Probe::Sqlite(pool) => Some(pool.clone()),
            Probe::Postgres(_) => None,
        }
    }

    /// A migrated store.
    pub(crate) async fn new(kind: Kind) -> Fixture {
        let f = Fixture::empty(kind).await;
        f.store.migrate().await.expect("migrate");
        f
    }

    /// A store on an empty database (nothing migrated).
    pub(crate) async fn empty(kind: Kind) -> Fixture {
        let scratch = match kind {
            Kind::Postgres => Scratch::Postgres(PgScratch::new().await),
            Kind::Sqlite => Scratch::Sqlite(LiteScratch::new()),
        };
        let store = Fixture::connect(&scratch).await;
        let probe = match kind {
            Kind::Postgres => Probe::Postgres(
                PgPoolOptions::new()
                    .max_connections(2)
                    .connect(scratch.url())
                    .await
                    .expect("probe"),
            ),
            // After the store: it created the file.
            Kind::Sqlite => Probe::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(2)
                    .connect(scratch.url())
                    .await
                    .expect("probe"),
            ),
        };
        Fixture {
            store,
            probe,
            scratch,
        }
    }

    async fn connect(scratch: &Scratch) -> Arc<dyn Store> {
        connect(
            scratch.url(),
            DEFAULT_SCHEMA,
            4,
            Duration::from_secs(10),
            true,
        )
        .await
        .expect("connect")
    }

    /// Another store on the same database (another process, as far as the database knows).
    pub(crate) async fn reconnect(&self) -> Arc<dyn Store> {
        Fixture::connect(&self.scratch).await
    }

    pub(crate) fn is_sqlite(&self) -> bool {
        matches!(self.probe, Probe::Sqlite(_))
    }

    /// A lane's session.
    pub(crate) async fn session(&self) -> Box<dyn Session> {
        self.store.open_session().await.expect("open a session")
    }

    /// The single text value of `sql` (`dbos.` qualifies a table); `None` for NULL or no row.
    pub(crate) async fn text(&self, sql: &str) -> Option<String> {
        self.scalar(sql).await
    }

    /// The single integer value of `sql`; `None` for NULL or no row.
    pub(crate) async fn int(&self, sql: &str) -> Option<i64> {
        self.scalar(sql).await
    }

    /// The single value of `sql` on either backend (SQLite has no `dbos.` schema prefix).
    async fn scalar<T>(&self, sql: &str) -> Option<T>
    where
        T: Send + Unpin,
        for<'r> T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
        for<'r> T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
    {
        match &self.probe {
            Probe::Postgres(pool) => sqlx::query_scalar::<_, Option<T>>(AssertSqlSafe(sql))
                .fetch_optional(pool)
                .await
                .expect(sql)
                .flatten(),
            Probe::Sqlite(pool) => {
                let sql = sql.replace("dbos.", "");
                sqlx::query_scalar::<_, Option<T>>(AssertSqlSafe(sql.clone()))
                    .fetch_optional(pool)
                    .await
                    .expect(&sql)
                    .flatten()
            }
        }
    }

    /// A column of workflow `id`'s status row, as text.
    pub(crate) async fn column(&self, id: &str, column: &str) -> Option<String> {
        let cast = if self.is_sqlite() { "TEXT" } else { "text" };
        self.text(&format!(
            "SELECT CAST({column} AS {cast}) FROM dbos.workflow_status WHERE workflow_uuid = '{id}'"
        ))
        .await
    }

    /// How many rows of `table` belong to workflow `id`.
    pub(crate) async fn rows_of(&self, table: &str, id: &str) -> i64 {
        self.int(&format!(
            "SELECT count(*) FROM dbos.{table} WHERE workflow_uuid = '{id}'"
        ))
        .await
        .unwrap_or(0)
    }

    /// Creates `w` through a session.
    pub(crate) async fn start(&self, w: &NewWorkflow) -> StartOutcome {
        let mut session = self.session().await;
        let mut out = session.start(&[w]).await.expect("start");
        out.pop().expect("an outcome")
    }

    /// A workflow `id` started here and owned by `owner_of(id)`.
    pub(crate) async fn running(&self, id: &str) -> NewWorkflow {
        let w = NewWorkflow {
            owner: Some(owner_of(id)),
            ..workflow(id)
        };
        assert_eq!(self.start(&w).await, StartOutcome::Created);
        w
    }

    /// Records step `function_id` of running workflow `id` with `output`.
    pub(crate) async fn step(&self, id: &str, function_id: u32, output: &str) -> StepOutcome {
        let mut session = self.session().await;
        let s = step_write(id, function_id, output);
        session.checkpoint(&[&s]).await.expect("checkpoint")[0].clone()
    }

    /// Claims with `request` through a session.
    pub(crate) async fn claim(&self, request: &ClaimRequest) -> ClaimOutcome {
        let mut session = self.session().await;
        session.claim(request).await.expect("claim")
    }
}

/// The owner token the helpers give workflow `id`.
pub(crate) fn owner_of(id: &str) -> String {
    format!("owner-{id}")
}

/// A workflow `id` named `wf`, enqueued nowhere and owned by nobody, for executor `e1` of
/// version `v1`; tests change what they need.
pub(crate) fn workflow(id: &str) -> NewWorkflow {
    NewWorkflow {
        id: id.to_owned(),
        name: "wf".into(),
        owner: None,
        inputs: r#"{"positionalArgs":[1],"namedArgs":{}}"#.into(),
        queue: None,
        priority: 0,
        dedup_id: None,
        partition_key: None,
        delay_until: None,
        timeout_ms: None,
        deadline: None,
        parent: None,
        executor_id: "e1".into(),
        app_version: Some("v1".into()),
        app_name: None,
        attributes: None,
        created_at: next_created_at(),
    }
}

/// Workflow `id` enqueued on `queue`.
pub(crate) fn enqueued(id: &str, queue: &str) -> NewWorkflow {
    NewWorkflow {
        queue: Some(queue.into()),
        ..workflow(id)
    }
}

/// Step `function_id` of workflow `id`, named `step`, as its helper-given owner writes it.
pub(crate) fn step_write(id: &str, function_id: u32, output: &str) -> StepWrite {
    StepWrite {
        workflow_id: id.into(),
        owner: owner_of(id),
        function_id,
        name: "step".into(),
        output: Some(output.into()),
        error: None,
        child_workflow_id: None,
        started_at: now_ms(),
        completed_at: now_ms(),
        app_name: None,
    }
}

/// A claim of up to `limit` workflows of `queue` by executor `e1` of version `v1`.
pub(crate) fn claim_of(queue: Queue, limit: i64) -> ClaimRequest {
    ClaimRequest {
        queue,
        limit,
        with_depth: true,
        executor_id: "e1".into(),
        app_version: "v1".into(),
        app_name: None,
        now: now_ms(),
    }
}

/// The ids of a claim, in the order it gave them.
pub(crate) fn ids(out: &ClaimOutcome) -> Vec<&str> {
    out.claimed.iter().map(|c| c.id.as_str()).collect()
}

//! The shared store suite: every [`Store`] and [`Session`] operation tested directly (no
//! runtime, no actors) on both implementations, as River's driver suite tests its drivers.
//!
//! A test is an `async fn(Kind)` in one of the concept files; [`store_tests!`] instantiates it
//! once on Postgres (a fresh database) and once on SQLite (a fresh file). A new storage
//! operation gets its test here. Rows are checked through [`Fixture`]'s probe, a connection of
//! its own that reads (`dbos.` qualifies a table on either backend).

mod attributes;
mod batch;
mod claims;
mod continuations;
mod datasource;
mod definitions;
mod fleet;
mod manage;
mod pages;
mod pauses;
mod reads;
mod rewind;
mod updates;
mod writes;

// The scratch databases (a fresh Postgres database or SQLite file per test): one copy for every
// test of the repository, the integration harness's. The suite uses part of it.
#[allow(dead_code)]
#[path = "../../../tests/common/scratch.rs"]
mod scratch;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};

use super::{
    connect, next_created_at, ClaimOutcome, ClaimRequest, NewWorkflow, Session, StartOutcome,
    StepOutcome, StepWrite, Store, DEFAULT_SCHEMA,
};
use crate::base::clock::now_ms;
use crate::base::queue::Queue;

/// How long a test waits for an announcement (NOTIFY) another connection made: whether it
/// arrives is the behaviour; how soon depends on the machine's load, so only a hang reaches this.
const HEARD: Duration = Duration::from_secs(60);

thread_local! {
    /// Set by the `on_postgres_inline` tests: the store's URL names a transaction pooler, so
    /// every statement goes inline (the test runs on one thread, as `#[tokio::test]` does).
    pub(crate) static INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Instantiates each named test on both backends, and on Postgres once more with every
/// statement inline (as behind a transaction pooler).
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
        mod on_postgres_inline {
            $(
                #[tokio::test]
                async fn $name() {
                    $crate::sysdb::suite::INLINE.with(|inline| inline.set(true));
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
        mod on_citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(kind) = $crate::sysdb::suite::citus() {
                        super::$name(kind).await;
                    }
                }
            )*
        }
    };
}
pub(super) use store_tests;

// Which implementation a test runs on.
pub(crate) use scratch::Backend as Kind;
pub(crate) use scratch::TestDb;

/// The Citus target (a sharded layout of [`CITUS_SHARDS`] buckets) when a cluster is named
/// (`STEAD_TEST_CITUS`); without one, `None` after one `SKIPPED` line per process, or a failure
/// when `CI` is set (CI builds and starts the cluster, so nothing may skip there).
pub(crate) fn citus() -> Option<Kind> {
    static SKIPPED: std::sync::Once = std::sync::Once::new();
    if scratch::citus_url().is_some() {
        return Some(Kind::Citus(CITUS_SHARDS));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the store suite must run on Citus in CI: STEAD_TEST_CITUS is not set"
    );
    SKIPPED.call_once(|| {
        eprintln!(
            "SKIPPED src/sysdb/suite (on_citus): STEAD_TEST_CITUS names no Citus coordinator \
             (../shared/tools/citus.sh up 2 starts one)"
        );
    });
    None
}

/// The suite's Citus layout: three buckets, so a test's workflows spread over them (its probes
/// read views of all buckets, `Fixture::across_buckets`).
const CITUS_SHARDS: u16 = 3;

/// The tables of a bucket that hold workflows' rows.
const BUCKET_TABLES: [&str; 10] = [
    "workflow_status",
    "operation_outputs",
    "notifications",
    "workflow_events_history",
    "workflow_events",
    "streams",
    "workflow_input",
    "workflow_output",
    "stead_workflow_pauses",
    "stead_continuations",
];

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
    scratch: TestDb,
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
        let scratch = TestDb::on(kind).await;
        let store = Fixture::connect(&scratch).await;
        let probe = match kind {
            Kind::Postgres | Kind::Citus(_) => Probe::Postgres(
                PgPoolOptions::new()
                    .max_connections(2)
                    .connect(&scratch.url)
                    .await
                    .expect("probe"),
            ),
            // After the store: it created the file.
            Kind::Sqlite => Probe::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(2)
                    .connect(&scratch.url)
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

    async fn connect(scratch: &TestDb) -> Arc<dyn Store> {
        let url = match scratch.backend {
            Kind::Postgres if INLINE.with(|inline| inline.get()) => {
                format!("{}?pooler=transaction", scratch.url)
            }
            _ => scratch.stead_url(),
        };
        connect(&url, DEFAULT_SCHEMA, 4, Duration::from_secs(10), true)
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
            Probe::Postgres(pool) => {
                let sql = self.across_buckets(pool, sql).await;
                sqlx::query_scalar::<_, Option<T>>(AssertSqlSafe(sql.clone()))
                    .fetch_optional(pool)
                    .await
                    .expect(&sql)
                    .flatten()
            }
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

    /// `sql` reading every bucket of a sharded layout: its `dbos.<workflow table>` read from a
    /// view of all buckets' tables (made on first use); as is elsewhere.
    async fn across_buckets(&self, pool: &PgPool, sql: &str) -> String {
        let Kind::Citus(n) = self.scratch.backend else {
            return sql.to_owned();
        };
        if n < 2 {
            return sql.to_owned();
        }
        let mut sql = sql.to_owned();
        for table in BUCKET_TABLES {
            let view = format!("stead_probe.{table}");
            if !sql.contains(&format!("dbos.{table}")) {
                continue;
            }
            let union: Vec<String> = (0..n)
                .map(|b| match b {
                    0 => format!("SELECT * FROM dbos.{table}"),
                    b => format!("SELECT * FROM dbos_shard{b}.{table}"),
                })
                .collect();
            for ddl in [
                "CREATE SCHEMA IF NOT EXISTS stead_probe".to_owned(),
                format!(
                    "CREATE OR REPLACE VIEW {view} AS {}",
                    union.join(" UNION ALL ")
                ),
            ] {
                let _ = sqlx::query(AssertSqlSafe(ddl)).execute(pool).await;
            }
            sql = sql.replace(&format!("dbos.{table} "), &format!("{view} "));
            sql = sql.replace(&format!("dbos.{table}\n"), &format!("{view}\n"));
            if sql.ends_with(&format!("dbos.{table}")) {
                sql = format!(
                    "{}{view}",
                    &sql[..sql.len() - format!("dbos.{table}").len()]
                );
            }
        }
        sql
    }

    /// Runs `sql` on either backend (SQLite has no `dbos.` schema prefix), to shape rows as
    /// another writer (DBOS) would have.
    pub(crate) async fn exec(&self, sql: &str) {
        use sqlx::Executor;
        match &self.probe {
            Probe::Postgres(pool) => pool.execute(AssertSqlSafe(sql.to_owned())).await.map(drop),
            Probe::Sqlite(pool) => {
                let sql = sql.replace("dbos.", "");
                pool.execute(AssertSqlSafe(sql)).await.map(drop)
            }
        }
        .expect(sql);
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
        message: None,
        shard_key: None,
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
        floor: None,
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

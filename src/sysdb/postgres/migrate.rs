//! Schema migration on Postgres: brings a schema to the DBOS Transact 3.4 system-database
//! layout, and reads the version it is at.
//!
//! Owns `migrations/postgres/0001_dbos_3_4.sql` and the `dbos_migrations` row. Besides the rules
//! in `sysdb::migrate`, it must never run without DBOS's migration lock, so that stead and DBOS
//! processes can start side by side.
//!
//! The script is idempotent and repairs partial or older schemas; it runs under DBOS's advisory
//! lock (taken for the migration's one transaction) and sets `dbos_migrations` to 125. stead's own
//! tables are created on every migration (idempotent scripts, no version of their own):
//! `stead_executors` (the fleet's roster, `migrations/postgres/stead_executors.sql`) and
//! `stead_queue_pauses` (paused queues, `migrations/postgres/stead_queue_pauses.sql`),
//! `stead_workflow_pauses` (paused workflows), `stead_schedule_policies` (schedules' overlap
//! and jitter) and `stead_continuations` (continue-as-new chains, `sysdb::continuations`).

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

use std::sync::Arc;

use super::exec::Lit;
use super::shards::{bucket_schema, Sharding};
use super::sql::Sql;
use super::Postgres;
use crate::error::DbError;
use crate::sysdb::migrate::{MigrationReport, Schema, DBOS_SCHEMA_VERSION};

/// The advisory-lock key DBOS takes around its migrations.
const MIGRATION_LOCK: i64 = 1_234_567_890;

/// stead's functions on a sharded layout (`migrations/postgres/citus.sql`).
const CITUS_FUNCTIONS: &str = include_str!("../../../migrations/postgres/citus.sql");

/// The schema template; `{s}` stands for the quoted schema name.
pub(super) const SCRIPT: &str = include_str!("../../../migrations/postgres/0001_dbos_3_4.sql");

/// stead's own tables beside DBOS's (idempotent, run on every migration, in order).
const STEAD_SCRIPTS: [&str; 5] = [
    include_str!("../../../migrations/postgres/stead_executors.sql"),
    include_str!("../../../migrations/postgres/stead_queue_pauses.sql"),
    include_str!("../../../migrations/postgres/stead_workflow_pauses.sql"),
    include_str!("../../../migrations/postgres/stead_schedule_policies.sql"),
    include_str!("../../../migrations/postgres/stead_continuations.sql"),
];

mod layout;

const SCHEMA_VERSION: &str = "SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL \
    ELSE (xpath('/row/v/text()', query_to_xml(format('SELECT max(version) AS v FROM %s', $1), \
    false, true, '')))[1]::text::int8 END";

#[async_trait]
impl Schema for Postgres {
    /// The lock is a transaction lock: the commit or the rollback releases it; a caller that
    /// cancels this future drops the connection, which releases it as well.
    ///
    /// A sharded layout (`shards.rs`) migrates each bucket schema in a transaction of its own,
    /// the home first; a new layout's `stead_sharding` row is written last, so a migration cut
    /// short is made again whole.
    async fn migrate(&self) -> Result<MigrationReport, DbError> {
        let mut conn = self.pool.acquire().await?;
        let home = self.sql.schema.clone();
        let found = layout::read(&mut conn, &home).await?;
        let buckets = layout::decide(found, self.sharding)?;
        let citus = buckets > 1 || self.sharding != Sharding::Unset;
        if citus {
            layout::require_citus(&mut conn).await?;
            // Citus takes DDL on the coordinator only: connected to a worker, a made layout is
            // checked, not migrated.
            if !layout::on_coordinator(&mut conn).await? {
                let report = layout::checked(&mut conn, &self.sql.schema, found).await?;
                self.set_layout(buckets, true);
                self.set_links(true);
                return Ok(report);
            }
        }
        let mut report = migrate_pg(&mut conn, &home, citus).await?;
        for b in 1..buckets {
            let schema = bucket_schema(&home, b);
            let bucket = migrate_pg(&mut conn, &schema, citus).await?;
            report.applied |= bucket.applied;
        }
        if found.is_none() && citus {
            layout::write(&mut conn, &home, buckets).await?;
        }
        self.set_layout(buckets, citus);
        self.set_links(true);
        Ok(report)
    }

    async fn schema_version(&self) -> Result<Option<i64>, DbError> {
        let table = format!("\"{}\".dbos_migrations", self.sql.schema);
        let row = self
            .sql
            .query(SCHEMA_VERSION)
            .bind(table)
            .fetch_one(&self.pool)
            .await?;
        let links = format!("\"{}\".stead_continuations", self.sql.schema);
        let exist = self
            .sql
            .query("SELECT to_regclass($1) IS NOT NULL")
            .bind(links)
            .fetch_one(&self.pool)
            .await?;
        self.set_links(exist.try_get(0)?);
        self.read_layout().await?;
        Ok(row.try_get(0)?)
    }
}

impl Postgres {
    /// Reads the layout the schema has (sharded or not), so every later statement goes where
    /// it should; a schema not made yet is one bucket until a migration makes it.
    pub(crate) async fn read_layout(&self) -> Result<(), DbError> {
        let mut conn = self.pool.acquire().await?;
        let found = layout::read(&mut conn, &self.sql.schema).await?;
        self.set_layout(found.unwrap_or(1), found.is_some());
        Ok(())
    }

    /// Uses `n` buckets of this store's home schema from now on, Citus's or not.
    fn set_layout(&self, n: u16, citus: bool) {
        self.sql.set_citus(citus);
        self.lane_sql.set_citus(citus);
        if n == self.shards.count() as u16 && citus == self.shards.citus() {
            return;
        }
        let home = &self.sql.schema;
        let buckets = (0..n)
            .map(|b| match b {
                0 => self.sql.clone(),
                b => {
                    let sql = Sql::new(&bucket_schema(home, b), None);
                    sql.set_citus(citus);
                    Arc::new(sql)
                }
            })
            .collect();
        self.shards.set(buckets, citus);
    }
}

/// One transaction under DBOS's migration lock (transaction-level, so it holds through a
/// transaction pooler and goes with the commit or the rollback): a failure anywhere leaves the
/// database as it was. Simple-protocol statements only (no prepared statement to outlive it).
pub(super) async fn migrate_pg(
    conn: &mut PgConnection,
    schema: &str,
    citus: bool,
) -> Result<MigrationReport, DbError> {
    let mut tx = conn.begin().await?;
    match migrate_in(&mut tx, schema, citus).await {
        Ok(report) => {
            tx.commit().await?;
            Ok(report)
        }
        Err(e) => {
            // The migration's own error says more than a failed rollback after it.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn migrate_in(
    conn: &mut PgConnection,
    schema: &str,
    citus: bool,
) -> Result<MigrationReport, DbError> {
    let quoted = format!("\"{schema}\"");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"
    )))
    .execute(&mut *conn)
    .await?;
    if citus {
        // A new schema becomes a distributed schema (placed whole on one node), and DBOS's
        // notifications trigger is allowed on its tables: it fires on that node, with its row.
        sqlx::raw_sql(
            "SET LOCAL citus.enable_schema_based_sharding = on; \
                       SET LOCAL citus.enable_unsafe_triggers = on",
        )
        .execute(&mut *conn)
        .await?;
    }
    let found_version = read_version(conn, schema, &quoted).await?;
    let current = found_version.filter(|v| *v >= DBOS_SCHEMA_VERSION);
    if current.is_none() {
        run_script(conn, &SCRIPT.replace("{s}", &quoted), citus).await?;
        run_script(
            conn,
            &format!(
                "CREATE TABLE IF NOT EXISTS {quoted}.dbos_migrations \
                     (version bigint NOT NULL PRIMARY KEY);
                 DELETE FROM {quoted}.dbos_migrations;
                 INSERT INTO {quoted}.dbos_migrations (version) VALUES ({DBOS_SCHEMA_VERSION});"
            ),
            citus,
        )
        .await?;
    }
    for script in STEAD_SCRIPTS {
        run_script(conn, &script.replace("{s}", &quoted), citus).await?;
    }
    if citus {
        layout::distribute(conn, schema).await?;
        // `create_distributed_function` takes the name as text, unquoted where it can be.
        let functions = CITUS_FUNCTIONS
            .replace("'{s}.", &format!("'{quoted}."))
            .replace("{s}", &quoted);
        run_script(conn, &functions, true).await?;
    }
    Ok(MigrationReport {
        schema: schema.to_owned(),
        found_version,
        version: current.unwrap_or(DBOS_SCHEMA_VERSION),
        applied: current.is_none(),
    })
}

/// Runs a script: as one string on Postgres; on Citus statement by statement, since Citus
/// refuses a string of several commands that it must propagate to other nodes.
async fn run_script(conn: &mut PgConnection, script: &str, citus: bool) -> Result<(), DbError> {
    if !citus {
        sqlx::raw_sql(AssertSqlSafe(script.to_owned()))
            .execute(&mut *conn)
            .await?;
        return Ok(());
    }
    for statement in super::lex::statements(script) {
        sqlx::raw_sql(AssertSqlSafe(statement.to_owned()))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The recorded version, or None when the schema or its `dbos_migrations` table is missing
/// or empty (DBOS reads all three as "nothing applied").
async fn read_version(
    conn: &mut PgConnection,
    schema: &str,
    quoted: &str,
) -> Result<Option<i64>, DbError> {
    let mut name = String::new();
    schema.lit(&mut name);
    let exists = sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
         WHERE schemaname = {name} AND tablename = 'dbos_migrations')"
    )))
    .fetch_one(&mut *conn)
    .await?;
    if !exists.try_get::<bool, _>(0)? {
        return Ok(None);
    }
    let version = sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT max(version) FROM {quoted}.dbos_migrations"
    )))
    .fetch_one(&mut *conn)
    .await?;
    Ok(version.try_get(0)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysdb::suite::TestDb;
    use sqlx::Executor;

    /// Whether another session could take the migration lock right now.
    async fn lock_is_free(url: &str) -> bool {
        let mut other = PgConnection::connect(url).await.unwrap();
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(MIGRATION_LOCK)
            .fetch_one(&mut other)
            .await
            .unwrap();
        if got {
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(MIGRATION_LOCK)
                .execute(&mut other)
                .await
                .unwrap();
        }
        other.close().await.unwrap();
        got
    }

    // The lock outlives a failed migration only if `migrate` forgets to release it; the
    // integration tests cannot see that because their connection closes right after.
    #[tokio::test]
    async fn lock_is_released_after_success_and_after_failure() {
        let db = TestDb::new().await;
        let url = db.url.clone();
        let mut conn = PgConnection::connect(&url).await.unwrap();

        // A view where the last table must go makes the script fail after creating the others.
        conn.execute("CREATE SCHEMA broken; CREATE VIEW broken.workflow_output AS SELECT 1 AS x")
            .await
            .unwrap();
        let err = migrate_pg(&mut conn, "broken", false).await.unwrap_err();
        assert!(matches!(err, DbError::Query(_)), "{err:?}");
        assert!(
            lock_is_free(&url).await,
            "lock still held after a failed migration"
        );
        // The failed transaction was rolled back: nothing was created, the session is usable.
        let tables: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'broken'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(tables, 0);

        let report = migrate_pg(&mut conn, "dbos", false).await.unwrap();
        assert!(report.applied);
        assert!(
            lock_is_free(&url).await,
            "lock still held after a migration"
        );

        conn.close().await.unwrap();
    }
}

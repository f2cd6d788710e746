//! Schema migration on Postgres: brings a schema to the DBOS Transact 3.4 system-database
//! layout, and reads the version it is at.
//!
//! Owns `migrations/postgres/0001_dbos_3_4.sql` and the `dbos_migrations` row. Besides the rules
//! in `sysdb::migrate`, it must never run without DBOS's migration lock, so that stead and DBOS
//! processes can start side by side.
//!
//! The script is idempotent and repairs partial or older schemas; it runs under DBOS's advisory
//! lock and sets `dbos_migrations` to 125. `stead_executors` (the fleet's roster, stead's own
//! table) is created on every migration from `migrations/postgres/stead_executors.sql`.

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::migrate::{MigrationReport, Schema, DBOS_SCHEMA_VERSION};

/// The advisory-lock key DBOS takes around its migrations.
const MIGRATION_LOCK: i64 = 1_234_567_890;

/// The schema template; `{s}` stands for the quoted schema name.
const SCRIPT: &str = include_str!("../../../migrations/postgres/0001_dbos_3_4.sql");

/// stead's own tables beside DBOS's (idempotent, run on every migration): the fleet's roster.
const STEAD_SCRIPT: &str = include_str!("../../../migrations/postgres/stead_executors.sql");

const SCHEMA_VERSION: &str = "SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL \
    ELSE (xpath('/row/v/text()', query_to_xml(format('SELECT max(version) AS v FROM %s', $1), \
    false, true, '')))[1]::text::int8 END";

#[async_trait]
impl Schema for Postgres {
    /// The lock is a session lock: it is released before returning, on error too. A caller
    /// that cancels this future drops the connection, which releases it as well.
    async fn migrate(&self) -> Result<MigrationReport, DbError> {
        let mut conn = self.pool.acquire().await?;
        migrate_pg(&mut conn, &self.sql.schema).await
    }

    async fn schema_version(&self) -> Result<Option<i64>, DbError> {
        let table = format!("\"{}\".dbos_migrations", self.sql.schema);
        let row = sqlx::query(self.sql.get(SCHEMA_VERSION))
            .bind(table)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get(0)?)
    }
}

pub(super) async fn migrate_pg(
    conn: &mut PgConnection,
    schema: &str,
) -> Result<MigrationReport, DbError> {
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await?;
    let mut outcome = migrate_locked(conn, schema).await;
    if outcome.is_ok() {
        let script = STEAD_SCRIPT.replace("{s}", &format!("\"{schema}\""));
        if let Err(e) = sqlx::raw_sql(AssertSqlSafe(script))
            .execute(&mut *conn)
            .await
        {
            outcome = Err(e.into());
        }
    }
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *conn)
        .await;
    // The migration's own error says more than a failed unlock after it.
    let report = outcome?;
    unlocked?;
    Ok(report)
}

async fn migrate_locked(conn: &mut PgConnection, schema: &str) -> Result<MigrationReport, DbError> {
    let quoted = format!("\"{schema}\"");
    let found_version = read_version(conn, schema, &quoted).await?;
    if let Some(found) = found_version.filter(|v| *v >= DBOS_SCHEMA_VERSION) {
        return Ok(MigrationReport {
            schema: schema.to_owned(),
            found_version,
            version: found,
            applied: false,
        });
    }

    // One transaction: a failure leaves the database as it was, never half-migrated.
    let mut tx = conn.begin().await?;
    let result = async {
        sqlx::raw_sql(AssertSqlSafe(SCRIPT.replace("{s}", &quoted)))
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {quoted}.dbos_migrations \
                 (version bigint NOT NULL PRIMARY KEY);
             DELETE FROM {quoted}.dbos_migrations;
             INSERT INTO {quoted}.dbos_migrations (version) VALUES ({DBOS_SCHEMA_VERSION});"
        )))
        .execute(&mut *tx)
        .await?;
        Ok::<(), sqlx::Error>(())
    }
    .await;
    match result {
        Ok(()) => tx.commit().await?,
        Err(e) => {
            // Roll back now so the unlock that follows does not run inside the failed
            // transaction; the original error is the one worth reporting.
            let _ = tx.rollback().await;
            return Err(e.into());
        }
    }
    Ok(MigrationReport {
        schema: schema.to_owned(),
        found_version,
        version: DBOS_SCHEMA_VERSION,
        applied: true,
    })
}

/// The recorded version, or None when the schema or its `dbos_migrations` table is missing
/// or empty (DBOS reads all three as "nothing applied").
async fn read_version(
    conn: &mut PgConnection,
    schema: &str,
    quoted: &str,
) -> Result<Option<i64>, DbError> {
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
         WHERE schemaname = $1 AND tablename = 'dbos_migrations')",
    )
    .bind(schema)
    .fetch_one(&mut *conn)
    .await?;
    if !exists {
        return Ok(None);
    }
    let version: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT max(version) FROM {quoted}.dbos_migrations"
    )))
    .fetch_one(&mut *conn)
    .await?;
    Ok(version)
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
        let err = migrate_pg(&mut conn, "broken").await.unwrap_err();
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

        let report = migrate_pg(&mut conn, "dbos").await.unwrap();
        assert!(report.applied);
        assert!(
            lock_is_free(&url).await,
            "lock still held after a migration"
        );

        conn.close().await.unwrap();
    }
}

//! Transactional steps' table on a SQLite application database: `datasource_outputs` and
//! `dbos_datasource_migrations`, as DBOS 3.4 creates them. Every transaction begins
//! `IMMEDIATE` (DBOS's SQLite datasource does too), so writers queue on the file lock instead
//! of failing an upgrade from a read lock.

use async_trait::async_trait;
use sqlx::{Row, Sqlite, SqlitePool, Transaction};

use crate::sysdb::datasource::{AppSql, Isolation, RecordRow, Recorded, DATASOURCE_SCHEMA_VERSION};

/// DBOS's migration 1 (its timestamp expression for Python before 3.12, as the system tables).
const MIGRATION_1: &str = "CREATE TABLE IF NOT EXISTS datasource_outputs (
    workflow_id TEXT NOT NULL,
    step_id INTEGER NOT NULL,
    output TEXT,
    error TEXT,
    serialization TEXT,
    created_at INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000),
    PRIMARY KEY (workflow_id, step_id)
)";

async fn version_in(tx: &mut Transaction<'static, Sqlite>) -> Result<i64, sqlx::Error> {
    let exists = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'dbos_datasource_migrations'",
    )
    .fetch_optional(&mut **tx)
    .await?
    .is_some();
    if !exists {
        return Ok(0);
    }
    let row = sqlx::query("SELECT version FROM dbos_datasource_migrations")
        .fetch_optional(&mut **tx)
        .await?;
    row.map_or(Ok(0), |r| r.try_get::<i64, _>(0))
}

#[async_trait]
impl AppSql for Sqlite {
    async fn migrate(pool: &SqlitePool, _schema: &str) -> Result<(), sqlx::Error> {
        // Under the write lock, so concurrent migrators read the version one at a time.
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let current = version_in(&mut tx).await?;
        if current >= DATASOURCE_SCHEMA_VERSION {
            return tx.commit().await;
        }
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS dbos_datasource_migrations \
             (version INTEGER NOT NULL PRIMARY KEY)",
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query(MIGRATION_1).execute(&mut *tx).await?;
        let sql = if current == 0 {
            "INSERT INTO dbos_datasource_migrations (version) VALUES (?1)"
        } else {
            "UPDATE dbos_datasource_migrations SET version = ?1"
        };
        sqlx::query(sql)
            .bind(DATASOURCE_SCHEMA_VERSION)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    async fn schema_version(pool: &SqlitePool, _schema: &str) -> Result<i64, sqlx::Error> {
        let mut tx = pool.begin().await?;
        let version = version_in(&mut tx).await?;
        tx.commit().await?;
        Ok(version)
    }

    async fn recorded(
        pool: &SqlitePool,
        _schema: &str,
        workflow_id: &str,
        step_id: u32,
    ) -> Result<Option<Recorded>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT output, error, serialization FROM datasource_outputs \
             WHERE workflow_id = ?1 AND step_id = ?2",
        )
        .bind(workflow_id)
        .bind(i64::from(step_id))
        .fetch_optional(pool)
        .await?;
        row.map(|r| {
            Ok(Recorded {
                output: r.try_get(0)?,
                error: r.try_get(1)?,
                serialization: r.try_get(2)?,
            })
        })
        .transpose()
    }

    async fn begin(
        pool: &SqlitePool,
        _isolation: Isolation,
    ) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
        pool.begin_with("BEGIN IMMEDIATE").await
    }

    async fn record(
        tx: &mut Transaction<'static, Sqlite>,
        _schema: &str,
        row: RecordRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let inserted = sqlx::query(
            "INSERT INTO datasource_outputs (workflow_id, step_id, output, error, serialization) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (workflow_id, step_id) DO NOTHING RETURNING workflow_id",
        )
        .bind(row.workflow_id)
        .bind(i64::from(row.step_id))
        .bind(row.output)
        .bind(row.error)
        .bind(row.serialization)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(inserted.is_some())
    }

    async fn delete(
        tx: &mut Transaction<'static, Sqlite>,
        _schema: &str,
        workflow_id: &str,
        from_step: u32,
    ) -> Result<u64, sqlx::Error> {
        let done =
            sqlx::query("DELETE FROM datasource_outputs WHERE workflow_id = ?1 AND step_id >= ?2")
                .bind(workflow_id)
                .bind(i64::from(from_step))
                .execute(&mut **tx)
                .await?;
        Ok(done.rows_affected())
    }

    fn is_retriable(error: &sqlx::Error) -> bool {
        match error {
            // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
            sqlx::Error::Database(db) => {
                let busy = db
                    .code()
                    .and_then(|c| c.parse::<i32>().ok())
                    .is_some_and(|c| matches!(c & 0xff, 5 | 6));
                let message = db.message().to_ascii_lowercase();
                busy || message.contains("database is locked")
                    || message.contains("database table is locked")
            }
            sqlx::Error::PoolTimedOut => true,
            _ => false,
        }
    }
}

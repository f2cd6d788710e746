//! Schema migration of a SQLite system database to DBOS 3.4's SQLite layout.
//!
//! A fresh file gets the whole layout and `dbos_migrations` = 125 in one transaction. A file at
//! or above 125 is left alone (DBOS, or a newer stead, owns it). A file part-way through DBOS's
//! older SQLite history is refused with a message to run `dbos migrate` on it: DBOS's
//! step-by-step history is its own, and stead never half-migrates a file.
//!
//! stead's own tables (`stead_queue_pauses`, `stead_workflow_pauses`, `stead_schedule_policies`,
//! `stead_continuations`) are created on every migration, also of a file DBOS left at 125:
//! idempotent scripts beside DBOS's layout, with no version of their own.

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Row};

use super::Sqlite;
use crate::error::DbError;
use crate::sysdb::migrate::{MigrationReport, Schema, DBOS_SCHEMA_VERSION};

const SCRIPT: &str = include_str!("../../../migrations/sqlite/0001_dbos_3_4.sql");

/// stead's own tables beside DBOS's (idempotent, run on every migration).
const STEAD_SCRIPT: &str = concat!(
    include_str!("../../../migrations/sqlite/stead_queue_pauses.sql"),
    include_str!("../../../migrations/sqlite/stead_workflow_pauses.sql"),
    include_str!("../../../migrations/sqlite/stead_schedule_policies.sql"),
    include_str!("../../../migrations/sqlite/stead_continuations.sql"),
);

#[async_trait]
impl Schema for Sqlite {
    /// The write lock serialises concurrent migrators.
    async fn migrate(&self) -> Result<MigrationReport, DbError> {
        let report = self.migrate_file().await?;
        self.set_links(true);
        Ok(report)
    }

    async fn schema_version(&self) -> Result<Option<i64>, DbError> {
        let links = sqlx::query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stead_continuations'",
        )
        .fetch_optional(self.reader())
        .await?;
        self.set_links(links.is_some());
        self.read_version().await
    }
}

impl Sqlite {
    async fn migrate_file(&self) -> Result<MigrationReport, DbError> {
        let mut tx = self.write().await?;
        let has_table = sqlx::query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'dbos_migrations'",
        )
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
        let found_version: Option<i64> = if has_table {
            sqlx::query("SELECT max(version) FROM dbos_migrations")
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?
        } else {
            None
        };
        let report = |version, applied| MigrationReport {
            schema: "main".to_owned(),
            found_version,
            version,
            applied,
        };
        match found_version {
            Some(v) if v >= DBOS_SCHEMA_VERSION => {
                sqlx::raw_sql(STEAD_SCRIPT).execute(&mut *tx).await?;
                tx.commit().await?;
                return Ok(report(v, false));
            }
            Some(v) if v > 0 => {
                return Err(DbError::Query(format!(
                    "this SQLite system database is at DBOS migration {v}, older than DBOS 3.4 \
                     ({DBOS_SCHEMA_VERSION}); run `dbos migrate` (DBOS 3.4) on it first"
                )))
            }
            _ => {}
        }
        sqlx::raw_sql(AssertSqlSafe(SCRIPT))
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS dbos_migrations (version INTEGER NOT NULL PRIMARY KEY);
             DELETE FROM dbos_migrations;
             INSERT INTO dbos_migrations (version) VALUES ({DBOS_SCHEMA_VERSION});"
        )))
        .execute(&mut *tx)
        .await?;
        sqlx::raw_sql(STEAD_SCRIPT).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(report(DBOS_SCHEMA_VERSION, true))
    }

    async fn read_version(&self) -> Result<Option<i64>, DbError> {
        let has_table = sqlx::query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'dbos_migrations'",
        )
        .fetch_optional(self.reader())
        .await?
        .is_some();
        if !has_table {
            return Ok(None);
        }
        Ok(
            sqlx::query_scalar("SELECT max(version) FROM dbos_migrations")
                .fetch_one(self.reader())
                .await?,
        )
    }
}

//! Application versions and the schema version on SQLite.

use super::Lite;
use crate::error::DbError;
use crate::sysdb::versions::version_from_row;
use crate::sysdb::{now_ms, AppVersion};

/// Records version `name` of application `app` (first launch of a version makes it the latest).
pub(crate) async fn register(lite: &Lite, name: &str, app: Option<&str>) -> Result<(), DbError> {
    let mut tx = lite.write().await?;
    sqlx::query(
        "INSERT INTO application_versions (version_id, version_name, version_timestamp, \
             created_at, application_name) \
         SELECT ?3, ?1, ?4, ?4, ?2 \
         WHERE NOT EXISTS (SELECT 1 FROM application_versions \
                           WHERE version_name = ?1 AND application_name IS ?2) \
         ON CONFLICT DO NOTHING",
    )
    .bind(name)
    .bind(app)
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The versions of application `app`, latest first.
pub(crate) async fn list(lite: &Lite, app: Option<&str>) -> Result<Vec<AppVersion>, DbError> {
    let rows = sqlx::query(
        "SELECT version_name, application_name, version_timestamp, created_at \
         FROM application_versions WHERE application_name IS ?1 \
         ORDER BY version_timestamp DESC, version_name",
    )
    .bind(app)
    .fetch_all(lite.reader())
    .await?;
    Ok(rows
        .iter()
        .map(version_from_row)
        .collect::<Result<_, _>>()?)
}

/// Makes version `name` the latest; false when it is not registered.
pub(crate) async fn promote(lite: &Lite, name: &str, app: Option<&str>) -> Result<bool, DbError> {
    let mut tx = lite.write().await?;
    let done = sqlx::query(
        "UPDATE application_versions SET version_timestamp = ?3 \
         WHERE version_name = ?1 AND application_name IS ?2",
    )
    .bind(name)
    .bind(app)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

/// `dbos_migrations`' version; `None` when the table does not exist.
pub(crate) async fn schema_version(lite: &Lite) -> Result<Option<i64>, DbError> {
    let has_table = sqlx::query(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'dbos_migrations'",
    )
    .fetch_optional(lite.reader())
    .await?
    .is_some();
    if !has_table {
        return Ok(None);
    }
    Ok(
        sqlx::query_scalar("SELECT max(version) FROM dbos_migrations")
            .fetch_one(lite.reader())
            .await?,
    )
}

//! Application versions (`application_versions`): which versions of an application exist and
//! which is the latest (the one that may run workflows enqueued without a version); and the
//! schema version a client checks before it trusts a database.

use sqlx::{PgPool, Row};

use super::rows::AnyRow;
use super::{now_ms, Sql};
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;

/// A registered application version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppVersion {
    pub name: String,
    pub app_name: Option<String>,
    /// Epoch ms; the latest version has the greatest.
    pub timestamp_ms: i64,
    pub created_at_ms: i64,
}

/// An `application_versions` row of either backend: name, app, timestamp, created.
pub(super) fn version_from_row(row: &impl AnyRow) -> Result<AppVersion, sqlx::Error> {
    Ok(AppVersion {
        name: row.at(0)?,
        app_name: row.at(1)?,
        timestamp_ms: row.at(2)?,
        created_at_ms: row.at(3)?,
    })
}

pub(super) const REGISTER: &str = r#"
INSERT INTO {s}.application_versions (version_id, version_name, version_timestamp, created_at,
    application_name)
SELECT gen_random_uuid()::text, $1, $3, $3, $2
WHERE NOT EXISTS (SELECT 1 FROM {s}.application_versions
                  WHERE version_name = $1 AND application_name IS NOT DISTINCT FROM $2)
ON CONFLICT DO NOTHING
"#;

/// Records version `name` of application `app` (first launch of a version makes it the latest).
pub(crate) async fn register(db: &SysDb, name: &str, app: Option<&str>) -> Result<(), DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => register_pg(pool, &db.sql, name, app).await,
        Backend::Sqlite(lite) => sqlite::versions::register(lite, name, app).await,
    }
}

async fn register_pg(
    pool: &PgPool,
    sql: &Sql,
    name: &str,
    app: Option<&str>,
) -> Result<(), DbError> {
    sqlx::query(sql.register_version.clone())
        .bind(name)
        .bind(app)
        .bind(now_ms())
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) const LIST: &str =
    "SELECT version_name, application_name, version_timestamp, created_at \
    FROM {s}.application_versions WHERE application_name IS NOT DISTINCT FROM $1 \
    ORDER BY version_timestamp DESC, version_name";

/// The versions of application `app`, latest first.
pub(crate) async fn list(db: &SysDb, app: Option<&str>) -> Result<Vec<AppVersion>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => list_pg(pool, &db.sql, app).await,
        Backend::Sqlite(lite) => sqlite::versions::list(lite, app).await,
    }
}

async fn list_pg(pool: &PgPool, sql: &Sql, app: Option<&str>) -> Result<Vec<AppVersion>, DbError> {
    let rows = sqlx::query(sql.list_versions.clone())
        .bind(app)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .iter()
        .map(version_from_row)
        .collect::<Result<_, _>>()?)
}

pub(super) const PROMOTE: &str = "UPDATE {s}.application_versions SET version_timestamp = $3 \
    WHERE version_name = $1 AND application_name IS NOT DISTINCT FROM $2";

/// Makes version `name` the latest; false when it is not registered.
pub(crate) async fn promote(db: &SysDb, name: &str, app: Option<&str>) -> Result<bool, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => promote_pg(pool, &db.sql, name, app).await,
        Backend::Sqlite(lite) => sqlite::versions::promote(lite, name, app).await,
    }
}

async fn promote_pg(
    pool: &PgPool,
    sql: &Sql,
    name: &str,
    app: Option<&str>,
) -> Result<bool, DbError> {
    let done = sqlx::query(sql.promote_version.clone())
        .bind(name)
        .bind(app)
        .bind(now_ms())
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) const SCHEMA_VERSION: &str = "SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL \
    ELSE (xpath('/row/v/text()', query_to_xml(format('SELECT max(version) AS v FROM %s', $1), \
    false, true, '')))[1]::text::int8 END";

/// `dbos_migrations`' version in `schema`; `None` when the table does not exist.
pub(crate) async fn schema_version(db: &SysDb) -> Result<Option<i64>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => schema_version_pg(pool, &db.sql).await,
        Backend::Sqlite(lite) => sqlite::versions::schema_version(lite).await,
    }
}

async fn schema_version_pg(pool: &PgPool, sql: &Sql) -> Result<Option<i64>, DbError> {
    let table = format!("\"{}\".dbos_migrations", sql.schema);
    let row = sqlx::query(sql.schema_version.clone())
        .bind(table)
        .fetch_one(pool)
        .await?;
    Ok(row.try_get(0)?)
}

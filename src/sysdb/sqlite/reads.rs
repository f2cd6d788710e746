//! Reads on SQLite: a workflow's status row with its outcome, events and stream values.

use sqlx::Row;

use super::Lite;
use crate::error::DbError;
use crate::sysdb::reads::status_sql;
use crate::sysdb::{StatusRow, StreamRow};

/// The status row of `id`, or `None` when no such workflow exists.
pub(crate) async fn status(lite: &Lite, id: &str) -> Result<Option<StatusRow>, DbError> {
    // Postgres's statement, unqualified: it takes one parameter and nothing Postgres-only.
    let sql = status_sql().replace("{s}.", "");
    let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(lite.reader())
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(StatusRow::from_row(&row)?))
}

/// The latest value of event `key` of workflow `id`, with its serialization.
pub(crate) async fn get_event(
    lite: &Lite,
    id: &str,
    key: &str,
) -> Result<Option<(String, Option<String>)>, DbError> {
    let row = sqlx::query(
        "SELECT value, serialization FROM workflow_events WHERE workflow_uuid = ?1 AND key = ?2",
    )
    .bind(id)
    .bind(key)
    .fetch_optional(lite.reader())
    .await?;
    Ok(match row {
        Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
        None => None,
    })
}

/// Up to `limit` values of stream `key` of workflow `id`, from `offset` on.
pub(crate) async fn read_stream(
    lite: &Lite,
    id: &str,
    key: &str,
    offset: i32,
    limit: i64,
) -> Result<Vec<StreamRow>, DbError> {
    let rows = sqlx::query(
        r#"SELECT "offset", value, serialization FROM streams
           WHERE workflow_uuid = ?1 AND key = ?2 AND "offset" >= ?3
           ORDER BY "offset" LIMIT ?4"#,
    )
    .bind(id)
    .bind(key)
    .bind(offset)
    .bind(limit)
    .fetch_all(lite.reader())
    .await?;
    Ok(rows
        .iter()
        .map(StreamRow::from_row)
        .collect::<Result<_, _>>()?)
}

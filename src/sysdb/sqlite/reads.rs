//! Reads on SQLite: a workflow's status row with its outcome, events and stream values.

use sqlx::Row;

use super::Lite;
use crate::error::DbError;
use crate::sysdb::reads::{status_from_row, STATUS_COLUMNS};
use crate::sysdb::{StatusRow, StreamRow};

/// The status row of `id`, or `None` when no such workflow exists.
pub(crate) async fn status(lite: &Lite, id: &str) -> Result<Option<StatusRow>, DbError> {
    let sql = format!(
        "SELECT {STATUS_COLUMNS}, w.serialization, COALESCE(o.output, w.output), \
           COALESCE(o.error, w.error) \
         FROM workflow_status w \
         LEFT JOIN workflow_output o ON o.workflow_uuid = w.workflow_uuid \
         WHERE w.workflow_uuid = ?1"
    );
    let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(lite.reader())
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(StatusRow {
        status: status_from_row(&row)?,
        serialization: row.try_get(20)?,
        output: row.try_get(21)?,
        error: row.try_get(22)?,
    }))
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

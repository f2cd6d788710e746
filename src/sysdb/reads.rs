//! Reads: a workflow's recorded steps and its status row with its outcome.

use sqlx::{PgPool, Row};

use super::rows::AnyRow;
use super::Sql;
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;
use crate::status::{Status, WorkflowStatus};

/// One recorded durable call of a workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepRow {
    pub workflow_id: String,
    pub function_id: u32,
    pub name: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub serialization: Option<String>,
}

impl StepRow {
    /// A step row of either backend, columns as `LOAD_STEPS` selects them.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StepRow, sqlx::Error> {
        Ok(StepRow {
            workflow_id: row.at(0)?,
            function_id: row.at::<i32>(1)? as u32,
            name: row.at(2)?,
            output: row.at(3)?,
            error: row.at(4)?,
            child_workflow_id: row.at(5)?,
            serialization: row.at(6)?,
        })
    }
}

pub(super) const LOAD_STEPS: &str = r#"
SELECT workflow_uuid, function_id, function_name, output, error, child_workflow_id, serialization
FROM {s}.operation_outputs
WHERE workflow_uuid = ANY($1::text[])
ORDER BY workflow_uuid, function_id
"#;

/// A workflow's status row with its outcome payloads.
#[derive(Debug, Clone)]
pub(crate) struct StatusRow {
    pub status: WorkflowStatus,
    pub output: Option<String>,
    pub error: Option<String>,
    pub serialization: Option<String>,
}

pub(super) const STATUS_COLUMNS: &str = "w.workflow_uuid, w.status, w.name, w.executor_id, \
    w.application_version, w.application_name, w.queue_name, w.recovery_attempts, w.created_at, \
    w.updated_at, w.started_at_epoch_ms, w.completed_at, w.parent_workflow_id, w.forked_from, \
    w.workflow_timeout_ms, w.workflow_deadline_epoch_ms, w.priority, w.deduplication_id, \
    w.queue_partition_key, w.delay_until_epoch_ms";

impl StatusRow {
    /// A row of `status_sql()` on either backend: the status, then serialization, output, error.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StatusRow, DbError> {
        Ok(StatusRow {
            status: status_from_row(row)?,
            serialization: row.at(20)?,
            output: row.at(21)?,
            error: row.at(22)?,
        })
    }
}

/// A status row of either backend, columns in `STATUS_COLUMNS` order.
pub(super) fn status_from_row(row: &impl AnyRow) -> Result<WorkflowStatus, DbError> {
    let id: String = row.at(0)?;
    let text: Option<String> = row.at(1)?;
    let status = text
        .as_deref()
        .and_then(Status::parse)
        .ok_or_else(|| DbError::Query(format!("workflow {id} has unknown status {text:?}")))?;
    Ok(WorkflowStatus {
        id,
        status,
        name: row.at::<Option<String>>(2)?.unwrap_or_default(),
        executor_id: row.at(3)?,
        app_version: row.at(4)?,
        app_name: row.at(5)?,
        queue_name: row.at(6)?,
        recovery_attempts: row.at::<Option<i64>>(7)?.unwrap_or(0),
        created_at_ms: row.at(8)?,
        updated_at_ms: row.at(9)?,
        started_at_ms: row.at(10)?,
        completed_at_ms: row.at(11)?,
        parent_workflow_id: row.at(12)?,
        forked_from: row.at(13)?,
        timeout_ms: row.at(14)?,
        deadline_ms: row.at(15)?,
        priority: row.at(16)?,
        deduplication_id: row.at(17)?,
        partition_key: row.at(18)?,
        delay_until_ms: row.at(19)?,
    })
}

// The payload tables are authoritative; the legacy columns are a read fallback, as in DBOS.
pub(super) fn status_sql() -> String {
    format!(
        "SELECT {STATUS_COLUMNS}, w.serialization, COALESCE(o.output, w.output), \
           COALESCE(o.error, w.error) \
         FROM {{s}}.workflow_status w \
         LEFT JOIN {{s}}.workflow_output o ON o.workflow_uuid = w.workflow_uuid \
         WHERE w.workflow_uuid = $1"
    )
}

/// The status row of `id`, or `None` when no such workflow exists.
pub(crate) async fn status(db: &SysDb, id: &str) -> Result<Option<StatusRow>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => status_pg(pool, &db.sql, id).await,
        Backend::Sqlite(lite) => sqlite::reads::status(lite, id).await,
    }
}

async fn status_pg(pool: &PgPool, sql: &Sql, id: &str) -> Result<Option<StatusRow>, DbError> {
    let Some(row) = sqlx::query(sql.status.clone())
        .bind(id)
        .fetch_optional(pool)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(StatusRow::from_row(&row)?))
}

pub(super) const GET_EVENT: &str =
    "SELECT value, serialization FROM {s}.workflow_events WHERE workflow_uuid = $1 AND key = $2";

/// The latest value of event `key` of workflow `id`, with its serialization.
pub(crate) async fn get_event(
    db: &SysDb,
    id: &str,
    key: &str,
) -> Result<Option<(String, Option<String>)>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => get_event_pg(pool, &db.sql, id, key).await,
        Backend::Sqlite(lite) => sqlite::reads::get_event(lite, id, key).await,
    }
}

async fn get_event_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    key: &str,
) -> Result<Option<(String, Option<String>)>, DbError> {
    let row = sqlx::query(sql.get_event.clone())
        .bind(id)
        .bind(key)
        .fetch_optional(pool)
        .await?;
    Ok(match row {
        Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
        None => None,
    })
}

pub(super) const READ_STREAM: &str = r#"
SELECT "offset", value, serialization FROM {s}.streams
WHERE workflow_uuid = $1 AND key = $2 AND "offset" >= $3
ORDER BY "offset" LIMIT $4
"#;

/// One value of a stream.
#[derive(Debug, Clone)]
pub(crate) struct StreamRow {
    pub offset: i32,
    pub value: String,
    pub serialization: Option<String>,
}

impl StreamRow {
    /// A stream row of either backend: offset, value, serialization.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StreamRow, sqlx::Error> {
        Ok(StreamRow {
            offset: row.at(0)?,
            value: row.at(1)?,
            serialization: row.at(2)?,
        })
    }
}

/// Up to `limit` values of stream `key` of workflow `id`, from `offset` on.
pub(crate) async fn read_stream(
    db: &SysDb,
    id: &str,
    key: &str,
    offset: i32,
    limit: i64,
) -> Result<Vec<StreamRow>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => {
            read_stream_pg(pool, &db.sql, id, key, offset, limit).await
        }
        Backend::Sqlite(lite) => sqlite::reads::read_stream(lite, id, key, offset, limit).await,
    }
}

async fn read_stream_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    key: &str,
    offset: i32,
    limit: i64,
) -> Result<Vec<StreamRow>, DbError> {
    let rows = sqlx::query(sql.read_stream.clone())
        .bind(id)
        .bind(key)
        .bind(offset)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .iter()
        .map(StreamRow::from_row)
        .collect::<Result<_, _>>()?)
}

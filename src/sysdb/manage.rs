//! Management statements: listing workflows and their steps, resuming, forking, deleting, and
//! changing a delay. Used by the client and the CLI; none of them runs workflow code.

use sqlx::{PgPool, Row};

use super::reads::{status_from_row, STATUS_COLUMNS};
use super::rows::{AnyRow, Bind};
use super::{now_ms, Sql};
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;
use crate::status::WorkflowStatus;

/// The filters of a workflow listing; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    pub ids: Option<Vec<String>>,
    pub statuses: Option<Vec<String>>,
    pub name: Option<String>,
    pub queue: Option<String>,
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    pub created_from: Option<i64>,
    pub created_until: Option<i64>,
    pub parent: Option<String>,
    pub forked_from: Option<String>,
    pub executor: Option<String>,
    pub queued_only: bool,
    pub payloads: bool,
    pub newest_first: bool,
    pub limit: Option<i64>,
    pub offset: i64,
}

/// A listed workflow: its status record and, when asked, its payloads as stored.
#[derive(Debug, Clone)]
pub(crate) struct ListedRow {
    pub status: WorkflowStatus,
    pub inputs: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub serialization: Option<String>,
}

/// Binds the filters after the ids and statuses (`$3` on) of either backend's list statement.
pub(super) fn bind_filters<'q, B: Bind<'q>>(b: B, q: &'q ListQuery) -> B {
    b.arg(&q.name)
        .arg(&q.queue)
        .arg(&q.app_version)
        .arg(&q.app_name)
        .arg(q.created_from)
        .arg(q.created_until)
        .arg(&q.parent)
        .arg(&q.forked_from)
        .arg(&q.executor)
        .arg(q.payloads)
        .arg(q.queued_only)
        .arg(q.limit)
        .arg(q.offset)
}

impl ListedRow {
    /// A row of `list_sql` on either backend: the status, then serialization and payloads.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<ListedRow, DbError> {
        Ok(ListedRow {
            status: status_from_row(row)?,
            serialization: row.at(20)?,
            inputs: row.at(21)?,
            output: row.at(22)?,
            error: row.at(23)?,
        })
    }
}

pub(super) fn list_sql(newest_first: bool) -> String {
    let order = if newest_first { "DESC" } else { "ASC" };
    format!(
        "SELECT {STATUS_COLUMNS}, w.serialization, \
           CASE WHEN $12 THEN COALESCE(i.inputs, w.inputs) END, \
           CASE WHEN $12 THEN COALESCE(o.output, w.output) END, \
           CASE WHEN $12 THEN COALESCE(o.error, w.error) END \
         FROM {{s}}.workflow_status w \
         LEFT JOIN {{s}}.workflow_input i ON $12 AND i.workflow_uuid = w.workflow_uuid \
         LEFT JOIN {{s}}.workflow_output o ON $12 AND o.workflow_uuid = w.workflow_uuid \
         WHERE ($1::text[] IS NULL OR w.workflow_uuid = ANY($1)) \
           AND ($2::text[] IS NULL OR w.status = ANY($2)) \
           AND ($3::text IS NULL OR w.name = $3) \
           AND ($4::text IS NULL OR w.queue_name = $4) \
           AND ($5::text IS NULL OR w.application_version = $5) \
           AND ($6::text IS NULL OR w.application_name = $6) \
           AND ($7::int8 IS NULL OR w.created_at >= $7) \
           AND ($8::int8 IS NULL OR w.created_at < $8) \
           AND ($9::text IS NULL OR w.parent_workflow_id = $9) \
           AND ($10::text IS NULL OR w.forked_from = $10) \
           AND ($11::text IS NULL OR w.executor_id = $11) \
           AND (NOT $13 OR (w.queue_name IS NOT NULL \
                AND w.status IN ('ENQUEUED', 'PENDING', 'DELAYED'))) \
         ORDER BY w.created_at {order}, w.workflow_uuid {order} \
         LIMIT $14 OFFSET $15"
    )
}

/// Workflows matching `q`, in creation order (newest first when asked).
pub(crate) async fn list(db: &SysDb, q: &ListQuery) -> Result<Vec<ListedRow>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => list_pg(pool, &db.sql, q).await,
        Backend::Sqlite(lite) => sqlite::manage::list(lite, q).await,
    }
}

async fn list_pg(pool: &PgPool, sql: &Sql, q: &ListQuery) -> Result<Vec<ListedRow>, DbError> {
    let statement = if q.newest_first {
        &sql.list_desc
    } else {
        &sql.list_asc
    };
    let rows = bind_filters(
        sqlx::query(statement.clone())
            .bind(&q.ids)
            .bind(&q.statuses),
        q,
    )
    .fetch_all(pool)
    .await?;
    rows.iter().map(ListedRow::from_row).collect()
}

/// One recorded durable call, for display.
#[derive(Debug, Clone)]
pub(crate) struct StepListing {
    pub function_id: i32,
    pub name: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub serialization: Option<String>,
}

pub(super) const STEPS: &str = "SELECT function_id, function_name, output, error, \
    child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms, serialization \
    FROM {s}.operation_outputs WHERE workflow_uuid = $1 ORDER BY function_id";

/// The recorded calls of workflow `id`, in order.
/// A step listing row of either backend, columns as `STEPS` selects them.
pub(super) fn step_listing(row: &impl AnyRow) -> Result<StepListing, sqlx::Error> {
    Ok(StepListing {
        function_id: row.at(0)?,
        name: row.at(1)?,
        output: row.at(2)?,
        error: row.at(3)?,
        child_workflow_id: row.at(4)?,
        started_at: row.at(5)?,
        completed_at: row.at(6)?,
        serialization: row.at(7)?,
    })
}

pub(crate) async fn steps(db: &SysDb, id: &str) -> Result<Vec<StepListing>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => steps_pg(pool, &db.sql, id).await,
        Backend::Sqlite(lite) => sqlite::manage::steps(lite, id).await,
    }
}

async fn steps_pg(pool: &PgPool, sql: &Sql, id: &str) -> Result<Vec<StepListing>, DbError> {
    let rows = sqlx::query(sql.steps.clone())
        .bind(id)
        .fetch_all(pool)
        .await?;
    Ok(rows.iter().map(step_listing).collect::<Result<_, _>>()?)
}

/// Puts workflow `id` back on `queue` from its last checkpoint, whatever its state (unless it
/// finished), and announces the takeover so the execution that owned it stops.
pub(super) const RESUME: &str = r#"
WITH old AS (
    SELECT workflow_uuid, owner_xid, status FROM {s}.workflow_status
    WHERE workflow_uuid = $1 FOR UPDATE
), upd AS (
    UPDATE {s}.workflow_status w
    SET status = 'ENQUEUED', owner_xid = NULL, queue_name = $2, recovery_attempts = 0,
        workflow_deadline_epoch_ms = NULL, deduplication_id = NULL, started_at_epoch_ms = NULL,
        completed_at = NULL, updated_at = $3
    FROM old
    WHERE w.workflow_uuid = old.workflow_uuid AND old.status NOT IN ('SUCCESS', 'ERROR')
    RETURNING w.workflow_uuid
), taken AS (
    SELECT pg_notify('stead_cancel_channel', old.workflow_uuid || '::' || old.owner_xid)
    FROM old JOIN upd ON upd.workflow_uuid = old.workflow_uuid WHERE old.owner_xid IS NOT NULL
), wake AS (
    SELECT pg_notify('stead_queue_channel', $2) FROM upd
)
SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM upd), (SELECT owner_xid FROM old),
       (SELECT count(*) FROM taken), (SELECT count(*) FROM wake)
"#;

/// What a resume found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resumed {
    pub exists: bool,
    /// False when the workflow had already finished (a no-op, as in DBOS).
    pub requeued: bool,
    /// The owner token of the execution that was running it, which must stop.
    pub previous_owner: Option<String>,
}

pub(crate) async fn resume(db: &SysDb, id: &str, queue: &str) -> Result<Resumed, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => resume_pg(pool, &db.sql, id, queue).await,
        Backend::Sqlite(lite) => sqlite::manage::resume(lite, id, queue).await,
    }
}

async fn resume_pg(pool: &PgPool, sql: &Sql, id: &str, queue: &str) -> Result<Resumed, DbError> {
    let row = sqlx::query(sql.resume.clone())
        .bind(id)
        .bind(queue)
        .bind(now_ms())
        .fetch_one(pool)
        .await?;
    Ok(Resumed {
        exists: row.try_get::<i64, _>(0)? > 0,
        requeued: row.try_get::<i64, _>(1)? > 0,
        previous_owner: row.try_get(2)?,
    })
}

/// A copy of workflow `$1` as `$2`, enqueued on `$3` (app version `$4`, or the original's),
/// with the original's recorded calls before `$5`, so it replays them and runs the rest.
pub(super) const FORK: &str = r#"
WITH src AS (
    SELECT * FROM {s}.workflow_status WHERE workflow_uuid = $1
), made AS (
    INSERT INTO {s}.workflow_status (
        workflow_uuid, status, name, class_name, config_name, queue_name, application_version,
        application_name, authenticated_user, assumed_role, authenticated_roles, serialization,
        forked_from, recovery_attempts, priority, created_at, updated_at, workflow_timeout_ms,
        inputs)
    SELECT $2, 'ENQUEUED', name, class_name, config_name, $3, COALESCE($4, application_version),
        application_name, authenticated_user, assumed_role, authenticated_roles, serialization,
        $1, 0, 0, $6, $6, workflow_timeout_ms, inputs
    FROM src
    ON CONFLICT (workflow_uuid) DO NOTHING
    RETURNING workflow_uuid
), input AS (
    INSERT INTO {s}.workflow_input (workflow_uuid, inputs)
    SELECT $2, i.inputs FROM {s}.workflow_input i JOIN made ON true WHERE i.workflow_uuid = $1
), calls AS (
    INSERT INTO {s}.operation_outputs (workflow_uuid, function_id, function_name, output, error,
        child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms, serialization,
        application_name)
    SELECT $2, o.function_id, o.function_name, o.output, o.error, o.child_workflow_id,
        o.started_at_epoch_ms, o.completed_at_epoch_ms, o.serialization, o.application_name
    FROM {s}.operation_outputs o JOIN made ON true
    WHERE o.workflow_uuid = $1 AND o.function_id < $5
), history AS (
    INSERT INTO {s}.workflow_events_history (workflow_uuid, function_id, key, value, serialization)
    SELECT $2, h.function_id, h.key, h.value, h.serialization
    FROM {s}.workflow_events_history h JOIN made ON true
    WHERE h.workflow_uuid = $1 AND h.function_id < $5
), events AS (
    INSERT INTO {s}.workflow_events (workflow_uuid, key, value, serialization)
    SELECT DISTINCT ON (h.key) $2, h.key, h.value, h.serialization
    FROM {s}.workflow_events_history h JOIN made ON true
    WHERE h.workflow_uuid = $1 AND h.function_id < $5
    ORDER BY h.key, h.function_id DESC
), stream AS (
    INSERT INTO {s}.streams (workflow_uuid, key, value, "offset", function_id, serialization)
    SELECT $2, s.key, s.value, s."offset", s.function_id, s.serialization
    FROM {s}.streams s JOIN made ON true
    WHERE s.workflow_uuid = $1 AND s.function_id < $5
), mark AS (
    UPDATE {s}.workflow_status SET was_forked_from = true
    WHERE workflow_uuid = $1 AND EXISTS (SELECT 1 FROM made)
), wake AS (
    SELECT pg_notify('stead_queue_channel', $3) FROM made
)
SELECT (SELECT count(*) FROM src), (SELECT count(*) FROM made), (SELECT count(*) FROM wake)
"#;

/// What a fork found: whether the original exists, and whether the copy was made now (it is
/// not when the new id already exists, as on a replay of the same fork).
pub(crate) async fn fork(
    db: &SysDb,
    id: &str,
    new_id: &str,
    queue: &str,
    app_version: Option<&str>,
    from_step: i32,
) -> Result<(bool, bool), DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => {
            fork_pg(pool, &db.sql, id, new_id, queue, app_version, from_step).await
        }
        Backend::Sqlite(lite) => {
            sqlite::manage::fork(lite, id, new_id, queue, app_version, from_step).await
        }
    }
}

async fn fork_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    new_id: &str,
    queue: &str,
    app_version: Option<&str>,
    from_step: i32,
) -> Result<(bool, bool), DbError> {
    let row = sqlx::query(sql.fork.clone())
        .bind(id)
        .bind(new_id)
        .bind(queue)
        .bind(app_version)
        .bind(from_step)
        .bind(now_ms())
        .fetch_one(pool)
        .await?;
    Ok((row.try_get::<i64, _>(0)? > 0, row.try_get::<i64, _>(1)? > 0))
}

/// Deletes workflow `$1` (and its descendants when `$2`) with every row that belongs to it.
pub(super) const DELETE: &str = r#"
WITH RECURSIVE tree AS (
    SELECT $1::text AS id
    UNION
    SELECT w.workflow_uuid FROM {s}.workflow_status w JOIN tree t ON w.parent_workflow_id = t.id
    WHERE $2
), calls AS (
    DELETE FROM {s}.operation_outputs WHERE workflow_uuid IN (SELECT id FROM tree)
), inputs AS (
    DELETE FROM {s}.workflow_input WHERE workflow_uuid IN (SELECT id FROM tree)
), outputs AS (
    DELETE FROM {s}.workflow_output WHERE workflow_uuid IN (SELECT id FROM tree)
), gone AS (
    DELETE FROM {s}.workflow_status WHERE workflow_uuid IN (SELECT id FROM tree)
    RETURNING workflow_uuid
)
SELECT workflow_uuid FROM gone
"#;

/// Deletes `id` (and its descendants when `cascade`); returns the ids deleted.
pub(crate) async fn delete(db: &SysDb, id: &str, cascade: bool) -> Result<Vec<String>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => delete_pg(pool, &db.sql, id, cascade).await,
        Backend::Sqlite(lite) => sqlite::manage::delete(lite, id, cascade).await,
    }
}

async fn delete_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    cascade: bool,
) -> Result<Vec<String>, DbError> {
    Ok(sqlx::query_scalar(sql.delete_workflow.clone())
        .bind(id)
        .bind(cascade)
        .fetch_all(pool)
        .await?)
}

pub(super) const SET_DELAY: &str = r#"
WITH upd AS (
    UPDATE {s}.workflow_status SET delay_until_epoch_ms = $2, updated_at = $3
    WHERE workflow_uuid = $1 AND status = 'DELAYED' RETURNING queue_name
), wake AS (
    SELECT pg_notify('stead_queue_channel', queue_name) FROM upd WHERE queue_name IS NOT NULL
)
SELECT w.status, w.queue_name, (SELECT count(*) FROM wake)
FROM {s}.workflow_status w WHERE w.workflow_uuid = $1
"#;

/// A workflow's status and queue, as a change of delay found it.
#[derive(Debug, Clone)]
pub(crate) struct Delayed {
    pub status: Option<String>,
    pub queue: Option<String>,
}

/// Moves a `DELAYED` workflow's due time; returns its status and queue (`None`: no such
/// workflow).
pub(crate) async fn set_delay(
    db: &SysDb,
    id: &str,
    until: i64,
) -> Result<Option<Delayed>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => set_delay_pg(pool, &db.sql, id, until).await,
        Backend::Sqlite(lite) => sqlite::manage::set_delay(lite, id, until).await,
    }
}

async fn set_delay_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    until: i64,
) -> Result<Option<Delayed>, DbError> {
    let row = sqlx::query(sql.set_delay.clone())
        .bind(id)
        .bind(until)
        .bind(now_ms())
        .fetch_optional(pool)
        .await?;
    Ok(match row {
        Some(row) => Some(Delayed::from_row(&row)?),
        None => None,
    })
}

impl Delayed {
    /// Status and queue, the first two columns of either backend's read.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<Delayed, sqlx::Error> {
        Ok(Delayed {
            status: row.at(0)?,
            queue: row.at(1)?,
        })
    }
}

//! The `workflow_schedules` table (schedule definitions, shared by every executor of an
//! application) and the firing statement: a batch of scheduled runs enqueued under their
//! deterministic ids, idempotently, with the schedule's `last_fired_at` in the same statement.

use sqlx::{PgPool, Row};

use super::rows::{AnyRow, Bind};

use super::{now_ms, Sql};
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;

/// A schedule row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleRow {
    pub id: String,
    pub name: String,
    pub workflow: String,
    pub class_name: Option<String>,
    pub cron: String,
    pub status: String,
    /// The context, as stored (stead writes portable JSON).
    pub context: String,
    pub last_fired_at: Option<String>,
    pub automatic_backfill: bool,
    pub timezone: Option<String>,
    pub queue: Option<String>,
    pub app_name: Option<String>,
}

pub(super) const COLUMNS: &str =
    "schedule_id, schedule_name, workflow_name, workflow_class_name, schedule, \
    status, context, last_fired_at, automatic_backfill, cron_timezone, queue_name, \
    application_name";

pub(super) fn list_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM {{s}}.workflow_schedules \
         WHERE application_name = $1 OR application_name IS NULL ORDER BY schedule_name"
    )
}

pub(super) fn get_sql() -> String {
    format!("SELECT {COLUMNS} FROM {{s}}.workflow_schedules WHERE schedule_name = $1")
}

/// Creates a schedule, or (with `$13`) replaces its definition while keeping its id, status and
/// `last_fired_at`, as DBOS's upsert does. Returns a row only when something was written.
pub(super) fn put_sql() -> String {
    format!(
        "INSERT INTO {{s}}.workflow_schedules AS w ({COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
         ON CONFLICT (schedule_name) DO UPDATE SET workflow_name = EXCLUDED.workflow_name, \
           workflow_class_name = EXCLUDED.workflow_class_name, schedule = EXCLUDED.schedule, \
           context = EXCLUDED.context, automatic_backfill = EXCLUDED.automatic_backfill, \
           cron_timezone = EXCLUDED.cron_timezone, queue_name = EXCLUDED.queue_name, \
           application_name = COALESCE(w.application_name, EXCLUDED.application_name) \
         WHERE $13 \
         RETURNING (xmax = 0)"
    )
}

pub(super) const SET_STATUS: &str =
    "UPDATE {s}.workflow_schedules SET status = $2 WHERE schedule_name = $1";

pub(super) const DELETE: &str = "DELETE FROM {s}.workflow_schedules WHERE schedule_name = $1";

/// Enqueues firings ($1 ids, $2 input envelopes, oldest first) of schedule $8; rows that exist
/// already (another executor fired the same instant) are left alone. Each row is `ENQUEUED` on
/// queue $5 with `schedule_name` set, and the queue is announced when anything was created.
pub(super) const FIRE: &str = r#"
WITH f AS (
    SELECT * FROM UNNEST($1::text[], $2::text[]) WITH ORDINALITY AS f(id, inputs, n)
), ins AS (
    INSERT INTO {s}.workflow_status AS w (
        workflow_uuid, status, name, class_name, queue_name, application_version,
        application_name, schedule_name, serialization, created_at, updated_at,
        recovery_attempts, priority)
    -- Consecutive created_at values keep a backfill's firings in order on the queue.
    SELECT f.id, 'ENQUEUED', $3, $4, $5, $6, $7, $8, 'portable_json', $9 + f.n - 1,
           $9 + f.n - 1, 0, 0
    FROM f ORDER BY f.n
    ON CONFLICT DO NOTHING
    RETURNING w.workflow_uuid
), inp AS (
    INSERT INTO {s}.workflow_input (workflow_uuid, inputs, retention_timestamp)
    SELECT f.id, f.inputs, $9 FROM f JOIN ins ON ins.workflow_uuid = f.id
    ON CONFLICT (workflow_uuid) DO NOTHING
), fired AS (
    UPDATE {s}.workflow_schedules SET last_fired_at = $10
    WHERE schedule_name = $8 AND $10::text IS NOT NULL
), note AS (
    SELECT pg_notify('stead_queue_channel', $5) WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM note)
"#;

/// Binds a schedule's `COLUMNS` as the first twelve parameters of either backend's statements.
pub(super) fn bind_schedule<'q, B: Bind<'q>>(b: B, s: &'q ScheduleRow) -> B {
    b.arg(&s.id)
        .arg(&s.name)
        .arg(&s.workflow)
        .arg(&s.class_name)
        .arg(&s.cron)
        .arg(&s.status)
        .arg(&s.context)
        .arg(&s.last_fired_at)
        .arg(s.automatic_backfill)
        .arg(&s.timezone)
        .arg(&s.queue)
        .arg(&s.app_name)
}

/// A `workflow_schedules` row of either backend, columns in `COLUMNS` order.
pub(super) fn row_to_schedule(row: &impl AnyRow) -> Result<ScheduleRow, sqlx::Error> {
    Ok(ScheduleRow {
        id: row.at(0)?,
        name: row.at(1)?,
        workflow: row.at(2)?,
        class_name: row.at(3)?,
        cron: row.at(4)?,
        status: row.at(5)?,
        context: row.at(6)?,
        last_fired_at: row.at(7)?,
        automatic_backfill: row.at(8)?,
        timezone: row.at(9)?,
        queue: row.at(10)?,
        app_name: row.at(11)?,
    })
}

/// The schedules of this application (rows of its name, and rows of none).
pub(crate) async fn list(db: &SysDb, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => list_pg(pool, &db.sql, app).await,
        Backend::Sqlite(lite) => sqlite::schedules::list(lite, app).await,
    }
}

async fn list_pg(pool: &PgPool, sql: &Sql, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError> {
    let rows = sqlx::query(sql.list_schedules.clone())
        .bind(app)
        .fetch_all(pool)
        .await?;
    Ok(rows.iter().map(row_to_schedule).collect::<Result<_, _>>()?)
}

/// The schedule named `name`, if any.
pub(crate) async fn get(db: &SysDb, name: &str) -> Result<Option<ScheduleRow>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => get_pg(pool, &db.sql, name).await,
        Backend::Sqlite(lite) => sqlite::schedules::get(lite, name).await,
    }
}

async fn get_pg(pool: &PgPool, sql: &Sql, name: &str) -> Result<Option<ScheduleRow>, DbError> {
    let row = sqlx::query(sql.get_schedule.clone())
        .bind(name)
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(row_to_schedule).transpose()?)
}

/// Writes a schedule. `replace` overwrites the definition of an existing one (keeping its id,
/// status and last firing); otherwise an existing one is left alone. `None`: it existed and was
/// left alone; `Some(created)` otherwise.
pub(crate) async fn put(
    db: &SysDb,
    s: &ScheduleRow,
    replace: bool,
) -> Result<Option<bool>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => put_pg(pool, &db.sql, s, replace).await,
        Backend::Sqlite(lite) => sqlite::schedules::put(lite, s, replace).await,
    }
}

async fn put_pg(
    pool: &PgPool,
    sql: &Sql,
    s: &ScheduleRow,
    replace: bool,
) -> Result<Option<bool>, DbError> {
    Ok(
        bind_schedule(sqlx::query_scalar(sql.put_schedule.clone()), s)
            .bind(replace)
            .fetch_optional(pool)
            .await?,
    )
}

/// Sets a schedule's status (`ACTIVE` or `PAUSED`); false when there is no such schedule.
pub(crate) async fn set_status(db: &SysDb, name: &str, status: &str) -> Result<bool, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => set_status_pg(pool, &db.sql, name, status).await,
        Backend::Sqlite(lite) => sqlite::schedules::set_status(lite, name, status).await,
    }
}

async fn set_status_pg(
    pool: &PgPool,
    sql: &Sql,
    name: &str,
    status: &str,
) -> Result<bool, DbError> {
    let done = sqlx::query(sql.set_schedule_status.clone())
        .bind(name)
        .bind(status)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Deletes a schedule; false when there was none. Runs it already enqueued stay.
pub(crate) async fn delete(db: &SysDb, name: &str) -> Result<bool, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => delete_pg(pool, &db.sql, name).await,
        Backend::Sqlite(lite) => sqlite::schedules::delete(lite, name).await,
    }
}

async fn delete_pg(pool: &PgPool, sql: &Sql, name: &str) -> Result<bool, DbError> {
    let done = sqlx::query(sql.delete_schedule.clone())
        .bind(name)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Firings of one schedule to enqueue.
#[derive(Debug, Clone)]
pub(crate) struct Firings {
    pub schedule: String,
    pub workflow: String,
    pub class_name: Option<String>,
    pub queue: String,
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    /// `(workflow id, input envelope)`, oldest first.
    pub runs: Vec<(String, String)>,
    /// Recorded as the schedule's `last_fired_at` (the scheduler's firings only).
    pub last_fired_at: Option<String>,
}

/// Enqueues `f`'s runs that do not exist yet; returns how many it created.
pub(crate) async fn fire(db: &SysDb, f: &Firings) -> Result<u64, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => fire_pg(pool, &db.sql, f).await,
        Backend::Sqlite(lite) => sqlite::schedules::fire(lite, f).await,
    }
}

async fn fire_pg(pool: &PgPool, sql: &Sql, f: &Firings) -> Result<u64, DbError> {
    let (ids, inputs): (Vec<&str>, Vec<&str>) = f
        .runs
        .iter()
        .map(|(id, input)| (id.as_str(), input.as_str()))
        .unzip();
    let row = sqlx::query(sql.fire_schedule.clone())
        .bind(ids)
        .bind(inputs)
        .bind(&f.workflow)
        .bind(&f.class_name)
        .bind(&f.queue)
        .bind(&f.app_version)
        .bind(&f.app_name)
        .bind(&f.schedule)
        .bind(now_ms())
        .bind(&f.last_fired_at)
        .fetch_one(pool)
        .await?;
    Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
}

//! The `workflow_schedules` table and the firing statement on Postgres: a firing is one
//! statement that enqueues the runs that do not exist yet, records `last_fired_at` and
//! announces the queue.

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::rows::{all, bind_schedule, SCHEDULE_COLUMNS};
use crate::sysdb::schedules::Schedules;
use crate::sysdb::{Firings, ScheduleRow};

/// Built once per process; `Sql::get` splices the schema in.
static PUT: LazyLock<String> = LazyLock::new(put_sql);

/// Built once per process; `Sql::get` splices the schema in.
static GET: LazyLock<String> = LazyLock::new(get_sql);

/// Built once per process; `Sql::get` splices the schema in.
static LIST: LazyLock<String> = LazyLock::new(list_sql);

fn list_sql() -> String {
    format!(
        "SELECT {SCHEDULE_COLUMNS} FROM {{s}}.workflow_schedules \
         WHERE application_name = $1 OR application_name IS NULL ORDER BY schedule_name"
    )
}

fn get_sql() -> String {
    format!("SELECT {SCHEDULE_COLUMNS} FROM {{s}}.workflow_schedules WHERE schedule_name = $1")
}

/// Creates a schedule, or (with `$13`) replaces its definition while keeping its id, status and
/// `last_fired_at`, as DBOS's upsert does. Returns a row only when something was written.
fn put_sql() -> String {
    format!(
        "INSERT INTO {{s}}.workflow_schedules AS w ({SCHEDULE_COLUMNS}) \
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

const SET_STATUS: &str = "UPDATE {s}.workflow_schedules SET status = $2 WHERE schedule_name = $1";

const DELETE: &str = "DELETE FROM {s}.workflow_schedules WHERE schedule_name = $1";

/// Enqueues firings ($1 ids, $2 input envelopes, oldest first) of schedule $8; rows that exist
/// already (another executor fired the same instant) are left alone. Each row is `ENQUEUED` on
/// queue $5 with `schedule_name` set, and the queue is announced when anything was created.
const FIRE: &str = r#"
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

#[async_trait]
impl Schedules for Postgres {
    async fn list_schedules(&self, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError> {
        let rows = self
            .sql
            .query(&LIST)
            .bind(app)
            .fetch_all(&self.pool)
            .await?;
        all(&rows, ScheduleRow::from_row)
    }

    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRow>, DbError> {
        let row = self
            .sql
            .query(&GET)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(ScheduleRow::from_row).transpose()?)
    }

    async fn put_schedule(&self, s: &ScheduleRow, replace: bool) -> Result<Option<bool>, DbError> {
        let query = bind_schedule(self.sql.query(&PUT), s);
        Ok(query
            .bind(replace)
            .fetch_optional_scalar(&self.pool)
            .await?)
    }

    async fn set_schedule_status(&self, name: &str, status: &str) -> Result<bool, DbError> {
        let done = self
            .sql
            .query(SET_STATUS)
            .bind(name)
            .bind(status)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, DbError> {
        let done = self
            .sql
            .query(DELETE)
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn fire_schedule(&self, f: &Firings) -> Result<u64, DbError> {
        let (ids, inputs): (Vec<&str>, Vec<&str>) = f
            .runs
            .iter()
            .map(|(id, input)| (id.as_str(), input.as_str()))
            .unzip();
        let row = self
            .sql
            .query(FIRE)
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
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
    }
}

//! The `workflow_schedules` table and the firing statement on Postgres: a firing is one
//! statement that enqueues the runs that do not exist yet, records `last_fired_at` and
//! announces the queue; under an overlap policy it runs after the check, in one transaction
//! holding the schedule's advisory lock.

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::Row;

use super::shards;
use super::Postgres;
use crate::base::clock::now_ms;
use crate::base::overlap::Overlap;
use crate::error::DbError;
use crate::sysdb::rows::{all, bind_schedule, SCHEDULE_COLUMNS, SCHEDULE_SELECT};
use crate::sysdb::schedules::{pick, Schedules};
use crate::sysdb::{Fired, Firings, ScheduleRow};

/// Built once per process; `Sql::get` splices the schema in.
static PUT: LazyLock<String> = LazyLock::new(put_sql);

/// Built once per process; `Sql::get` splices the schema in.
static GET: LazyLock<String> = LazyLock::new(get_sql);

/// Built once per process; `Sql::get` splices the schema in.
static LIST: LazyLock<String> = LazyLock::new(list_sql);

fn list_sql() -> String {
    format!(
        "SELECT {SCHEDULE_SELECT} FROM {{s}}.workflow_schedules \
         LEFT JOIN {{s}}.stead_schedule_policies p USING (schedule_name) \
         WHERE application_name = $1 OR application_name IS NULL ORDER BY schedule_name"
    )
}

fn get_sql() -> String {
    format!(
        "SELECT {SCHEDULE_SELECT} FROM {{s}}.workflow_schedules \
         LEFT JOIN {{s}}.stead_schedule_policies p USING (schedule_name) WHERE schedule_name = $1"
    )
}

/// Creates a schedule, or (with `$13`) replaces its definition while keeping its id, status and
/// `last_fired_at`, as DBOS's upsert does; the policy ($14, $15) is written with it (no row for
/// DBOS's default). Returns a row only when something was written.
fn put_sql() -> String {
    format!(
        "WITH w AS (INSERT INTO {{s}}.workflow_schedules AS w ({SCHEDULE_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
         ON CONFLICT (schedule_name) DO UPDATE SET workflow_name = EXCLUDED.workflow_name, \
           workflow_class_name = EXCLUDED.workflow_class_name, schedule = EXCLUDED.schedule, \
           context = EXCLUDED.context, automatic_backfill = EXCLUDED.automatic_backfill, \
           cron_timezone = EXCLUDED.cron_timezone, queue_name = EXCLUDED.queue_name, \
           application_name = COALESCE(w.application_name, EXCLUDED.application_name) \
         WHERE $13 \
         RETURNING (xmax = 0) AS created), \
         gone AS (DELETE FROM {{s}}.stead_schedule_policies WHERE schedule_name = $2 \
           AND EXISTS (SELECT 1 FROM w) AND $14 = 'allow_all' AND $15 = 0), \
         kept AS (INSERT INTO {{s}}.stead_schedule_policies (schedule_name, overlap_policy, jitter_ms) \
           SELECT $2, $14, $15 WHERE EXISTS (SELECT 1 FROM w) AND ($14 <> 'allow_all' OR $15 <> 0) \
           ON CONFLICT (schedule_name) DO UPDATE SET overlap_policy = EXCLUDED.overlap_policy, \
             jitter_ms = EXCLUDED.jitter_ms) \
         SELECT created FROM w"
    )
}

/// The schedule's unfinished runs, under its lock.
const BUSY: &str =
    "SELECT workflow_uuid, status FROM {s}.workflow_status WHERE schedule_name = $1 \
     AND status IN ('ENQUEUED', 'PENDING', 'DELAYED')";

/// Which of the ids $1 exist.
const EXISTING: &str =
    "SELECT workflow_uuid FROM {s}.workflow_status WHERE workflow_uuid = ANY($1::text[])";

/// A stable key for the schedule's advisory lock (FNV-1a of schema and name).
fn lock_key(schema: &str, schedule: &str) -> i64 {
    let key = format!("stead.schedule:{schema}:{schedule}");
    crate::base::hash::fnv1a(key.bytes()) as i64
}

const SET_STATUS: &str = "UPDATE {s}.workflow_schedules SET status = $2 WHERE schedule_name = $1";

const DELETE: &str =
    "WITH p AS (DELETE FROM {s}.stead_schedule_policies WHERE schedule_name = $1) \
    DELETE FROM {s}.workflow_schedules WHERE schedule_name = $1";

/// Enqueues firings ($1 ids, $2 input envelopes, $11 due times, oldest first) of schedule $8;
/// rows that exist already (another executor fired the same instant) are left alone. Each row is
/// `ENQUEUED` (`DELAYED` until its due time, when it has one) on queue $5 with `schedule_name`
/// set, and the queue is announced when anything was created.
const FIRE: &str = r#"
WITH f AS (
    SELECT * FROM UNNEST($1::text[], $2::text[], $11::int8[]) WITH ORDINALITY AS f(id, inputs, due, n)
), ins AS (
    INSERT INTO {s}.workflow_status AS w (
        workflow_uuid, status, name, class_name, queue_name, application_version,
        application_name, schedule_name, serialization, created_at, updated_at,
        recovery_attempts, priority, delay_until_epoch_ms)
    -- Consecutive created_at values keep a backfill's firings in order on the queue.
    SELECT f.id, CASE WHEN f.due IS NULL THEN 'ENQUEUED' ELSE 'DELAYED' END, $3, $4, $5, $6, $7,
           $8, 'portable_json', $9 + f.n - 1, $9 + f.n - 1, 0, 0, f.due
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
    SELECT pg_notify('stead_queue_channel', $5)::text WHERE EXISTS (SELECT 1 FROM ins)
)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM note)
"#;

/// Stamps schedule $1's last firing $2 (FIRE's own stamp, when the firings went to a bucket
/// other than the home).
const STAMP: &str = "UPDATE {s}.workflow_schedules SET last_fired_at = $2 WHERE schedule_name = $1";

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
            .bind(s.overlap.as_str())
            .bind(s.jitter_ms)
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

    /// On a sharded layout a schedule's firings live under its name as their shard key: its
    /// overlap checks and its firings' writes are then one bucket's; the schedule's row, in the
    /// home, is stamped after.
    async fn fire_schedule(&self, f: &Firings) -> Result<Fired, DbError> {
        let b = shards::bucket_of(&f.schedule, self.shards.count());
        let at = self.shards.bucket(b);
        let mut tx = self.pool.begin().await?;
        let mut runs: Vec<&(String, String, Option<i64>)> = f.runs.iter().collect();
        let mut others = Vec::new();
        let mut held = 0;
        if f.overlap != Overlap::AllowAll {
            // Serializes this check and insert with every other firing of the schedule.
            // On Citus, anchored to a table of the bucket (`claim::anchor`).
            let lock = match at.is_citus() {
                true => "SELECT pg_advisory_xact_lock($1), count(*) FROM {s}.dbos_migrations",
                false => "SELECT pg_advisory_xact_lock($1)",
            };
            at.query(lock)
                .bind(lock_key(&at.schema, &f.schedule))
                .execute(&mut *tx)
                .await?;
            let busy: Vec<(String, String)> = at
                .query(BUSY)
                .bind(&f.schedule)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()?;
            let ids: Vec<&str> = f.runs.iter().map(|r| r.0.as_str()).collect();
            let existing: Vec<String> = at
                .query(EXISTING)
                .bind(ids)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, sqlx::Error>>()?;
            let fresh: Vec<usize> = (0..f.runs.len())
                .filter(|n| !existing.contains(&f.runs[*n].0))
                .collect();
            let (chosen, cancel) = pick(f.overlap, &fresh, &busy);
            held = (fresh.len() - usize::from(chosen.is_some())) as u64;
            runs = chosen.map(|n| &f.runs[n]).into_iter().collect();
            others = cancel;
        }
        let ids: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
        let inputs: Vec<&str> = runs.iter().map(|r| r.1.as_str()).collect();
        let dues: Vec<Option<i64>> = runs.iter().map(|r| r.2).collect();
        let row = at
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
            .bind(dues)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        if b != 0 && f.last_fired_at.is_some() {
            self.sql
                .query(STAMP)
                .bind(&f.schedule)
                .bind(&f.last_fired_at)
                .execute(&self.pool)
                .await?;
        }
        let created = row.try_get::<i64, _>(0)?.max(0) as u64;
        if created == 0 {
            others.clear();
        }
        Ok(Fired {
            created,
            others,
            held,
        })
    }
}

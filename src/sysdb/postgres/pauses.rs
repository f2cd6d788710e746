//! Paused queues and workflows on Postgres (`stead_queue_pauses`, `stead_workflow_pauses`,
//! `sysdb::pauses`). Each write announces what it changed in its own statement.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::error::DbError;
use crate::sysdb::pauses::{PauseOutcome, Pauses, Unpaused};

/// The first pause wins: a second one keeps its time (and reports that it found it paused).
const PAUSE: &str = "INSERT INTO {s}.stead_queue_pauses (queue_name, paused_at) VALUES ($1, $2) \
     ON CONFLICT (queue_name) DO NOTHING RETURNING 1";

/// Deletes the row and announces the queue in the same commit, as an enqueue does; the count
/// reads `note`, so the notification is never planned away.
const RESUME: &str = "WITH gone AS (DELETE FROM {s}.stead_queue_pauses WHERE queue_name = $1 \
         RETURNING queue_name), \
     note AS (SELECT pg_notify('stead_queue_channel', queue_name)::text FROM gone) \
     SELECT count(*) FROM note";

const LIST: &str = "SELECT queue_name, paused_at FROM {s}.stead_queue_pauses ORDER BY queue_name";

/// Pauses a workflow that has not finished (the first pause keeps its time) and announces it
/// each time, so a run that missed an earlier announcement hears this one. Its status, whether
/// this call paused it, and the announcement's count (read so it is never planned away).
const PAUSE_WORKFLOW: &str = r#"
WITH w AS (SELECT status FROM {s}.workflow_status WHERE workflow_uuid = $1),
added AS (
    INSERT INTO {s}.stead_workflow_pauses (workflow_uuid, paused_at)
    SELECT $1, $2 FROM w WHERE w.status IN ('PENDING', 'ENQUEUED', 'DELAYED')
    ON CONFLICT (workflow_uuid) DO NOTHING
    RETURNING 1
), note AS (
    SELECT pg_notify('stead_pause_channel', $1)::text FROM w
    WHERE w.status IN ('PENDING', 'ENQUEUED', 'DELAYED')
)
SELECT (SELECT status FROM w), (SELECT count(*) FROM added), (SELECT count(*) FROM note)
"#;

/// Deletes the pause; a row that waits on its queue is announced there.
const UNPAUSE_WORKFLOW: &str = r#"
WITH gone AS (
    DELETE FROM {s}.stead_workflow_pauses WHERE workflow_uuid = $1 RETURNING 1
), w AS (SELECT status, queue_name FROM {s}.workflow_status WHERE workflow_uuid = $1),
note AS (
    SELECT pg_notify('stead_queue_channel', w.queue_name)::text FROM w, gone
    WHERE w.status = 'ENQUEUED' AND w.queue_name IS NOT NULL
)
SELECT w.status, w.queue_name, (SELECT count(*) FROM gone), (SELECT count(*) FROM note) FROM w
"#;

/// A stopped paused run back on its queue, as recovery puts it (`postgres/dispatch.rs`), with
/// the attempt its claim counted given back.
const REQUEUE_PAUSED: &str = r#"
WITH moved AS (
    UPDATE {s}.workflow_status
    SET status = 'ENQUEUED', queue_name = COALESCE(queue_name, $3), owner_xid = NULL,
        updated_at = $4, recovery_attempts = GREATEST(COALESCE(recovery_attempts, 1) - 1, 0)
    WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2
    RETURNING queue_name
), note AS (SELECT pg_notify('stead_queue_channel', queue_name)::text FROM moved)
SELECT queue_name, (SELECT count(*) FROM note) FROM moved
"#;

#[async_trait]
impl Pauses for Postgres {
    /// On a sharded layout every bucket keeps the pause (its claims read it), the home first;
    /// the home's answers.
    async fn pause_queue(&self, queue: &str, now_ms: i64) -> Result<bool, DbError> {
        let mut paused = false;
        for (b, sql) in self.buckets().iter().enumerate() {
            let row = sql
                .query(PAUSE)
                .bind(queue)
                .bind(now_ms)
                .fetch_optional(&self.pool)
                .await?;
            paused |= b == 0 && row.is_some();
        }
        Ok(paused)
    }

    async fn resume_queue(&self, queue: &str) -> Result<bool, DbError> {
        let mut resumed = false;
        for (b, sql) in self.buckets().iter().enumerate() {
            let row = sql.query(RESUME).bind(queue).fetch_one(&self.pool).await?;
            resumed |= b == 0 && row.try_get::<i64, _>(0)? > 0;
        }
        Ok(resumed)
    }

    async fn paused_queues(&self) -> Result<Vec<(String, i64)>, DbError> {
        let rows = self.sql.query(LIST).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    async fn pause_workflow(&self, id: &str, now_ms: i64) -> Result<PauseOutcome, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(PAUSE_WORKFLOW)
            .bind(id)
            .bind(now_ms)
            .fetch_one(&self.pool)
            .await?;
        let status: Option<String> = row.try_get(0)?;
        let added = row.try_get::<i64, _>(1)? > 0;
        Ok(PauseOutcome::of(status, added))
    }

    async fn unpause_workflow(&self, id: &str) -> Result<Option<Unpaused>, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(UNPAUSE_WORKFLOW)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(Unpaused {
                status: r.try_get(0)?,
                queue: r.try_get(1)?,
                was_paused: r.try_get::<i64, _>(2)? > 0,
            })
        })
        .transpose()
    }

    async fn requeue_paused(&self, id: &str, owner: &str) -> Result<Option<String>, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(REQUEUE_PAUSED)
            .bind(id)
            .bind(owner)
            .bind(INTERNAL_QUEUE)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok(r.try_get(0)?)).transpose()
    }
}

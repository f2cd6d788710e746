//! Paused queues on Postgres (`stead_queue_pauses`, `sysdb::pauses`).

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::pauses::Pauses;

/// The first pause wins: a second one keeps its time (and reports that it found it paused).
const PAUSE: &str = "INSERT INTO {s}.stead_queue_pauses (queue_name, paused_at) VALUES ($1, $2) \
     ON CONFLICT (queue_name) DO NOTHING RETURNING 1";

/// Deletes the row and announces the queue in the same commit, as an enqueue does; the count
/// reads `note`, so the notification is never planned away.
const RESUME: &str = "WITH gone AS (DELETE FROM {s}.stead_queue_pauses WHERE queue_name = $1 \
         RETURNING queue_name), \
     note AS (SELECT pg_notify('stead_queue_channel', queue_name) FROM gone) \
     SELECT count(*) FROM note";

const LIST: &str = "SELECT queue_name, paused_at FROM {s}.stead_queue_pauses ORDER BY queue_name";

#[async_trait]
impl Pauses for Postgres {
    async fn pause_queue(&self, queue: &str, now_ms: i64) -> Result<bool, DbError> {
        let row = self
            .sql
            .query(PAUSE)
            .bind(queue)
            .bind(now_ms)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    async fn resume_queue(&self, queue: &str) -> Result<bool, DbError> {
        let row = self
            .sql
            .query(RESUME)
            .bind(queue)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get::<i64, _>(0)? > 0)
    }

    async fn paused_queues(&self) -> Result<Vec<(String, i64)>, DbError> {
        let rows = self.sql.query(LIST).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }
}

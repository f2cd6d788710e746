//! Observation reads on SQLite: the load of each queue and completions per time bucket.

use async_trait::async_trait;
use sqlx::Row;

use super::{json_list, Sqlite};
use crate::error::DbError;
use crate::sysdb::claim::QueueKey;
use crate::sysdb::observe::Observe;
use crate::sysdb::rows::all;
use crate::sysdb::Waiting;
use crate::sysdb::{CompletedBucket, QueueCounts};

#[async_trait]
impl Observe for Sqlite {
    async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").execute(self.reader()).await?;
        Ok(())
    }

    async fn queue_counts(&self, queues: &[String]) -> Result<Vec<QueueCounts>, DbError> {
        let rows = sqlx::query(
            "SELECT queue_name, count(*) FILTER (WHERE status = 'ENQUEUED'), \
                    count(*) FILTER (WHERE status = 'PENDING'), \
                    min(created_at) FILTER (WHERE status = 'ENQUEUED') \
             FROM workflow_status \
             WHERE queue_name IN (SELECT value FROM json_each(?1)) \
               AND status IN ('ENQUEUED', 'PENDING') \
             GROUP BY queue_name",
        )
        .bind(json_list(queues))
        .fetch_all(self.reader())
        .await?;
        all(&rows, QueueCounts::from_row)
    }

    async fn waiting(&self, queue: &str, floor: Option<QueueKey>) -> Result<Waiting, DbError> {
        let row = sqlx::query(
            "SELECT count(*), min(created_at), \
                    EXISTS (SELECT 1 FROM workflow_status \
                            WHERE queue_name = ?1 AND status = 'ENQUEUED' \
                              AND priority = ?2 AND created_at < ?3) \
             FROM workflow_status WHERE queue_name = ?1 AND status = 'ENQUEUED'",
        )
        .bind(queue)
        .bind(floor.map(|f| f.0))
        .bind(floor.map(|f| f.1))
        .fetch_one(self.reader())
        .await?;
        Ok(Waiting {
            enqueued: row.try_get(0)?,
            oldest: row.try_get(1)?,
            below_floor: row.try_get(2)?,
        })
    }

    async fn completed(
        &self,
        since_ms: i64,
        bucket_ms: i64,
        buckets: i64,
    ) -> Result<Vec<CompletedBucket>, DbError> {
        let rows = sqlx::query(
            "SELECT (completed_at - ?1) / ?2 AS bucket, \
                    count(*) FILTER (WHERE status = 'SUCCESS'), \
                    count(*) FILTER (WHERE status <> 'SUCCESS') \
             FROM workflow_status \
             WHERE completed_at IS NOT NULL AND completed_at >= ?1 AND completed_at < ?1 + ?2 * ?3 \
             GROUP BY 1 ORDER BY 1",
        )
        .bind(since_ms)
        .bind(bucket_ms)
        .bind(buckets)
        .fetch_all(self.reader())
        .await?;
        all(&rows, CompletedBucket::from_row)
    }
}

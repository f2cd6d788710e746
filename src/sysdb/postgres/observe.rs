//! Observation reads on Postgres, each driven by a partial index.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::claim::QueueKey;
use crate::sysdb::observe::Observe;
use crate::sysdb::rows::all;
use crate::sysdb::Waiting;
use crate::sysdb::{CompletedBucket, QueueCounts};

/// Waiting (`ENQUEUED`) and running (`PENDING`) workflows of each queue in `$1`, and the oldest
/// waiting one's `created_at`; served by the in-flight index on (queue, status, priority,
/// `created_at`).
const QUEUE_COUNTS: &str = r#"
SELECT queue_name,
       count(*) FILTER (WHERE status = 'ENQUEUED'),
       count(*) FILTER (WHERE status = 'PENDING'),
       min(created_at) FILTER (WHERE status = 'ENQUEUED')
FROM {s}.workflow_status
WHERE queue_name = ANY($1::text[]) AND status IN ('ENQUEUED', 'PENDING')
GROUP BY queue_name
"#;

/// One queue's `ENQUEUED` rows ($1): how many, the oldest, and whether one of the floor's
/// priority ($2) lies below it ($3), each from the in-flight index.
pub(super) const WAITING: &str = r#"
SELECT count(*), min(created_at),
       EXISTS (SELECT 1 FROM {s}.workflow_status
               WHERE queue_name = $1 AND status = 'ENQUEUED'
                 AND priority = $2::int4 AND created_at < $3::int8)
FROM {s}.workflow_status
WHERE queue_name = $1 AND status = 'ENQUEUED'
"#;

/// Workflows that completed in `[$1, $1 + $2 * $3)`, per bucket of `$2` ms (bucket index,
/// successes, errors); served by the partial index on `completed_at`.
const THROUGHPUT: &str = r#"
SELECT (completed_at - $1) / $2 AS bucket,
       count(*) FILTER (WHERE status = 'SUCCESS'),
       count(*) FILTER (WHERE status <> 'SUCCESS')
FROM {s}.workflow_status
WHERE completed_at IS NOT NULL AND completed_at >= $1 AND completed_at < $1 + $2 * $3
GROUP BY 1
ORDER BY 1
"#;

#[async_trait]
impl Observe for Postgres {
    async fn ping(&self) -> Result<(), DbError> {
        self.sql.query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Every bucket's counts, added up (this fans out).
    async fn queue_counts(&self, queues: &[String]) -> Result<Vec<QueueCounts>, DbError> {
        let mut counts: Vec<QueueCounts> = Vec::new();
        for sql in self.buckets().iter() {
            let rows = sql
                .query(QUEUE_COUNTS)
                .bind(queues)
                .fetch_all(&self.pool)
                .await?;
            for c in all(&rows, QueueCounts::from_row)? {
                match counts.iter_mut().find(|have| have.queue == c.queue) {
                    Some(have) => {
                        have.enqueued += c.enqueued;
                        have.pending += c.pending;
                        have.oldest_enqueued = earliest(have.oldest_enqueued, c.oldest_enqueued);
                    }
                    None => counts.push(c),
                }
            }
        }
        Ok(counts)
    }

    /// Every bucket's waiting rows (this fans out).
    async fn waiting(&self, queue: &str, floor: Option<QueueKey>) -> Result<Waiting, DbError> {
        let mut waiting = Waiting::default();
        for sql in self.buckets().iter() {
            let row = sql
                .query(WAITING)
                .bind(queue)
                .bind(floor.map(|f| f.0))
                .bind(floor.map(|f| f.1))
                .fetch_one(&self.pool)
                .await?;
            waiting.enqueued += row.try_get::<i64, _>(0)?;
            waiting.oldest = earliest(waiting.oldest, row.try_get(1)?);
            waiting.below_floor |= row.try_get::<bool, _>(2)?;
        }
        Ok(waiting)
    }

    async fn completed(
        &self,
        since_ms: i64,
        bucket_ms: i64,
        buckets: i64,
    ) -> Result<Vec<CompletedBucket>, DbError> {
        let mut done: Vec<CompletedBucket> = Vec::new();
        for sql in self.buckets().iter() {
            let rows = sql
                .query(THROUGHPUT)
                .bind(since_ms)
                .bind(bucket_ms)
                .bind(buckets)
                .fetch_all(&self.pool)
                .await?;
            for b in all(&rows, CompletedBucket::from_row)? {
                match done.iter_mut().find(|have| have.index == b.index) {
                    Some(have) => {
                        have.succeeded += b.succeeded;
                        have.failed += b.failed;
                    }
                    None => done.push(b),
                }
            }
        }
        done.sort_by_key(|b| b.index);
        Ok(done)
    }
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

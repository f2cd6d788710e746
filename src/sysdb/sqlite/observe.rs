//! Observation reads on SQLite: the load of each queue and completions per time bucket.

use super::{json_list, Lite};
use crate::error::DbError;
use sqlx::AssertSqlSafe;

use crate::sysdb::observe::{CompletedBucket, QueueCounts, THROUGHPUT};

/// The counts of the queues named; queues with nothing waiting or running are absent.
pub(crate) async fn queue_counts(
    lite: &Lite,
    queues: &[String],
) -> Result<Vec<QueueCounts>, DbError> {
    let rows = sqlx::query(
        "SELECT queue_name, count(*) FILTER (WHERE status = 'ENQUEUED'), \
                count(*) FILTER (WHERE status = 'PENDING') \
         FROM workflow_status \
         WHERE queue_name IN (SELECT value FROM json_each(?1)) \
           AND status IN ('ENQUEUED', 'PENDING') \
         GROUP BY queue_name",
    )
    .bind(json_list(queues))
    .fetch_all(lite.reader())
    .await?;
    Ok(rows
        .iter()
        .map(QueueCounts::from_row)
        .collect::<Result<_, _>>()?)
}

/// Completions in `buckets` buckets of `bucket_ms` from `since_ms`; empty buckets are absent.
pub(crate) async fn completed(
    lite: &Lite,
    since_ms: i64,
    bucket_ms: i64,
    buckets: i64,
) -> Result<Vec<CompletedBucket>, DbError> {
    // Postgres's statement, unqualified: its `$n` parameters first appear in order.
    let rows = sqlx::query(AssertSqlSafe(THROUGHPUT.replace("{s}.", "")))
        .bind(since_ms)
        .bind(bucket_ms)
        .bind(buckets)
        .fetch_all(lite.reader())
        .await?;
    Ok(rows
        .iter()
        .map(CompletedBucket::from_row)
        .collect::<Result<_, _>>()?)
}

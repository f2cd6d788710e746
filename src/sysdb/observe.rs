//! Read-only statements that show what the system is doing: a liveness ping, the load of each
//! queue, and how many workflows finished per time bucket. They change nothing and are cheap
//! enough to run every few seconds (each is driven by a partial index).

use sqlx::PgPool;

use super::rows::AnyRow;
use super::Sql;
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;

/// Answers when the database does.
const PING: &str = "SELECT 1";

/// Waiting (`ENQUEUED`) and running (`PENDING`) workflows of each queue in `$1`; served by the
/// in-flight index on (queue, status).
pub(super) const QUEUE_COUNTS: &str = r#"
SELECT queue_name,
       count(*) FILTER (WHERE status = 'ENQUEUED'),
       count(*) FILTER (WHERE status = 'PENDING')
FROM {s}.workflow_status
WHERE queue_name = ANY($1::text[]) AND status IN ('ENQUEUED', 'PENDING')
GROUP BY queue_name
"#;

/// Workflows that completed in `[$1, $1 + $2 * $3)`, per bucket of `$2` ms (bucket index,
/// successes, errors); served by the partial index on `completed_at`.
pub(super) const THROUGHPUT: &str = r#"
SELECT (completed_at - $1) / $2 AS bucket,
       count(*) FILTER (WHERE status = 'SUCCESS'),
       count(*) FILTER (WHERE status <> 'SUCCESS')
FROM {s}.workflow_status
WHERE completed_at IS NOT NULL AND completed_at >= $1 AND completed_at < $1 + $2 * $3
GROUP BY 1
ORDER BY 1
"#;

/// How many workflows of a queue wait and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueCounts {
    pub queue: String,
    pub enqueued: i64,
    pub pending: i64,
}

/// One bucket of completions, by its index from the start of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompletedBucket {
    pub index: i64,
    pub succeeded: i64,
    pub failed: i64,
}

impl QueueCounts {
    pub(super) fn from_row(row: &impl AnyRow) -> Result<QueueCounts, sqlx::Error> {
        Ok(QueueCounts {
            queue: row.at(0)?,
            enqueued: row.at(1)?,
            pending: row.at(2)?,
        })
    }
}

impl CompletedBucket {
    pub(super) fn from_row(row: &impl AnyRow) -> Result<CompletedBucket, sqlx::Error> {
        Ok(CompletedBucket {
            index: row.at(0)?,
            succeeded: row.at(1)?,
            failed: row.at(2)?,
        })
    }
}

/// Runs a trivial statement: `Ok` when the database answers.
pub(crate) async fn ping(db: &SysDb) -> Result<(), DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => {
            sqlx::query(PING).execute(pool).await?;
        }
        Backend::Sqlite(lite) => {
            sqlx::query(PING).execute(lite.reader()).await?;
        }
    }
    Ok(())
}

/// The counts of the queues named; queues with nothing waiting or running are absent.
pub(crate) async fn queue_counts(
    db: &SysDb,
    queues: &[String],
) -> Result<Vec<QueueCounts>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => queue_counts_pg(pool, &db.sql, queues).await,
        Backend::Sqlite(lite) => sqlite::observe::queue_counts(lite, queues).await,
    }
}

async fn queue_counts_pg(
    pool: &PgPool,
    sql: &Sql,
    queues: &[String],
) -> Result<Vec<QueueCounts>, DbError> {
    let rows = sqlx::query(sql.queue_counts.clone())
        .bind(queues)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .iter()
        .map(QueueCounts::from_row)
        .collect::<Result<_, _>>()?)
}

/// Completions in `buckets` buckets of `bucket_ms` from `since_ms`; empty buckets are absent.
pub(crate) async fn completed(
    db: &SysDb,
    since_ms: i64,
    bucket_ms: i64,
    buckets: i64,
) -> Result<Vec<CompletedBucket>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => {
            completed_pg(pool, &db.sql, since_ms, bucket_ms, buckets).await
        }
        Backend::Sqlite(lite) => {
            sqlite::observe::completed(lite, since_ms, bucket_ms, buckets).await
        }
    }
}

async fn completed_pg(
    pool: &PgPool,
    sql: &Sql,
    since_ms: i64,
    bucket_ms: i64,
    buckets: i64,
) -> Result<Vec<CompletedBucket>, DbError> {
    let rows = sqlx::query(sql.throughput.clone())
        .bind(since_ms)
        .bind(bucket_ms)
        .bind(buckets)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .iter()
        .map(CompletedBucket::from_row)
        .collect::<Result<_, _>>()?)
}

//! Read-only views of what the system is doing: a liveness ping, the load of each queue, and how
//! many workflows finished per time bucket. They change nothing and are cheap enough to run
//! every few seconds.

use async_trait::async_trait;

use crate::error::DbError;
use crate::sysdb::claim::QueueKey;

/// How many workflows of a queue wait and run, and since when the oldest waiting one waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueCounts {
    pub queue: String,
    pub enqueued: i64,
    pub pending: i64,
    /// The `created_at` of the oldest `ENQUEUED` row, across priorities (as a claim reports it:
    /// `sysdb::claim`, "Queue lag").
    pub oldest_enqueued: Option<i64>,
}

/// What waits in one queue: read for its gauges and its claims' floor (`sysdb::claim`,
/// "Surveys").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// `ENQUEUED` rows.
    pub enqueued: i64,
    /// The oldest `ENQUEUED` row's `created_at`, across priorities.
    pub oldest: Option<i64>,
    /// An `ENQUEUED` row of the floor's priority lies below the floor.
    pub below_floor: bool,
}

/// One bucket of completions, by its index from the start of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompletedBucket {
    pub index: i64,
    pub succeeded: i64,
    pub failed: i64,
}

#[async_trait]
pub(crate) trait Observe: Send + Sync {
    /// `Ok` when the database answers.
    async fn ping(&self) -> Result<(), DbError>;

    /// The `ENQUEUED` and `PENDING` counts of the queues named, with their oldest `ENQUEUED`
    /// row; queues with nothing waiting or running are absent.
    async fn queue_counts(&self, queues: &[String]) -> Result<Vec<QueueCounts>, DbError>;

    /// What waits in `queue`, and whether a row lies below `floor` (rule 6 of `sysdb::claim`).
    async fn waiting(&self, queue: &str, floor: Option<QueueKey>) -> Result<Waiting, DbError>;

    /// Completions (by `completed_at`; successes, and the rest as failures) in `buckets`
    /// buckets of `bucket_ms` from `since_ms`; empty buckets are absent.
    async fn completed(
        &self,
        since_ms: i64,
        bucket_ms: i64,
        buckets: i64,
    ) -> Result<Vec<CompletedBucket>, DbError>;
}

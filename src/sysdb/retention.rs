//! Garbage collection of finished workflows.
//!
//! It must never delete a workflow that may still run: `PENDING`, `ENQUEUED` and `DELAYED` rows
//! are never selected. Deletes go in batches, each its own commit, so a large collection holds
//! no long transaction.

use async_trait::async_trait;

use crate::error::DbError;

/// Rows deleted per batch.
pub(crate) const COLLECT_BATCH: i64 = 10_000;

#[async_trait]
pub(crate) trait Collect: Send + Sync {
    /// Deletes workflows that finished (`SUCCESS`, `ERROR`, `CANCELLED`,
    /// `MAX_RECOVERY_ATTEMPTS_EXCEEDED`) and were created before `older_than_ms` (epoch ms) or
    /// fall beyond the newest `keep_newest` finished ones (by `created_at`, then id), with their
    /// steps, inputs and outputs; events, streams and messages cascade. With neither bound it
    /// deletes nothing. Returns how many workflows it deleted.
    async fn garbage_collect(
        &self,
        older_than_ms: Option<i64>,
        keep_newest: Option<i64>,
    ) -> Result<u64, DbError>;
}

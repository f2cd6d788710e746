//! Paused queues: `stead_queue_pauses`, a table of stead's own (never one of DBOS's), shared by
//! every process on the database.
//!
//! A row pauses its queue: every executor's claim on it allows nothing (the claim reads the
//! table in its budget, `postgres/claim.rs` and `sqlite/claim.rs`), so no executor starts its
//! work at its next claim. Enqueues still land (`ENQUEUED`, as DBOS readers expect) and running
//! workflows finish. A claim whose snapshot was taken before the pause committed may still take
//! rows: a pause stops claims that begin after it. A claim reports the pause, so its executor
//! also stops starting its own process's enqueues at once (the admission machine's fast path).
//! Resuming deletes the row and announces the
//! queue (Postgres: `stead_queue_channel`) so listening executors claim at once.
//!
//! It must never change a workflow row: a pause is the queue's state, not its workflows'.

use async_trait::async_trait;

use crate::error::DbError;

#[async_trait]
pub(crate) trait Pauses: Send + Sync {
    /// Pauses `queue` from `now_ms` (epoch ms). True if it was running; an already paused
    /// queue keeps its first pause time.
    async fn pause_queue(&self, queue: &str, now_ms: i64) -> Result<bool, DbError>;

    /// Resumes `queue` and announces it. True if it was paused.
    async fn resume_queue(&self, queue: &str) -> Result<bool, DbError>;

    /// The paused queues with when each was paused (epoch ms), by name.
    async fn paused_queues(&self) -> Result<Vec<(String, i64)>, DbError>;
}

//! Paused queues and paused workflows: `stead_queue_pauses` and `stead_workflow_pauses`, tables
//! of stead's own (never DBOS's), shared by every process on the database.
//!
//! **A paused queue.** A row pauses its queue: every executor's claim on it allows nothing (the
//! claim reads the table in its budget, `postgres/claim.rs` and `sqlite/claim.rs`), so no executor
//! starts its work at its next claim. Enqueues still land (`ENQUEUED`, as DBOS readers expect) and
//! running workflows finish. A claim whose snapshot was taken before the pause committed may still
//! take rows: a pause stops claims that begin after it. A claim reports the pause, so its executor
//! also stops starting its own process's enqueues at once (the admission machine's fast path).
//! Resuming deletes the row and announces the queue (Postgres: `stead_queue_channel`) so listening
//! executors claim at once. It must never change a workflow row: a pause is the queue's state.
//!
//! **A paused workflow.** DBOS has no paused status, so the workflow's row keeps DBOS's statuses
//! throughout and the pause is a row of `stead_workflow_pauses` (deleted with the workflow): a DBOS
//! reader sees a paused workflow as `ENQUEUED` (or `PENDING` while its run is stopping) and is
//! never confused; stead's readers add `paused_at_ms`. Pausing writes the row (only of a workflow
//! not finished) and announces the id ([`PAUSE_CHANNEL`], Postgres); the executor running it stops
//! the run before its next durable call (`engine::pause`), writes the step records it held and
//! puts its row back on its queue with [`Pauses::requeue_paused`]: `ENQUEUED`, no owner, as
//! recovery does (a direct start goes to the internal queue), which frees its concurrency slot
//! everywhere. No claim takes a paused row (the claims skip it), so recovery, adoption and every
//! executor leave it alone across restarts and fleet changes. Resuming deletes the row and
//! announces its queue: any executor serving it claims the row and runs it by replay, from where it
//! stopped. A claim's pick and its count of waiting rows skip paused rows (a key probe per
//! candidate); a queue's survey (gauges, the look below a floor) stays an index-only read and
//! counts them: a paused row below a claim's floor costs at most one claim from the front per
//! survey.

use async_trait::async_trait;

use crate::error::DbError;

/// The channel a workflow's pause is announced on; the payload is the workflow id.
pub(crate) const PAUSE_CHANNEL: &str = "stead_pause_channel";

/// The status a held run is reported with ([`crate::sysdb::LostRun`]) when its row is still its
/// own but the workflow is paused: not one of DBOS's, never stored.
pub(crate) const PAUSED_RUN: &str = "PAUSED";

/// What pausing a workflow found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PauseOutcome {
    /// No such workflow.
    NotFound,
    /// It has finished (this status); nothing was written.
    Finished(String),
    /// It is paused: `true` if by this call, `false` if it already was (its first time kept).
    Paused(bool),
}

impl PauseOutcome {
    /// The outcome for a workflow of `status` (`None`: no such workflow); `added` when this
    /// call wrote the pause. Only `PENDING`, `ENQUEUED` and `DELAYED` workflows are paused.
    pub(crate) fn of(status: Option<String>, added: bool) -> PauseOutcome {
        match status {
            None => PauseOutcome::NotFound,
            Some(s) if matches!(s.as_str(), "PENDING" | "ENQUEUED" | "DELAYED") => {
                PauseOutcome::Paused(added)
            }
            Some(s) => PauseOutcome::Finished(s),
        }
    }
}

/// What unpausing a workflow found: whether it was paused, and its row's status and queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unpaused {
    pub was_paused: bool,
    pub status: String,
    pub queue: Option<String>,
}

#[async_trait]
pub(crate) trait Pauses: Send + Sync {
    /// Pauses `queue` from `now_ms` (epoch ms). True if it was running; an already paused
    /// queue keeps its first pause time.
    async fn pause_queue(&self, queue: &str, now_ms: i64) -> Result<bool, DbError>;

    /// Resumes `queue` and announces it. True if it was paused.
    async fn resume_queue(&self, queue: &str) -> Result<bool, DbError>;

    /// The paused queues with when each was paused (epoch ms), by name.
    async fn paused_queues(&self) -> Result<Vec<(String, i64)>, DbError>;

    /// Pauses workflow `id` from `now_ms` unless it has finished, and announces it (Postgres).
    async fn pause_workflow(&self, id: &str, now_ms: i64) -> Result<PauseOutcome, DbError>;

    /// Deletes `id`'s pause and, when its row waits on a queue, announces that queue. `None`
    /// when no such workflow exists.
    async fn unpause_workflow(&self, id: &str) -> Result<Option<Unpaused>, DbError>;

    /// Puts a stopped paused run's row back on its queue (the internal one when it had none):
    /// `ENQUEUED`, no owner, one recovery attempt less (the claim that runs it again counts
    /// one: a pause is not a recovery), announced. Only while it is `PENDING` under `owner`;
    /// returns the queue, `None` when the row moved on.
    async fn requeue_paused(&self, id: &str, owner: &str) -> Result<Option<String>, DbError>;
}

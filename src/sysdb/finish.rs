//! Workflow outcomes: the final status and the payload in `workflow_status`, applied only while
//! the workflow is `PENDING` under the writer's owner token; with them, the workflow's last step
//! when its record was held back for this write.
//!
//! **Where the outcome goes.** DBOS 3.4 upserts a `workflow_output` row; every reader of its
//! (`_sys_db.py`: results, status, listings, exports) and of stead's reads
//! `COALESCE(workflow_output.x, workflow_status.x)`. stead writes `output`/`error` in the status
//! row its finish updates anyway, so a finished workflow costs no payload row: one heap tuple and
//! two index entries (primary key, retention) fewer per workflow (W9, "Churn"). A payload row an
//! earlier run left (DBOS finished it, then it was resumed) is updated too, so it never shadows
//! the new outcome.
//!
//! **Terminal rows, as DBOS 3.4 writes them** (`_sys_db.py`). Success and error
//! (`update_workflow_outcome`) set `status`, clear `owner_xid` and `deduplication_id`, set
//! `completed_at` and `updated_at`, keep `queue_name` and `started_at_epoch_ms`, and apply only to
//! a `PENDING` row under the owner token. Cancel (`cancel_workflows`, also for a timeout,
//! `cancel_timed_out_workflows`) applies to every row not `SUCCESS`/`ERROR` (a cancelled one is
//! stamped again), clears `owner_xid`, `queue_name`, `deduplication_id` and `started_at_epoch_ms`
//! (so it leaves rate-limit windows), sets `completed_at` and `updated_at`. Dead-lettering
//! (`dead_letter_workflows`, stead's parked run) is the same as cancel with status
//! `MAX_RECOVERY_ATTEMPTS_EXCEEDED`. stead writes each of these columns the same way (each
//! backend's `finish.rs` and `cancel.rs`).

use super::steps::StepWrite;

/// The channel a child's end is announced on (Postgres), its payload the child's id: a parent
/// evicted while awaiting its result, in any process, is woken by it.
pub(crate) const CHILD_CHANNEL: &str = "stead_child_channel";

/// A workflow's final status and payload, valid only while it is `PENDING` under `owner`.
#[derive(Debug, Clone)]
pub(crate) struct FinishWrite {
    pub workflow_id: String,
    pub owner: String,
    /// `SUCCESS`, `ERROR` or `MAX_RECOVERY_ATTEMPTS_EXCEEDED`.
    pub status: &'static str,
    pub output: Option<String>,
    pub error: Option<String>,
    /// The workflow's last step, held back to be recorded in the same commit: the outcome is
    /// written only if this record is.
    pub step: Option<StepWrite>,
}

/// What finishing a workflow found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FinishOutcome {
    /// Our outcome is committed (now, or by an earlier attempt of this same write).
    Finished,
    /// The workflow was cancelled meanwhile.
    Cancelled,
    /// Another execution owns the workflow now.
    NotOwner,
    /// The step carried with it was already recorded (by another attempt of this run): nothing
    /// was written; the run restarts and replays the recorded step.
    StepConflict,
}

impl FinishWrite {
    /// Whether the outcome has a payload row (a workflow parked for too many attempts has none).
    pub(crate) fn has_output(&self) -> bool {
        self.status != "MAX_RECOVERY_ATTEMPTS_EXCEEDED"
    }
}

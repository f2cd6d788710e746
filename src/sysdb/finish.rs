//! Workflow outcomes: the final status in `workflow_status` and the payload in
//! `workflow_output`, applied only while the workflow is `PENDING` under the writer's owner token;
//! with them, the workflow's last step when its record was held back for this write.

use super::steps::StepWrite;

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

//! Step checkpoints: the rows of `operation_outputs` a workflow's durable calls leave, written
//! only while the workflow is `PENDING` under the writer's owner token; and the request for a
//! workflow's recorded steps.
//!
//! **Ownership in the write.** Every checkpoint, op and finish carries the execution's owner token
//! (`owner_xid`) and is applied only while the row is `PENDING` under it. Rows not written are
//! classified in a second statement: already recorded while the row is still `PENDING` under the
//! writer's token (its own earlier attempt: the recorded value wins); `CANCELLED`; otherwise taken
//! over, even when the step is recorded: a stale run must never take the adopter's record as its
//! own and go on to its next step. The fresh path stays one statement. The token alone keeps a
//! workflow's work single: with the fleet's fence and lease gate disabled, a process cut off its
//! database for 20 s while a survivor adopts its work still finishes every workflow once.

/// One step's outcome to record, valid only while the workflow is `PENDING` under `owner`.
#[derive(Debug, Clone)]
pub(crate) struct StepWrite {
    pub workflow_id: String,
    pub owner: String,
    pub function_id: u32,
    pub name: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub started_at: i64,
    pub completed_at: i64,
    pub app_name: Option<String>,
}

/// What recording a step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StepOutcome {
    /// Our row is committed.
    Recorded,
    /// A row for this step already existed (our earlier attempt, or a competing execution):
    /// its values are authoritative.
    AlreadyRecorded {
        output: Option<String>,
        error: Option<String>,
    },
    /// The workflow was cancelled; nothing was written.
    Cancelled,
    /// The workflow is no longer `PENDING` under this owner; nothing was written.
    NotOwner,
}

/// A request for one workflow's recorded steps.
#[derive(Debug, Clone)]
pub(crate) struct LoadSteps(pub String);

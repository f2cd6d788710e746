//! Workflow outcomes: the final status in `workflow_status` and the payload in
//! `workflow_output`, applied only while the workflow is `PENDING` under the writer's owner token.

/// A workflow's final status and payload, valid only while it is `PENDING` under `owner`.
#[derive(Debug, Clone)]
pub(crate) struct FinishWrite {
    pub workflow_id: String,
    pub owner: String,
    /// `SUCCESS`, `ERROR` or `MAX_RECOVERY_ATTEMPTS_EXCEEDED`.
    pub status: &'static str,
    pub output: Option<String>,
    pub error: Option<String>,
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
}

impl FinishWrite {
    /// Whether the outcome has a payload row (a workflow parked for too many attempts has none).
    pub(crate) fn has_output(&self) -> bool {
        self.status != "MAX_RECOVERY_ATTEMPTS_EXCEEDED"
    }
}

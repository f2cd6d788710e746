//! Step checkpoints: the rows of `operation_outputs` a workflow's durable calls leave, written
//! only while the workflow is `PENDING` under the writer's owner token; and the paged read of a
//! workflow's recorded steps (replay reads a page at a time, never a whole history).
//!
//! **Ownership in the write.** Every checkpoint, op and finish carries the execution's owner token
//! (`owner_xid`) and is applied only while the row is `PENDING` under it. Rows not written are
//! classified in a second statement: already recorded while the row is still `PENDING` under the
//! writer's token (its own earlier attempt: the recorded value wins); `CANCELLED`; otherwise taken
//! over, even when the step is recorded: a stale run must never take the adopter's record as its
//! own and go on to its next step. The fresh path stays one statement. The token alone keeps a
//! workflow's work single: with the fleet's fence and lease gate disabled, a process cut off its
//! database for 20 s while a survivor adopts its work still finishes every workflow once.

use super::reads::StepRow;

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

/// A request for one page of a workflow's recorded steps: those numbered after `after`, in call
/// order, at most `rows` of them. Outputs and errors are read for a prefix of the page (the first
/// row always has its own), so a page of large outputs holds one of them; the rest comes without
/// payloads (names and child ids only), so the caller still knows which numbers are recorded and
/// under what name. With `sized`, the prefix runs while the payload bytes of the rows before stay
/// under `bytes`; without, while each row's payload is at most `bytes / rows`, which a backend may
/// read more cheaply (Postgres: no running sum) and which keeps the page within `bytes` too. A
/// reader asks `sized` after a page cut short by size, so outputs of middling size still come
/// many to a page.
#[derive(Debug, Clone)]
pub(crate) struct LoadSteps {
    pub workflow_id: String,
    pub after: u32,
    pub rows: u32,
    pub bytes: u64,
    pub sized: bool,
}

impl LoadSteps {
    /// The largest payload a row may carry in an unsized page.
    pub(crate) fn per_row(&self) -> u64 {
        self.bytes / u64::from(self.rows.max(1))
    }
}

/// One page of recorded steps ([`LoadSteps`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StepPage {
    /// The rows, in call order; the first `loaded` carry their outputs and errors, the others
    /// none (not read).
    pub rows: Vec<StepRow>,
    pub loaded: usize,
    /// The page is full: rows may follow its last one. False means none do.
    pub more: bool,
}

impl StepPage {
    /// The page `request` read: rows with whether their payloads were read (a prefix).
    pub(crate) fn new(request: &LoadSteps, rows: Vec<(StepRow, bool)>) -> StepPage {
        let loaded = rows.iter().take_while(|(_, loaded)| *loaded).count();
        let more = rows.len() >= request.rows as usize;
        // Past the prefix a small row may have come with its payloads: they are not the page's.
        let bare = |(i, (row, _)): (usize, (StepRow, bool))| match i < loaded {
            true => row,
            false => StepRow {
                output: None,
                error: None,
                ..row
            },
        };
        StepPage {
            rows: rows.into_iter().enumerate().map(bare).collect(),
            loaded,
            more,
        }
    }
}

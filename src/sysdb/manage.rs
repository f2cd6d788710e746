//! Management: listing workflows and their steps, resuming, forking, deleting, and changing a
//! delay. Used by the client and the CLI; none of it runs workflow code. Wake-ups are the
//! caller's on SQLite (Postgres also announces requeued work).
//!
//! **Steps in pages.** A step listing ([`StepQuery`]) is keyset-paged on the primary key
//! `(workflow_uuid, function_id)`: a page starts above a function id, so page 1,000 costs what
//! page 1 does. Without outputs the statement names neither `output` nor `error`, only their
//! `octet_length`, which neither backend computes by reading the value (Postgres reads a TOASTed
//! value's size from its pointer; SQLite's `octet_length` skips overflow pages): a 10 MB output
//! costs the listing nothing.
//!
//! **Resume is a takeover.** One statement sets the row `ENQUEUED` on the internal queue with no
//! owner (unless it finished: then nothing changes, as DBOS), and announces `stead_cancel_channel`
//! `["<id>", "<old owner>"]`: the process running the old execution stops that run only. Whoever
//! claims the row runs it under a new owner token; the old run's writes are refused by the token
//! even if the announcement is lost. A queue actor that claims an id it still runs locally under
//! another owner kills the old run and starts the new one. A step body in flight during a resume
//! may run again (as after a crash); finished steps never do.
//!
//! **Fork** copies the status row (new id, `forked_from`, `ENQUEUED` on the internal queue or a
//! given queue, optionally a new version), the input, and every recorded call, event history and
//! stream value below the fork step, in one statement; the copy replays those and runs the rest.
//! `Context::fork_workflow` is a durable call (`stead.fork`) whose copy id is `<wf>-<call>`. Fork
//! steps count from 1 everywhere.

use async_trait::async_trait;

use crate::base::status::WorkflowStatus;
use crate::error::DbError;

/// The filters of a workflow listing; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    pub ids: Option<Vec<String>>,
    pub statuses: Option<Vec<String>>,
    pub name: Option<String>,
    pub queue: Option<String>,
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    pub created_from: Option<i64>,
    pub created_until: Option<i64>,
    pub parent: Option<String>,
    pub forked_from: Option<String>,
    pub executor: Option<String>,
    pub queued_only: bool,
    pub payloads: bool,
    pub newest_first: bool,
    pub limit: Option<i64>,
    pub offset: i64,
    /// A JSON object: only workflows whose attributes contain each of its top-level pairs.
    pub attributes: Option<String>,
}

/// A listed workflow: its status record and, when asked, its payloads as stored.
#[derive(Debug, Clone)]
pub(crate) struct ListedRow {
    pub status: WorkflowStatus,
    pub inputs: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub serialization: Option<String>,
}

/// How many listed workflows have one stored status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusCount {
    pub status: String,
    pub count: i64,
}

/// Which recorded calls of a workflow a step listing returns, in function id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepQuery {
    /// Whether to load outputs and errors (their sizes come either way).
    pub outputs: bool,
    /// Only calls with a function id above this (`i32::MIN`: from the first).
    pub after: i32,
    /// At most this many calls; `None`: all.
    pub limit: Option<i64>,
}

impl StepQuery {
    /// Every call, with its output.
    pub(crate) const ALL: StepQuery = StepQuery {
        outputs: true,
        after: i32::MIN,
        limit: None,
    };
}

/// One recorded durable call, for display.
#[derive(Debug, Clone)]
pub(crate) struct StepListing {
    pub function_id: i32,
    pub name: String,
    /// `None` also when the listing left outputs out.
    pub output: Option<String>,
    /// `None` also when the listing left outputs out.
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub serialization: Option<String>,
    /// The stored output's size in bytes; `None` when it has none.
    pub output_bytes: Option<i64>,
    /// The stored error's size in bytes; `None` when it has none.
    pub error_bytes: Option<i64>,
}

/// What a resume found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resumed {
    pub exists: bool,
    /// False when the workflow had already finished (a no-op, as in DBOS).
    pub requeued: bool,
    /// The owner token of the execution that was running it, which must stop.
    pub previous_owner: Option<String>,
}

/// A fork to make: a copy of `id` as `new_id`.
#[derive(Debug, Clone)]
pub(crate) struct Fork {
    pub id: String,
    pub new_id: String,
    /// The queue the copy is enqueued on.
    pub queue: String,
    /// The copy's application version; the original's when `None`.
    pub app_version: Option<String>,
    /// The copy gets the original's recorded calls (and their events and stream values) below
    /// this function id, and replays them.
    pub from_step: i32,
}

/// What a fork found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Forked {
    /// Whether the original exists.
    pub exists: bool,
    /// Whether the copy was made now (not when its id exists already, as on a replay).
    pub made: bool,
}

/// How [`Manage::update_attributes`] changes a workflow's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttributesUpdate {
    /// Replaces them with this JSON object, or clears them (`None`).
    Replace(Option<String>),
    /// Sets each top-level key of this JSON object, keeping the others (a value that is not
    /// an object counts as empty), as DBOS's `update_workflow_attributes(merge=True)`.
    Merge(String),
}

/// A workflow's status and queue, as a change of delay found it.
#[derive(Debug, Clone)]
pub(crate) struct Delayed {
    pub status: Option<String>,
    pub queue: Option<String>,
}

#[async_trait]
pub(crate) trait Manage: Send + Sync {
    /// Workflows matching `q`, in creation order (newest first when asked).
    async fn list_workflows(&self, q: &ListQuery) -> Result<Vec<ListedRow>, DbError>;

    /// How many workflows match `q` (its paging and payload fields ignored), per stored
    /// status; statuses with none are absent.
    async fn count_workflows(&self, q: &ListQuery) -> Result<Vec<StatusCount>, DbError>;

    /// The recorded calls of workflow `id` that `q` selects, in order.
    async fn list_steps(&self, id: &str, q: &StepQuery) -> Result<Vec<StepListing>, DbError>;

    /// Puts workflow `id` back on `queue` from its last checkpoint, whatever its state unless
    /// it finished (`SUCCESS`, `ERROR`): no owner, no deadline, no deduplication id, attempts
    /// reset. Reports the owner it took it from, whose execution must stop.
    async fn resume(&self, id: &str, queue: &str) -> Result<Resumed, DbError>;

    /// Copies a workflow as `ENQUEUED` with its history below the fork step (see [`Fork`]),
    /// and marks the original as forked.
    async fn fork(&self, f: &Fork) -> Result<Forked, DbError>;

    /// Deletes `id` (and its descendants when `cascade`) with every row that belongs to it;
    /// returns the ids deleted.
    async fn delete_workflow(&self, id: &str, cascade: bool) -> Result<Vec<String>, DbError>;

    /// Changes the attributes of workflow `id`; false when there is no such workflow.
    async fn update_attributes(&self, id: &str, update: &AttributesUpdate)
        -> Result<bool, DbError>;

    /// Moves a `DELAYED` workflow's due time to `until`; returns its status and queue (`None`:
    /// no such workflow). A workflow in another state is left alone.
    async fn set_delay(&self, id: &str, until: i64) -> Result<Option<Delayed>, DbError>;
}

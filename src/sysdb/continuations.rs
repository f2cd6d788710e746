//! Continue-as-new in the system database: one run ends and the next run of the same workflow
//! is created, in one transaction, and the link between them is kept.
//!
//! **How the chain is stored.** The continued run ends as DBOS ends any successful run
//! (`SUCCESS`, owner and deduplication id cleared, `completed_at`), its output the marker
//! `{"stead.continuedAs":"<next id>"}` (`base::continuation`). The next run is an ordinary row
//! of the same name, class, config, application name and version, priority, partition key,
//! timeout, parent and attributes, with the new input in `inputs`: `ENQUEUED` on the old run's
//! queue, or, when the old run had none (a direct start; the internal queue of a recovered
//! one), `PENDING` under this executor and a fresh owner token, to run here next (a crash right
//! after the commit leaves it to this executor's recovery, like any direct start). The link is
//! stead's own table `stead_continuations(from_id, to_id, root_id, generation)`, its rows
//! deleted with either workflow (foreign keys, `ON DELETE CASCADE`): DBOS never reads it, so a
//! DBOS client sees a finished workflow and a new one. The next id is `<root>-can-<n>`, the
//! chain's first id and the run's place in it, read from the link that made the old run: the
//! same on every attempt, and a retried commit whose reply was lost is recognised by its link.
//! Only a `PENDING` row under the writer's owner continues, so one run continues at most once.

use async_trait::async_trait;

use crate::error::DbError;

/// A run to continue as a new one.
#[derive(Debug, Clone)]
pub(crate) struct ContinueWrite {
    pub workflow_id: String,
    /// The owner token the old run is `PENDING` under.
    pub owner: String,
    /// The next run's inputs, in the `{"positionalArgs":[..],"namedArgs":{}}` envelope.
    pub inputs: String,
    /// The next run's owner token, when it runs here at once (the old run had no queue).
    pub next_owner: String,
    pub executor_id: String,
    /// The next run's `created_at` (its place in its queue).
    pub created_at: i64,
    pub now: i64,
}

/// The next run, as created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continued {
    pub next_id: String,
    /// The queue it waits on; `None` when it is `PENDING` here under `next_owner`.
    pub queue: Option<String>,
    /// When its time runs out (a direct run with a timeout).
    pub deadline: Option<i64>,
    /// The next run's `dbos.otelContext`-carrying attributes, as stored.
    pub attributes: Option<String>,
}

/// What continuing found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ContinueOutcome {
    /// The old run is finished and the next one exists (now, or by an earlier attempt).
    Continued(Continued),
    /// The workflow was cancelled meanwhile; nothing was written.
    Cancelled,
    /// Another execution owns the workflow now; nothing was written.
    NotOwner,
    /// The next run's id belongs to another workflow already; nothing was written.
    Exists(String),
}

#[async_trait]
pub(crate) trait Continuations: Send + Sync {
    /// Ends `w.workflow_id` with the continuation marker and creates its next run, with the
    /// link, in one transaction; nothing at all when it cannot (see [`ContinueOutcome`]).
    async fn continue_as_new(&self, w: &ContinueWrite) -> Result<ContinueOutcome, DbError>;
}

impl ContinueOutcome {
    /// Why nothing was written when the old run was not `PENDING` under the writer's owner: by
    /// the row's `status` now.
    pub(crate) fn refused(status: Option<&str>) -> ContinueOutcome {
        match status {
            Some("CANCELLED") => ContinueOutcome::Cancelled,
            _ => ContinueOutcome::NotOwner,
        }
    }
}

/// The next run's chain root and generation: after the link that made the old run (its root
/// and generation), or the first continuation of `id`.
pub(crate) fn place_in_chain(id: &str, previous: Option<(String, i64)>) -> (String, i64) {
    match previous {
        Some((root, generation)) => (root, generation + 1),
        None => (id.to_owned(), 1),
    }
}

/// Whether a run taken from `queue` continues here at once (no queue, or the internal one).
pub(crate) fn runs_here(queue: Option<&str>) -> bool {
    queue.is_none_or(|q| q == crate::base::queue::INTERNAL_QUEUE)
}

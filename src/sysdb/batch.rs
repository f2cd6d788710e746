//! Batch operations by filter: one bounded page of the workflows a listing filter matches is
//! cancelled, resumed, deleted or moved onto an application version, in one transaction, or
//! only looked at (a dry run). The caller (`client::batch`) walks the pages.
//!
//! **Pages never rescan.** A page is the first `size` matches above a keyset cursor on
//! `(created_at, workflow_uuid)`, in that order: the filter and the cursor decide it, not what
//! earlier pages changed, so page 1,000 costs what page 1 does and a workflow an earlier page
//! moved out of the filter is never met again. The page's rows are locked (`FOR UPDATE` on
//! Postgres; SQLite's one writer) while it is changed.
//!
//! **Each operation is idempotent**, so a batch run again after an interruption finishes the job
//! and repeats nothing that matters. Each applies only to the rows its rule names and skips (and
//! counts) the rest:
//!
//! - cancel: every workflow that has not finished and is not already cancelled (`SUCCESS`,
//!   `ERROR`, `CANCELLED` are skipped); the row as a single cancel writes it, announced on
//!   Postgres. The single cancel marks a cancelled row again; a batch leaves it alone.
//! - resume: only `CANCELLED` and `MAX_RECOVERY_ATTEMPTS_EXCEEDED` workflows, put back on the
//!   internal queue as a single resume does. A single resume also takes over `PENDING`,
//!   `ENQUEUED` and `DELAYED` work; a batch does not, since a batch run again would take over
//!   the executions its first run started.
//! - delete: every match, as a single delete (whatever its status; a run stops at its next
//!   write; children that do not match stay).
//! - move to version `v`: `ENQUEUED`, `DELAYED`, `CANCELLED` and `MAX_RECOVERY_ATTEMPTS_EXCEEDED`
//!   workflows not already on `v` get `application_version = v` and keep everything else:
//!   waiting work is claimed by `v`'s executors, parked work runs on `v` once resumed. Running
//!   (`PENDING`) and finished work is skipped; a dead executor's `PENDING` work moves with
//!   `move_stranded` (`sysdb::fleet`).

use async_trait::async_trait;

use crate::error::DbError;
use crate::sysdb::ListQuery;

/// What a batch does to each workflow its rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BatchAction {
    Cancel,
    /// Back on this queue (the internal one).
    Resume(String),
    Delete,
    /// Onto this application version.
    Move(String),
}

impl BatchAction {
    /// The queue a resume enqueues on, or the version a move sets: the statement's text
    /// parameter.
    pub(crate) fn argument(&self) -> Option<&str> {
        match self {
            BatchAction::Resume(text) | BatchAction::Move(text) => Some(text),
            BatchAction::Cancel | BatchAction::Delete => None,
        }
    }
}

/// One page of a batch to apply (or, when `dry_run`, only to read).
#[derive(Debug, Clone)]
pub(crate) struct BatchPage {
    /// The filters; its paging fields are ignored (`size` and `after` page).
    pub filter: ListQuery,
    pub action: BatchAction,
    /// The last `(created_at, workflow_uuid)` of the previous page; `None` for the first.
    pub after: Option<(i64, String)>,
    pub size: i64,
    pub dry_run: bool,
}

/// One matched workflow of a page, in page order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchRow {
    pub created_at: i64,
    pub id: String,
    /// Whether the action changed it (on a dry run: whether it would).
    pub changed: bool,
    /// A queue that has new work because of the change (a resume's, a moved `ENQUEUED` row's).
    pub queue: Option<String>,
    /// The owner token a resume took the row from, whose execution must stop.
    pub owner: Option<String>,
}

#[async_trait]
pub(crate) trait Batches: Send + Sync {
    /// Applies `page.action` to the first `page.size` workflows matching `page.filter` after
    /// `page.after`, in one transaction (nothing when `page.dry_run`); returns every match of
    /// the page, each saying whether it changed. Fewer than `size` rows: the last page.
    async fn batch_page(&self, page: &BatchPage) -> Result<Vec<BatchRow>, DbError>;
}

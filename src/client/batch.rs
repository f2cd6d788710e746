//! Batch operations by filter on a [`Client`]: cancel, resume, delete, or move onto an
//! application version every workflow a [`ListWorkflows`] filter matches, a bounded page at a
//! time, with progress after each page, or a dry run that only counts. The CLI (`stead workflow
//! cancel|resume|delete|move --where ...`) and the admin API (`POST /api/batch`) run these.
//!
//! **Pages and re-runs.** Each page is one store call, one transaction (`sysdb::batch`: keyset on
//! `(created_at, workflow_uuid)`, so no page rescans, and the rules of each action). Every action
//! is idempotent, so a batch interrupted anywhere (a killed process, [`Batch::max_pages`]) is
//! finished by running it again: what the first run changed is skipped, and counted so. A run's
//! counts are its own; the end state is the same.
//!
//! **Safety.** A filter that filters nothing is refused unless the batch says [`Batch::all`]
//! (`--all`, `"all": true`), so an empty filter never changes every workflow by accident.
//!
//! After each page it does what the single operation does in this process: stops the runs it
//! cancelled, deleted or took over, and wakes the queues that have new work (Postgres also
//! announces both to other processes). It runs no workflow code and builds no SQL.

use serde::Serialize;

use super::manage::{check_filter, ListWorkflows};
use super::Client;
use crate::base::queue::INTERNAL_QUEUE;
use crate::engine::start;
use crate::error::{Error, Result};
use crate::sysdb::{BatchAction, BatchPage};

/// The most workflows one page of a batch may hold.
pub const MAX_BATCH_PAGE: u32 = 1000;
/// A batch's page size unless it says otherwise.
pub const DEFAULT_BATCH_PAGE: u32 = 100;

/// A batch operation: what to do to the workflows a filter matches, and how.
///
/// ```no_run
/// # async fn demo(client: stead::Client) -> stead::Result<()> {
/// use stead::client::{Batch, ListWorkflows};
/// let filter = ListWorkflows::new()
///     .with_where("status=ENQUEUED")?
///     .with_where("name=checkout")?;
/// let counted = client.run_batch(Batch::cancel(filter.clone()).dry_run(), |_| {}).await?;
/// println!("would cancel {} of {}", counted.changed, counted.matched);
/// let done = client
///     .run_batch(Batch::cancel(filter), |p| println!("{} so far", p.changed))
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Batch {
    action: BatchAction,
    filter: ListWorkflows,
    page_size: u32,
    dry_run: bool,
    all: bool,
    max_pages: Option<u64>,
}

impl Batch {
    fn new(action: BatchAction, filter: ListWorkflows) -> Batch {
        Batch {
            action,
            filter,
            page_size: DEFAULT_BATCH_PAGE,
            dry_run: false,
            all: false,
            max_pages: None,
        }
    }

    /// Cancels every match that has not finished and is not cancelled already, as
    /// [`Client::cancel`] does (a running one stops before its next durable call, wherever it
    /// runs).
    pub fn cancel(filter: ListWorkflows) -> Batch {
        Batch::new(BatchAction::Cancel, filter)
    }

    /// Resumes every `CANCELLED` or `MAX_RECOVERY_ATTEMPTS_EXCEEDED` match, as
    /// [`Client::resume`] does. Unlike a single resume it skips `PENDING`, `ENQUEUED` and
    /// `DELAYED` work, so running the batch again never takes over what its first run resumed.
    pub fn resume(filter: ListWorkflows) -> Batch {
        Batch::new(BatchAction::Resume(INTERNAL_QUEUE.to_owned()), filter)
    }

    /// Deletes every match, as [`Client::delete`] does (whatever its status; children that do
    /// not match stay).
    pub fn delete(filter: ListWorkflows) -> Batch {
        Batch::new(BatchAction::Delete, filter)
    }

    /// Moves every `ENQUEUED`, `DELAYED`, `CANCELLED` or `MAX_RECOVERY_ATTEMPTS_EXCEEDED` match
    /// onto application version `version`: waiting work is claimed by that version's executors,
    /// parked work runs there once resumed. Running and finished work is skipped (a dead
    /// executor's: [`Client::move_stranded`]).
    pub fn move_to(filter: ListWorkflows, version: impl Into<String>) -> Batch {
        Batch::new(BatchAction::Move(version.into()), filter)
    }

    /// Workflows per page, each page one transaction (default 100, at most
    /// [`MAX_BATCH_PAGE`]).
    pub fn page_size(mut self, n: u32) -> Batch {
        self.page_size = n;
        self
    }

    /// Changes nothing: counts the matches, and how many the action would change.
    pub fn dry_run(mut self) -> Batch {
        self.dry_run = true;
        self
    }

    /// Allows a filter that filters nothing (every workflow). Without it, such a batch is
    /// refused.
    pub fn all(mut self) -> Batch {
        self.all = true;
        self
    }

    /// Stops after `n` pages (the progress says whether it was done); running the batch again
    /// goes on where it left off, in effect.
    pub fn max_pages(mut self, n: u64) -> Batch {
        self.max_pages = Some(n);
        self
    }

    /// The action's name: `cancel`, `resume`, `delete` or `move`.
    pub fn action(&self) -> &'static str {
        match self.action {
            BatchAction::Cancel => "cancel",
            BatchAction::Resume(_) => "resume",
            BatchAction::Delete => "delete",
            BatchAction::Move(_) => "move",
        }
    }

    /// Refuses what no batch should run: paging in the filter, a bad page size or version, or
    /// an empty filter without [`Batch::all`].
    fn check(&self) -> Result<()> {
        let q = &self.filter.query;
        check_filter(q)?;
        if q.limit.is_some() || q.offset != 0 || q.newest_first {
            return Err(Error::InvalidArgument(
                "a batch pages by itself: its filter takes no limit, offset or order".into(),
            ));
        }
        if !(1..=MAX_BATCH_PAGE).contains(&self.page_size) {
            return Err(Error::InvalidArgument(format!(
                "a batch's page size is from 1 to {MAX_BATCH_PAGE}, not {}",
                self.page_size
            )));
        }
        if let BatchAction::Move(version) = &self.action {
            crate::names::validate_name(version, "application version")?;
        }
        if !self.all && !self.filter.filters_anything() {
            return Err(Error::InvalidArgument(format!(
                "a {} batch without a filter would {} every workflow: give a filter, or say \
                 all (--all) to mean it",
                self.action(),
                self.action()
            )));
        }
        Ok(())
    }
}

/// How far a batch has come: after each page, and at the end. On a dry run, `changed` counts
/// what the action would change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct BatchProgress {
    /// Pages done.
    pub pages: u64,
    /// Workflows matched so far.
    pub matched: u64,
    /// Of those, changed (or, on a dry run, that would be).
    pub changed: u64,
    /// Of those, left alone: the action does not apply to them (finished, already done, or
    /// outside its rule).
    pub skipped: u64,
    /// Whether every match was seen (false when [`Batch::max_pages`] stopped it first).
    pub done: bool,
    pub dry_run: bool,
}

impl Client {
    /// Runs `batch` a page at a time, calling `on_page` after each, and returns the totals.
    /// A failure stops it after the pages already done (they stay done; run it again to
    /// finish). Filters are [`ListWorkflows`]'s (see [`ListWorkflows::with_where`]).
    pub async fn run_batch(
        &self,
        batch: Batch,
        mut on_page: impl FnMut(&BatchProgress) + Send,
    ) -> Result<BatchProgress> {
        batch.check()?;
        let shared = self.shared();
        if matches!(batch.action, BatchAction::Cancel | BatchAction::Resume(_)) {
            start::check_running(shared)?;
        }
        let mut progress = BatchProgress {
            dry_run: batch.dry_run,
            ..BatchProgress::default()
        };
        let mut page = BatchPage {
            filter: batch.filter.query.clone(),
            action: batch.action.clone(),
            after: None,
            size: i64::from(batch.page_size),
            dry_run: batch.dry_run,
        };
        loop {
            let rows = shared
                .db
                .call_with(page.clone(), |db, page| async move {
                    db.batch_page(&page).await
                })
                .await?;
            let changed: Vec<_> = rows.iter().filter(|r| r.changed).collect();
            if !batch.dry_run {
                let mut woken: Vec<&str> = Vec::new();
                for row in &changed {
                    match page.action {
                        BatchAction::Cancel | BatchAction::Delete => {
                            shared.cancel_local(&row.id, None)
                        }
                        BatchAction::Resume(_) if row.owner.is_some() => {
                            shared.cancel_local(&row.id, row.owner.as_deref())
                        }
                        _ => {}
                    }
                    if let Some(queue) = row.queue.as_deref().filter(|q| !woken.contains(q)) {
                        woken.push(queue);
                    }
                }
                for queue in woken {
                    start::wake(shared, queue);
                }
            }
            progress.pages += 1;
            progress.matched += rows.len() as u64;
            progress.changed += changed.len() as u64;
            progress.skipped = progress.matched - progress.changed;
            progress.done = rows.len() < batch.page_size as usize;
            page.after = rows.last().map(|r| (r.created_at, r.id.clone()));
            on_page(&progress);
            if progress.done || batch.max_pages.is_some_and(|n| progress.pages >= n) {
                return Ok(progress);
            }
        }
    }
}

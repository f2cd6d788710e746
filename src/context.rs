//! The workflow `Context`: numbers durable calls, replays recorded ones, records new ones, and
//! remembers why a run must stop (cancelled, taken over, or the database gave up).
//!
//! It must never run user code itself (steps do), and never decide the workflow's outcome: the
//! workflow actor reads the abort reason after the body returns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::db::Db;
use crate::error::{Error, Result};
use crate::step::{RetryPolicy, Step};
use crate::sysdb::{StepOutcome, StepRow, StepWrite};

/// Why a run stopped without an outcome of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Abort {
    /// The workflow was cancelled; leave it as it is.
    Cancelled,
    /// Another execution owns it now; leave it to that one.
    NotOwner,
    /// The system database failed past its retries: crash, so the run is restarted.
    Crash(String),
}

/// The handle a workflow body uses for every durable call.
///
/// Cloning is cheap; clones share the same call numbering.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    workflow_id: String,
    workflow_name: String,
    owner: String,
    app_name: Option<String>,
    db: Db,
    next_function_id: AtomicU32,
    recorded: HashMap<u32, StepRow>,
    abort: Mutex<Option<Abort>>,
}

/// What the workflow actor knows about the run it starts.
pub(crate) struct RunInfo {
    pub workflow_id: String,
    pub workflow_name: String,
    pub owner: String,
    pub app_name: Option<String>,
}

impl Context {
    pub(crate) fn new(run: RunInfo, db: Db, recorded: Vec<StepRow>) -> Context {
        Context {
            inner: Arc::new(Inner {
                workflow_id: run.workflow_id,
                workflow_name: run.workflow_name,
                owner: run.owner,
                app_name: run.app_name,
                db,
                next_function_id: AtomicU32::new(1),
                recorded: recorded.into_iter().map(|s| (s.function_id, s)).collect(),
                abort: Mutex::new(None),
            }),
        }
    }

    /// This workflow's id.
    pub fn workflow_id(&self) -> &str {
        &self.inner.workflow_id
    }

    /// The name this workflow is registered under.
    pub fn workflow_name(&self) -> &str {
        &self.inner.workflow_name
    }

    /// A durable step: `f` runs at most once to success across crashes; a replay returns the
    /// recorded output (or error) without running it. Await it, optionally after `.retry(..)`.
    ///
    /// ```no_run
    /// # async fn charge(_: u32) -> Result<String, std::io::Error> { Ok("r-1".into()) }
    /// async fn checkout(ctx: stead::Context, order: u32) -> stead::Result<String> {
    ///     let receipt = ctx
    ///         .step("charge", || charge(order))
    ///         .retry(stead::RetryPolicy::attempts(3))
    ///         .await?;
    ///     Ok(receipt)
    /// }
    /// ```
    pub fn step<'c, F>(&'c self, name: &'c str, f: F) -> Step<'c, F> {
        Step::new(self, name, f, RetryPolicy::none())
    }

    /// Takes the next durable-call number (1-based, as DBOS numbers them).
    pub(crate) fn next_function_id(&self) -> u32 {
        self.inner.next_function_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The recorded call at `function_id`, checked against the name the code now uses.
    pub(crate) fn recorded(&self, function_id: u32, name: &str) -> Result<Option<&StepRow>> {
        match self.inner.recorded.get(&function_id) {
            Some(row) if row.name != name => Err(Error::NonDeterminism {
                workflow_id: self.inner.workflow_id.clone(),
                function_id,
                recorded: row.name.clone(),
                called: name.to_owned(),
            }),
            other => Ok(other),
        }
    }

    /// Fails fast once the run has been told to stop.
    pub(crate) fn check_live(&self) -> Result<()> {
        match self.abort() {
            None => Ok(()),
            Some(reason) => Err(self.abort_error(&reason)),
        }
    }

    /// Why the run must stop, if it must.
    pub(crate) fn abort(&self) -> Option<Abort> {
        self.inner.abort.lock().ok().and_then(|a| a.clone())
    }

    fn stop(&self, reason: Abort) -> Error {
        let err = self.abort_error(&reason);
        if let Ok(mut abort) = self.inner.abort.lock() {
            abort.get_or_insert(reason);
        }
        err
    }

    fn abort_error(&self, reason: &Abort) -> Error {
        let id = self.inner.workflow_id.clone();
        match reason {
            Abort::Cancelled => Error::Cancelled { id },
            Abort::NotOwner => Error::NotOwner { id },
            Abort::Crash(reason) => {
                Error::Database(crate::error::DbError::Transient(reason.clone()))
            }
        }
    }

    /// Records a new durable call's outcome; returns the authoritative row when a competing
    /// execution recorded this call first.
    pub(crate) async fn record(
        &self,
        function_id: u32,
        name: &str,
        output: Option<String>,
        error: Option<String>,
        started_at: i64,
    ) -> Result<Option<(Option<String>, Option<String>)>> {
        let write = StepWrite {
            workflow_id: self.inner.workflow_id.clone(),
            owner: self.inner.owner.clone(),
            function_id,
            name: name.to_owned(),
            output,
            error,
            child_workflow_id: None,
            started_at,
            completed_at: crate::sysdb::now_ms(),
            app_name: self.inner.app_name.clone(),
        };
        match self.inner.db.checkpoint(write).await {
            Ok(StepOutcome::Recorded) => Ok(None),
            Ok(StepOutcome::AlreadyRecorded { output, error }) => Ok(Some((output, error))),
            Ok(StepOutcome::Cancelled) => Err(self.stop(Abort::Cancelled)),
            Ok(StepOutcome::NotOwner) => Err(self.stop(Abort::NotOwner)),
            Err(e) => Err(self.stop(Abort::Crash(e.to_string()))),
        }
    }
}

//! `WorkflowHandle`: a reference to one workflow, wherever it runs, to read its status and
//! await its result (typed when it came from a typed [`Workflow`](crate::Workflow)).
//!
//! A workflow running in this process reports its outcome through its completion slot; any
//! other is polled in the database with a growing interval.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::base::codec;
use crate::base::continuation::continued_as;
use crate::base::status::{Status, WorkflowStatus};
use crate::base::workflow::{ReadAs, Untyped};
use crate::engine::completion::{Finished, Slot};
use crate::engine::shared::{RunState, SharedRef};
use crate::error::{DbError, Error, Result};
use crate::sysdb::StatusRow;

/// How often a handle waiting on its local slot checks (in memory) that the run is still held
/// here. A run stopped here without an outcome (cancelled, taken over) closes its slot at once;
/// a run held here is never polled in the database (ten thousand handles on evicted runs must
/// not poll it), one that left is.
const HELD_CHECK: Duration = Duration::from_secs(1);
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_secs(1);

/// A reference to a workflow. `O` is its output type when it was started through a typed
/// [`Workflow<I, O>`](crate::Workflow); [`Untyped`] when it was named by a string or found by id.
pub struct WorkflowHandle<O = Untyped> {
    id: String,
    shared: SharedRef,
    output: PhantomData<fn() -> O>,
}

impl<O> Clone for WorkflowHandle<O> {
    fn clone(&self) -> Self {
        WorkflowHandle {
            id: self.id.clone(),
            shared: self.shared.clone(),
            output: PhantomData,
        }
    }
}

impl<O> std::fmt::Debug for WorkflowHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowHandle")
            .field("id", &self.id)
            .finish()
    }
}

impl WorkflowHandle {
    pub(crate) fn new(id: String, shared: SharedRef) -> WorkflowHandle {
        WorkflowHandle {
            id,
            shared,
            output: PhantomData,
        }
    }

    /// The same handle, its result typed as `O` (the caller vouches for the type).
    pub(crate) fn typed<O>(self) -> WorkflowHandle<O> {
        WorkflowHandle {
            id: self.id,
            shared: self.shared,
            output: PhantomData,
        }
    }
}

impl<O> WorkflowHandle<O> {
    /// The workflow's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The workflow's current status record.
    pub async fn status(&self) -> Result<WorkflowStatus> {
        Ok(self.row().await?.status)
    }

    /// Waits for the workflow to finish and returns its output: an `O` for a typed handle (no
    /// annotation needed); for an [`Untyped`] one, whatever `T` the caller asks for
    /// (`result::<T>()`), decoded from the stored JSON.
    ///
    /// A workflow that returned an error gives [`Error::WorkflowFailed`]; one that was cancelled
    /// or parked gives [`Error::Cancelled`] or [`Error::MaxRecoveryAttemptsExceeded`].
    ///
    /// A workflow that [continued as new](crate::Context::continue_as_new) is followed along
    /// its chain: the result is the last run's.
    pub async fn result<T>(&self) -> Result<T>
    where
        T: DeserializeOwned,
        O: ReadAs<T>,
    {
        let mut run = self.clone();
        loop {
            let (done, serialization) = run.outcome().await?;
            if done.status == Status::Success {
                if let Some(next) = continued_as(done.output.as_deref()) {
                    run.id = next;
                    continue;
                }
            }
            return run.decode(&done, serialization);
        }
    }

    /// The id of the run a chain of continuations has reached: this workflow's own id, or the
    /// last run it [continued as](crate::Context::continue_as_new) so far. Reads the database.
    pub async fn latest_id(&self) -> Result<String> {
        let mut id = self.id.clone();
        loop {
            let run = WorkflowHandle::<O> {
                id: id.clone(),
                shared: self.shared.clone(),
                output: PhantomData,
            };
            let row = run.row().await?;
            match continued_as(row.output.as_deref()) {
                Some(next) if row.status.status == Status::Success => id = next,
                _ => return Ok(id),
            }
        }
    }

    /// Waits for this run's own outcome (not a continuation's); `Some(format)` when read from
    /// the database.
    async fn outcome(&self) -> Result<(Finished, Option<Option<String>>)> {
        let mut poll = POLL_FIRST;
        loop {
            if let Some(done) = self.wait_here().await {
                return Ok((Finished::clone(&done), None));
            }
            let row = self.row().await?;
            if row.status.status.is_final() {
                let done = Finished {
                    status: row.status.status,
                    output: row.output,
                    error: row.error,
                };
                return Ok((done, Some(row.serialization)));
            }
            tokio::time::sleep(poll).await;
            poll = (poll * 2).min(POLL_MAX);
        }
    }

    /// Waits on the in-process slot while this process holds the run; `None` once it does not
    /// (it never ran here, or left without an outcome here), to read the database instead.
    async fn wait_here(&self) -> Option<Arc<Finished>> {
        let mut slot = self.local_slot()?;
        loop {
            match tokio::time::timeout(HELD_CHECK, slot.wait_for(Option::is_some)).await {
                Ok(Ok(done)) => return done.clone(),
                Ok(Err(_)) => return None,
                Err(_) if self.held_here() => {}
                Err(_) => return None,
            }
        }
    }

    /// The completion slot of this workflow: its own while it runs here, or made again for a
    /// run evicted here (its unwatched slot was released).
    fn local_slot(&self) -> Option<Slot> {
        let completions = &self.shared.completions;
        completions
            .existing(&self.id)
            .or_else(|| self.held_here().then(|| completions.slot(&self.id)))
    }

    /// The run is held in this process: an actor runs it, or it is evicted here.
    fn held_here(&self) -> bool {
        self.shared.directory.running.contains_key(&self.id)
            || self.shared.signals.evicted.holds(&self.id)
    }

    async fn row(&self) -> Result<StatusRow> {
        crate::names::validate_name(&self.id, "workflow id")?;
        let id = self.id.clone();
        let found = self
            .shared
            .db
            .call_with(id, move |db, id| async move { db.status(&id).await })
            .await
            .map_err(|e| self.db_error(e))?;
        found.ok_or_else(|| Error::NotFound(self.id.clone()))
    }

    fn db_error(&self, e: DbError) -> Error {
        match &*self.shared.state.borrow() {
            RunState::Stopped | RunState::Stopping => Error::Shutdown,
            RunState::Fatal(reason) => Error::Fatal(reason.clone()),
            RunState::Running => Error::Database(e),
        }
    }

    /// `serialization` is `None` for an outcome reported in-process (always portable JSON).
    fn decode<T: DeserializeOwned>(
        &self,
        done: &Finished,
        serialization: Option<Option<String>>,
    ) -> Result<T> {
        let id = self.id.clone();
        let what = "the workflow's output";
        match (done.status, serialization) {
            (Status::Success, None) => codec::decode(done.output.as_deref(), what),
            (Status::Success, Some(format)) => {
                codec::read(format.as_deref(), done.output.as_deref(), what)
            }
            (Status::Error, format) => {
                let error = done.error.as_deref().unwrap_or("null");
                let error = match format {
                    None => codec::decode_error(error),
                    Some(format) => codec::read_error(format.as_deref(), error),
                };
                Err(Error::WorkflowFailed {
                    id,
                    error: Box::new(error),
                })
            }
            (Status::Cancelled, _) => Err(Error::Cancelled { id }),
            (Status::MaxRecoveryAttemptsExceeded, _) => {
                Err(Error::MaxRecoveryAttemptsExceeded { id })
            }
            (other, _) => Err(Error::Decode {
                what: "the workflow's outcome".into(),
                reason: format!("status {other} is not final"),
            }),
        }
    }
}

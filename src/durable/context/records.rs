//! A run's records: the write of each durable call's outcome, and the step records held back
//! until the next durable call, the body's next wait or the workflow's outcome (which writes
//! the last one in its own statement). Every write carries the run's owner token.

use futures::future::{BoxFuture, FutureExt, Shared};

use super::budget::row_bytes;
use super::{Abort, Context};
use crate::base::clock::now_ms;
use crate::error::{DbError, Error, Result};
use crate::sysdb::{Op, OpOutcome, OpStep, StepOutcome, StepWrite};

/// Records held back, and the writes of those let go (each in a task of its own, so a caller
/// that stops waiting loses none).
#[derive(Default)]
pub(super) struct Deferred {
    held: Vec<StepWrite>,
    writing: Vec<Shared<BoxFuture<'static, Result<()>>>>,
}

impl Context {
    /// Records a durable call's outcome; returns the authoritative row when a competing
    /// execution recorded this call first.
    pub(crate) async fn record(
        &self,
        call: Call<'_>,
    ) -> Result<Option<(Option<String>, Option<String>)>> {
        self.refuse_in_replay()?;
        let _busy = self.fresh().await?;
        let write = self.write_of(call);
        let bytes = row_bytes(write.output.as_deref(), write.error.as_deref());
        match self.inner.shared.db.checkpoint(write).await {
            Ok(StepOutcome::Recorded) => {
                self.count_call(bytes);
                Ok(None)
            }
            Ok(StepOutcome::AlreadyRecorded { output, error, .. }) => {
                self.count_call(row_bytes(output.as_deref(), error.as_deref()));
                Ok(Some((output, error)))
            }
            Ok(StepOutcome::Cancelled) => Err(self.stop(Abort::Cancelled)),
            Ok(StepOutcome::NotOwner) => Err(self.stop(Abort::NotOwner)),
            Err(e) => Err(self.db_failure(e)),
        }
    }

    /// Holds a step's record back: the next durable call writes it before anything of its own
    /// happens, or the workflow's outcome writes it in the same statement. A crash before that
    /// write runs the step again, as a crash before any checkpoint does.
    pub(crate) fn defer(&self, call: Call<'_>) -> Result<()> {
        self.refuse_in_replay()?;
        let write = self.write_of(call);
        self.count_call(row_bytes(write.output.as_deref(), write.error.as_deref()));
        self.deferred().held.push(write);
        Ok(())
    }

    /// Writes the records held back, so nothing a later durable call does happens before an
    /// earlier step is recorded. Durable calls reach it through [`Context::begin`]; the
    /// workflow actor calls it after a panic, so the steps that finished are not run again.
    pub(crate) async fn settle(&self) -> Result<()> {
        self.write_held_now();
        let writing = self.deferred().writing.clone();
        if writing.is_empty() {
            return Ok(());
        }
        for done in writing {
            match done.await {
                Ok(()) => {}
                Err(Error::Database(e)) if e.is_transient() => {
                    return Err(self.stop(Abort::Crash(e.to_string())))
                }
                Err(e) => return Err(e),
            }
        }
        self.deferred().writing.retain(|w| w.peek().is_none());
        Ok(())
    }

    /// Starts writing the records held back, without waiting for them (the body waits on
    /// something else, and a step's record must not wait with it).
    pub(crate) fn write_held_now(&self) {
        let held = std::mem::take(&mut self.deferred().held);
        if held.is_empty() {
            return;
        }
        let ctx = self.clone();
        let task = tokio::spawn(async move { ctx.write_held(held).await });
        let done: BoxFuture<'static, Result<()>> = Box::pin(async move {
            // A write whose task is gone vouches for nothing: restart from the checkpoints.
            task.await
                .unwrap_or_else(|e| Err(Error::Database(DbError::Transient(e.to_string()))))
        });
        self.deferred().writing.push(done.shared());
    }

    /// A record another execution of this run wrote first with a different outcome crashes the
    /// run: the restart replays the recorded one.
    async fn write_held(&self, held: Vec<StepWrite>) -> Result<()> {
        for write in held {
            let (output, error) = (write.output.clone(), write.error.clone());
            match self.inner.shared.db.checkpoint(write).await {
                Ok(StepOutcome::Recorded) => {}
                Ok(StepOutcome::AlreadyRecorded {
                    output: o,
                    error: e,
                    ..
                }) if o == output && e == error => {}
                Ok(StepOutcome::AlreadyRecorded { .. }) => {
                    return Err(self.stop(Abort::Crash(
                        "a step's record differs from the outcome this run went on with".into(),
                    )))
                }
                Ok(StepOutcome::Cancelled) => return Err(self.stop(Abort::Cancelled)),
                Ok(StepOutcome::NotOwner) => return Err(self.stop(Abort::NotOwner)),
                Err(e) => return Err(self.db_failure(e)),
            }
        }
        Ok(())
    }

    /// The last record held back, for the outcome's write to carry; any others (steps run at
    /// once) are written first.
    pub(crate) async fn held_for_outcome(&self) -> Result<Option<StepWrite>> {
        let last = self.deferred().held.pop();
        self.settle().await?;
        Ok(last)
    }

    fn deferred(&self) -> std::sync::MutexGuard<'_, Deferred> {
        self.inner
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn write_of(&self, call: Call<'_>) -> StepWrite {
        StepWrite {
            workflow_id: self.inner.run.workflow_id.clone(),
            owner: self.inner.run.owner.clone(),
            function_id: call.function_id,
            name: call.name.to_owned(),
            output: call.output,
            error: call.error,
            child_workflow_id: call.child,
            started_at: call.started_at,
            completed_at: call.completed_at.unwrap_or_else(now_ms),
            app_name: self.inner.shared.config.app_name.clone(),
        }
    }

    /// A replay-only run never writes (its calls stop at the history's end before they would).
    fn refuse_in_replay(&self) -> Result<()> {
        match self.inner.replay {
            Some(_) => Err(self.stop(Abort::Cancelled)),
            None => Ok(()),
        }
    }

    /// Refuses `value`, recorded by `call` (named by `what`), over the runtime's value limit.
    pub(crate) fn check_value(&self, value: &str, call: impl FnOnce() -> String) -> Result<()> {
        self.inner.shared.config.check_value(value, call)
    }

    /// The identity of call `function_id` for an op that writes its effect with its record.
    pub(crate) fn op_step(&self, function_id: u32, started_at: i64) -> OpStep {
        OpStep {
            workflow_id: self.inner.run.workflow_id.clone(),
            owner: self.inner.run.owner.clone(),
            function_id,
            started_at,
            app_name: self.inner.shared.config.app_name.clone(),
        }
    }

    /// Runs an op; an abort it discovers stops the run.
    pub(crate) async fn op(&self, op: Op) -> Result<OpOutcome> {
        self.refuse_in_replay()?;
        let _busy = self.fresh().await?;
        match self.inner.shared.db.op(op).await {
            Ok(OpOutcome::Cancelled) => Err(self.stop(Abort::Cancelled)),
            Ok(OpOutcome::NotOwner) => Err(self.stop(Abort::NotOwner)),
            Ok(out) => {
                match &out {
                    OpOutcome::Done { output, .. } => {
                        self.count_call(row_bytes(output.as_deref(), None))
                    }
                    OpOutcome::AlreadyRecorded { output, error, .. } => {
                        self.count_call(row_bytes(output.as_deref(), error.as_deref()))
                    }
                    _ => {}
                }
                Ok(out)
            }
            Err(e) => Err(self.db_failure(e)),
        }
    }
}

/// A durable call's record.
pub(crate) struct Call<'a> {
    pub function_id: u32,
    pub name: &'a str,
    pub output: Option<String>,
    pub error: Option<String>,
    pub child: Option<String>,
    pub started_at: i64,
    /// Defaults to now; a sleep records its wake-up time here, as DBOS does.
    pub completed_at: Option<i64>,
}

impl<'a> Call<'a> {
    pub(crate) fn new(function_id: u32, name: &'a str, started_at: i64) -> Call<'a> {
        Call {
            function_id,
            name,
            output: None,
            error: None,
            child: None,
            started_at,
            completed_at: None,
        }
    }

    pub(crate) fn output(mut self, output: String) -> Self {
        self.output = Some(output);
        self
    }
}

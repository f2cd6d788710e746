//! A workflow actor: runs one workflow from its recorded steps to its outcome. Its life is the
//! slot its queue actor counts.
//!
//! The body runs as a task the actor owns, so the actor stays free to be told things while it
//! runs: a cancel (the body stops before its next durable call), or its deadline passing (the
//! workflow and its children are cancelled). A returned error is the workflow's outcome
//! (`ERROR`). A panic, or the system database failing past its retries, is a crash: the actor
//! fails and its queue actor restarts it (a replay) under the recovery budget. A permanent
//! database refusal is never a crash (a restart would meet it again): a durable call's fails
//! that call, the outcome's or the recorded steps' ends the run `ERROR` with the reason. A
//! cancelled or taken-over run stops without writing anything. A run evicted inside a long
//! wait has its body dropped and stops with the reason `evict::EVICTED`: its queue actor parks
//! it with its slot. A paused run stops before its next durable call, writes the step records it
//! held and puts its row back on its queue (`engine::pause`); its exit frees its slot.
//!
//! **Deadlines.** A timeout becomes `workflow_deadline_epoch_ms` (at start, or at claim when
//! enqueued); children take their parent's deadline; this actor's timer cancels the tree when it
//! passes. A recovered workflow keeps its deadline. A running step is bounded by it too (it drops
//! its body's future once the run is cancelled); a cancel before the deadline still lets a running
//! body finish (it stops at the next durable call), as DBOS's non-preemptible steps do.
//!
//! **Loud failures.** Each failure is one `tracing` line with `workflow_id`, `workflow` and `error`
//! as fields (not only in the spans: the step span is DEBUG and filters drop it): a recorded
//! `ERROR` outcome (error), a retried step attempt (warn), a parked workflow (error), a run stopped
//! by a cancel or its deadline (info; logged by the executor whose run stopped, so a cancel of a
//! workflow no process runs logs nothing). Only outcomes actually recorded log: a finish refused
//! because another execution took over is silent.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::base::codec;
use crate::base::metrics;
use crate::base::status::Status;
use crate::durable::context::{Abort, Context, History, RunInfo};
use crate::engine::completion::Finished;
use crate::engine::dispatch::{Dispatch, LocalRun};
use crate::engine::evict::EVICTED;
use crate::engine::pause;
use crate::engine::registry::Outcome;
use crate::engine::shared::SharedRef;
use crate::engine::start;
use crate::engine::stop::Stop;
use crate::error::{DbError, Error, PortableError};
use crate::sysdb::{FinishOutcome, FinishWrite, StepWrite};

pub(crate) struct WorkflowArgs {
    pub shared: SharedRef,
    pub dispatch: Dispatch,
    /// The queue whose actor runs it (the internal queue for direct starts), for the span.
    pub queue: std::sync::Arc<str>,
}

pub(crate) enum WorkflowMsg {
    /// The body returned (or panicked, with the panic's message).
    Done(Result<Outcome, String>),
    /// The workflow's deadline passed.
    Deadline,
    /// The body was dropped in a wait that parked the run.
    Evicted,
}

pub(crate) struct WorkflowState {
    shared: SharedRef,
    dispatch: Dispatch,
    queue: std::sync::Arc<str>,
    /// The run's stop flag, also in the directory: this process's cancel, pause or fence sets
    /// it there, and the body's `Context` reads it.
    stop: Arc<Stop>,
    ctx: Option<Context>,
    /// The workflow's deadline passed (so a cancellation is the deadline's).
    deadline_passed: bool,
    /// The body and the deadline timer; aborted when the state is dropped (also on a kill).
    tasks: Vec<JoinHandle<()>>,
    /// Its place against the resident bound, freed with the state.
    _resident: crate::engine::residents::Resident,
}

impl Drop for WorkflowState {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(mut runs) = self.shared.directory.running.get_mut(&self.dispatch.id) {
            runs.retain(|r| !Arc::ptr_eq(&r.stop, &self.stop));
        }
        self.shared
            .directory
            .running
            .remove_if(&self.dispatch.id, |_, runs| runs.is_empty());
    }
}

pub(crate) struct WorkflowActor;

impl Actor for WorkflowActor {
    type Msg = WorkflowMsg;
    type State = WorkflowState;
    type Arguments = WorkflowArgs;

    async fn pre_start(
        &self,
        _: ActorRef<WorkflowMsg>,
        args: WorkflowArgs,
    ) -> Result<WorkflowState, ActorProcessingErr> {
        let stop = Arc::new(Stop::default());
        let run = LocalRun {
            owner: args.dispatch.owner.clone(),
            stop: stop.clone(),
        };
        let id = args.dispatch.id.clone();
        args.shared
            .directory
            .running
            .entry(id)
            .or_default()
            .push(run);
        let resident = args.shared.residents.arrive();
        Ok(WorkflowState {
            shared: args.shared,
            dispatch: args.dispatch,
            queue: args.queue,
            stop,
            ctx: None,
            deadline_passed: false,
            tasks: Vec::new(),
            _resident: resident,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<WorkflowMsg>,
        state: &mut WorkflowState,
    ) -> Result<(), ActorProcessingErr> {
        let d = state.dispatch.clone();
        let span = tracing::info_span!("workflow", workflow_id = %d.id, workflow = %d.name,
            queue = %state.queue, otel.name = tracing::field::Empty);
        #[cfg(feature = "otel")]
        {
            crate::base::otel::describe(&span, &d.name, "workflow", &d.id);
            crate::base::otel::continue_trace(&span, d.trace_context.as_deref());
        }
        let shared = state.shared.clone();
        let Some((ctx, body)) = prepare(&shared, &d, &state.stop)
            .instrument(span.clone())
            .await?
        else {
            myself.stop(None);
            return Ok(());
        };
        let (me, parked) = (myself.clone(), ctx.clone());
        state.tasks.push(tokio::spawn(
            async move {
                // Biased: once a wait has evicted the run, its body is not polled again.
                let msg = tokio::select! {
                    biased;
                    () = parked.evicted() => WorkflowMsg::Evicted,
                    done = AssertUnwindSafe(body).catch_unwind() => {
                        WorkflowMsg::Done(done.map_err(panic_message))
                    }
                };
                let _ = me.send_message(msg);
            }
            .instrument(span),
        ));
        if let Some(deadline) = d.deadline {
            let me = myself.clone();
            state.tasks.push(tokio::spawn(async move {
                crate::base::clock::sleep_until_ms(deadline).await;
                let _ = me.send_message(WorkflowMsg::Deadline);
            }));
        }
        state.ctx = Some(ctx);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkflowMsg>,
        msg: WorkflowMsg,
        state: &mut WorkflowState,
    ) -> Result<(), ActorProcessingErr> {
        let Some(ctx) = state.ctx.clone() else {
            return Ok(());
        };
        match msg {
            WorkflowMsg::Deadline => {
                state.deadline_passed = true;
                let id = state.dispatch.id.clone();
                state
                    .shared
                    .db
                    .call_with(id, |db, id| async move { db.cancel(&id, true).await })
                    .await?;
                ctx.cancel();
            }
            WorkflowMsg::Evicted => evicted(&myself, state),
            WorkflowMsg::Done(_) if ctx.abort() == Some(Abort::Evicted) => evicted(&myself, state),
            WorkflowMsg::Done(done) => {
                if ctx.is_parked() {
                    // Registered for eviction, but the run ended another way first.
                    state.shared.signals.evicted.remove(&state.dispatch.id);
                }
                let outcome = match done {
                    Ok(outcome) => outcome,
                    Err(panic) => {
                        // The steps before the panic did finish: record them, so the restart
                        // replays them instead of running them again.
                        if ctx.abort().is_none() {
                            let _ = ctx.settle().await;
                        }
                        return Err(panic.into());
                    }
                };
                #[cfg(feature = "testing")]
                ctx.crash_at_end().await;
                // The last step's record, if held back, is written with the outcome.
                let (outcome, last) = match ctx.abort() {
                    Some(_) => (outcome, None),
                    None => match ctx.held_for_outcome().await {
                        Ok(last) => (outcome, last),
                        Err(e) => (Err(e.to_portable()), None),
                    },
                };
                match ctx.abort() {
                    None => finish(&state.shared, &state.dispatch, outcome, last).await?,
                    Some(Abort::Crash(reason)) => return Err(reason.into()),
                    Some(Abort::Cancelled) => {
                        let cause = if state.deadline_passed {
                            "deadline"
                        } else {
                            "cancel"
                        };
                        log_cancelled(&state.dispatch, cause);
                        metrics::workflow_finished(
                            &state.dispatch.name,
                            Status::Cancelled.as_str(),
                        );
                        state.shared.completions.abandon(&state.dispatch.id)
                    }
                    Some(Abort::NotOwner | Abort::Evicted) => {
                        state.shared.completions.abandon(&state.dispatch.id)
                    }
                    Some(Abort::Paused) => paused(&ctx, state).await?,
                    // Finished by its continuation's commit (`SUCCESS`, the marker).
                    Some(Abort::Continued(next)) => {
                        let finished = Finished {
                            status: Status::Success,
                            output: Some(crate::base::continuation::marker(&next)),
                            error: None,
                        };
                        recorded(&state.shared, &state.dispatch, finished);
                    }
                }
                myself.stop(None);
            }
        }
        Ok(())
    }
}

/// Stops an evicted run's actor; its queue actor parks the run.
fn evicted(myself: &ActorRef<WorkflowMsg>, state: &WorkflowState) {
    state
        .shared
        .completions
        .release_unwatched(&state.dispatch.id);
    myself.stop(Some(EVICTED.into()));
}

/// A paused run stopped before its next durable call: the step records it held are written
/// (so its finished steps replay), then its row goes back on its queue, unclaimable while paused
/// (`engine::pause`). A failure of either crashes the run: its restart replays, and is paused
/// again by the sweep.
async fn paused(ctx: &Context, state: &WorkflowState) -> Result<(), ActorProcessingErr> {
    let d = &state.dispatch;
    match ctx.settle().await {
        Ok(()) => {}
        // The row moved on meanwhile (cancelled, taken over): nothing of it is this run's.
        Err(Error::Cancelled { .. } | Error::NotOwner { .. }) => {
            state.shared.completions.abandon(&d.id);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    if let Some(queue) = pause::requeue(&state.shared.db, &d.id, &d.owner).await? {
        tracing::info!(workflow_id = %d.id, workflow = %d.name, queue = %queue,
            "workflow paused; it continues from here once resumed");
        start::wake(&state.shared, &queue);
    }
    state.shared.completions.abandon(&d.id);
    Ok(())
}

/// The one line a run stopped by a cancel (or its deadline) logs.
fn log_cancelled(d: &Dispatch, cause: &'static str) {
    let e = Error::Cancelled { id: d.id.clone() };
    tracing::info!(workflow_id = %d.id, workflow = %d.name, cause, error = %e,
        "workflow cancelled");
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    codec::panic_text(&*panic)
}

/// Everything before the body: the budget, the input, the recorded steps. `None` when the run
/// ended here (parked, or an input that cannot be read).
async fn prepare(
    shared: &SharedRef,
    d: &Dispatch,
    stop: &Arc<Stop>,
) -> Result<Option<(Context, futures::future::BoxFuture<'static, Outcome>)>, ActorProcessingErr> {
    let Some(entry) = shared.registry.get(&d.name).cloned() else {
        let e = Error::UnknownWorkflow(d.name.clone());
        finish(shared, d, Err(e.to_portable()), None).await?;
        return Ok(None);
    };
    if d.attempts > i64::from(entry.config.max_recovery_attempts) + 1 {
        if commit(
            shared,
            d,
            Status::MaxRecoveryAttemptsExceeded,
            None,
            None,
            None,
        )
        .await?
        {
            let e = Error::MaxRecoveryAttemptsExceeded { id: d.id.clone() };
            tracing::error!(workflow_id = %d.id, workflow = %d.name, attempts = d.attempts,
                error = %e, "workflow parked after its recovery budget");
        }
        return Ok(None);
    }
    let input = match decode_input(d) {
        Ok(codec::Inputs {
            value,
            portable: None,
        }) => value,
        Ok(codec::Inputs {
            value,
            portable: Some(envelope),
        }) => match adopt(shared, d, Some(envelope)).await? {
            true => value,
            false => return Ok(None),
        },
        Err(e) => {
            // The refusal is written as portable JSON: the row says so, its inputs untouched.
            let foreign = d.serialization.as_deref() != Some(codec::PORTABLE_JSON);
            if foreign && !adopt(shared, d, None).await? {
                return Ok(None);
            }
            finish(shared, d, Err(e.to_portable()), None).await?;
            return Ok(None);
        }
    };
    // A recovered run reads its history's first page now, the rest as its calls replay.
    let history = if d.fresh {
        History::empty(&d.id)
    } else {
        match History::open(&shared.db, &d.id).await {
            Ok(history) => history,
            // Recorded rows this build cannot read (a foreign writer's): every restart would
            // fail the same way, so the run ends with the reason instead of crash-looping.
            Err(e) if is_permanent(&e) => {
                finish(shared, d, Err(Error::Database(e).to_portable()), None).await?;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let run = RunInfo {
        workflow_id: d.id.clone(),
        workflow_name: d.name.clone(),
        owner: d.owner.clone(),
        deadline: d.deadline,
        metrics: entry.metrics().clone(),
        limits: entry.config.history_limits.unwrap_or(shared.config.history),
    };
    let ctx = Context::new(run, shared.clone(), history, stop.clone());
    let mut run = entry.run(ctx.clone(), input);
    // A step's record is held back for the outcome's write only while the body runs on; once
    // it waits on anything, the record is written.
    let waits = ctx.clone();
    let run = futures::future::poll_fn(move |cx| {
        let polled = run.as_mut().poll(cx);
        if polled.is_pending() {
            waits.write_held_now();
        }
        polled
    });
    let done = ctx.clone();
    // Datasources are released once the body has its outcome, before that outcome is written
    // (as DBOS does): the step checkpoints cover the deleted records.
    let body = Box::pin(async move {
        let outcome = run.await;
        done.release_datasources().await;
        outcome
    });
    Ok(Some((ctx, body)))
}

fn decode_input(d: &Dispatch) -> Result<codec::Inputs, Error> {
    let Some(inputs) = d.inputs.as_deref() else {
        return Ok(codec::Inputs {
            value: Value::Null,
            portable: None,
        });
    };
    codec::read_inputs(d.serialization.as_deref(), inputs)
}

/// A workflow enqueued in another format (DBOS's pickle or SuperJSON) gets its inputs rewritten
/// as portable JSON (`envelope`; `None`: left as they are) and its row marked `portable_json`
/// before its outcome is written, so the outcome, which stead writes as portable JSON, is read
/// as such (`base::codec`, "A workflow enqueued in another format"). False when the run is no
/// longer ours, or could not be adopted (then it has ended with the reason).
async fn adopt(
    shared: &SharedRef,
    d: &Dispatch,
    envelope: Option<String>,
) -> Result<bool, ActorProcessingErr> {
    let args = (d.id.clone(), d.owner.clone(), envelope);
    let adopted = shared
        .db
        .call_with(args, |db, (id, owner, envelope)| async move {
            db.adopt_inputs(&id, &owner, envelope.as_deref()).await
        })
        .await;
    match adopted {
        Ok(true) => Ok(true),
        Ok(false) => {
            shared.completions.abandon(&d.id);
            Ok(false)
        }
        // Refused every time (a value the database will not take): end with the reason.
        Err(e) if is_permanent(&e) => {
            finish(shared, d, Err(Error::Database(e).to_portable()), None).await?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

async fn finish(
    shared: &SharedRef,
    d: &Dispatch,
    outcome: Result<String, PortableError>,
    last_step: Option<StepWrite>,
) -> Result<(), ActorProcessingErr> {
    // The output moves into the write; only a failure is kept, for the log line.
    let (status, output, error, failure) = match outcome {
        Ok(output) => (Status::Success, Some(output), None, None),
        Err(e) => (Status::Error, None, Some(codec::encode_error(&e)), Some(e)),
    };
    let (recorded, failure) = match commit(shared, d, status, output, error, last_step).await {
        // The database will never take this outcome (a refused value): record why instead of
        // crashing into a restart that would run the body and be refused again.
        Err(e) if is_permanent(&e) => {
            tracing::warn!(error = %e, "the workflow's outcome was refused; recording the refusal");
            let portable = Error::Database(e).to_portable();
            let refused = codec::encode_error(&portable);
            let recorded = commit(shared, d, Status::Error, None, Some(refused), None).await?;
            (recorded, Some(portable))
        }
        other => (other?, failure),
    };
    if let (true, Some(e)) = (recorded, failure) {
        tracing::error!(workflow_id = %d.id, workflow = %d.name, error = %e, "workflow failed");
    }
    Ok(())
}

/// A run's outcome is committed (by its finish, or by its continuation's commit): counted, handed
/// to its waiters here, and announced to an evicted parent awaiting it.
fn recorded(shared: &SharedRef, d: &Dispatch, finished: Finished) {
    let status = finished.status.as_str();
    match shared.registry.get(&d.name) {
        Some(entry) => entry.metrics().finished(&d.name, status),
        None => metrics::workflow_finished(&d.name, status),
    }
    shared.completions.finish(&d.id, finished);
    shared.signals.child_ended(&d.id);
}

/// A failure that a restart would meet again: neither transient nor the runtime closing.
fn is_permanent(e: &DbError) -> bool {
    !e.is_transient() && *e != DbError::Closed
}

/// Writes the outcome; true when it was recorded (not refused: cancelled, taken over).
async fn commit(
    shared: &SharedRef,
    d: &Dispatch,
    status: Status,
    output: Option<String>,
    error: Option<String>,
    step: Option<StepWrite>,
) -> Result<bool, DbError> {
    let write = FinishWrite {
        workflow_id: d.id.clone(),
        owner: d.owner.clone(),
        status: status.as_str(),
        output: output.clone(),
        error: error.clone(),
        step,
    };
    match shared.db.finish(write).await? {
        FinishOutcome::Finished => {
            let finished = Finished {
                status,
                output,
                error,
            };
            recorded(shared, d, finished);
            Ok(true)
        }
        FinishOutcome::Cancelled => {
            // Cancelled elsewhere without a word to this process (DBOS's tools announce none).
            log_cancelled(d, "cancel");
            shared.completions.abandon(&d.id);
            Ok(false)
        }
        FinishOutcome::NotOwner => {
            shared.completions.abandon(&d.id);
            Ok(false)
        }
        // Another attempt of this run recorded the last step first: crash, and the restart
        // replays the recorded step instead of finishing with this run's.
        FinishOutcome::StepConflict => Err(DbError::Transient(
            "the last step was recorded by another attempt; replaying".into(),
        )),
    }
}

//! The workflow `Context`: numbers durable calls, replays recorded ones, records new ones, and
//! remembers why a run must stop (cancelled, taken over, or the database gave up); its writes
//! and held step records are in `records`, the recorded history it replays (read a page at a
//! time) in `history`.
//!
//! The durable calls themselves live beside it: steps in `step`, the rest in `calls`. It must
//! never run user code itself, and never decide the workflow's outcome: the workflow actor reads
//! the abort reason after the body returns.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

mod budget;
mod history;
mod records;

pub(crate) use history::History;
pub(crate) use records::Call;
use records::Deferred;

use crate::engine::shared::SharedRef;
pub(crate) use crate::engine::stop::Abort;
use crate::engine::stop::Stop;
use crate::error::{DbError, Error, Result};
use crate::sysdb::{HeldRun, StepRow, PAUSED_RUN};

/// The handle a workflow body uses for every durable call.
///
/// Cloning is cheap; clones share the same call numbering. Every durable call takes its number
/// when it is created (not when first polled), so running several at once (`futures::join!`,
/// [`Context::select2`]) numbers them the same way on every replay.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    run: RunInfo,
    shared: SharedRef,
    next_function_id: AtomicU32,
    /// The recorded calls this run replays, read a page at a time.
    history: History,
    /// Set once, by the first reason to stop; a lock-free read on every durable call. The
    /// directory holds it too, so this process stops the run without a message.
    stop: Arc<Stop>,
    /// Application databases this run's transactional steps used, released when it finishes.
    datasources: Mutex<Vec<Arc<dyn Release>>>,
    /// Set for a replay-only run (verification): it replays recorded calls and never writes.
    replay: Option<Arc<crate::durable::replay::ReplayLog>>,
    /// Durable activity in flight other than waits (steps, records, ops, children): a run is
    /// evicted only while this is zero.
    /// The lease's gap mark when this run last knew its row was its own
    /// (`Liveness::gap_mark`).
    gap_mark: AtomicU64,
    busy: AtomicU32,
    /// Waits in progress: a run is evicted only inside its one wait.
    waits: AtomicU32,
    /// Registered in the eviction registry (until the wait withdraws or the run is evicted).
    parked: AtomicBool,
    /// Step records held back until the next durable call, the run's outcome (written in its
    /// statement, saving a commit) or the body's next wait, whichever comes first.
    deferred: Mutex<Deferred>,
    /// Calls this run's history holds (recorded or replayed), and their bytes (`budget`).
    calls: AtomicU32,
    bytes: AtomicU64,
    /// The 80% warning was given.
    warned: AtomicBool,
}

/// Counts one activity of a run while alive.
pub(crate) struct Activity<'c>(&'c AtomicU32);

/// Where a durable call stands once begun ([`Context::begin`]).
pub(crate) enum Begun<'c> {
    /// Replayed: the call recorded at this number (its name checked), handed over: the history
    /// keeps no copy.
    Recorded(StepRow),
    /// To run: the records held back are written, and the run counts as busy while this lives.
    Fresh(Activity<'c>),
}

impl Drop for Activity<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Something a run holds outside the system database and lets go of when it finishes (the
/// records of a datasource's transactional steps).
pub(crate) trait Release: Send + Sync {
    /// Identifies the underlying resource, so it is released once however often it was used.
    fn key(&self) -> usize;

    /// Releases what this run holds; false when another execution owns the workflow now.
    fn release<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, bool>;
}

/// What the workflow actor knows about the run it starts.
pub(crate) struct RunInfo {
    pub workflow_id: String,
    pub workflow_name: String,
    pub owner: String,
    /// When the workflow's time runs out (epoch ms), if it has a timeout.
    pub deadline: Option<i64>,
    pub metrics: Arc<crate::base::metrics::WorkflowMetrics>,
    /// How much history the run may record.
    pub limits: crate::base::limits::HistoryLimits,
}

impl Context {
    pub(crate) fn new(
        run: RunInfo,
        shared: SharedRef,
        history: History,
        stop: Arc<Stop>,
    ) -> Context {
        Context::with_replay(run, shared, history, stop, None)
    }

    /// A replay-only run: each call is checked against `recorded` and logged in `log`; the
    /// first call past the history, or differing from it, stops the run. Nothing is written.
    pub(crate) fn replay_only(
        run: RunInfo,
        shared: SharedRef,
        recorded: Vec<StepRow>,
        log: Arc<crate::durable::replay::ReplayLog>,
    ) -> Context {
        let history = History::preloaded(&run.workflow_id, recorded);
        Context::with_replay(run, shared, history, Arc::default(), Some(log))
    }

    fn with_replay(
        run: RunInfo,
        shared: SharedRef,
        history: History,
        stop: Arc<Stop>,
        replay: Option<Arc<crate::durable::replay::ReplayLog>>,
    ) -> Context {
        let gap_mark = AtomicU64::new(shared.liveness.gap_mark());
        Context {
            inner: Arc::new(Inner {
                run,
                next_function_id: AtomicU32::new(1),
                history,
                stop,
                datasources: Mutex::new(Vec::new()),
                shared,
                replay,
                gap_mark,
                busy: AtomicU32::new(0),
                waits: AtomicU32::new(0),
                parked: AtomicBool::new(false),
                deferred: Mutex::new(Deferred::default()),
                calls: AtomicU32::new(0),
                bytes: AtomicU64::new(0),
                warned: AtomicBool::new(false),
            }),
        }
    }

    /// This workflow's id.
    pub fn workflow_id(&self) -> &str {
        &self.inner.run.workflow_id
    }

    pub(crate) fn metrics(&self) -> &crate::base::metrics::WorkflowMetrics {
        &self.inner.run.metrics
    }

    /// The name this workflow is registered under.
    pub fn workflow_name(&self) -> &str {
        &self.inner.run.workflow_name
    }

    pub(crate) fn shared(&self) -> &SharedRef {
        &self.inner.shared
    }

    /// The owner token this execution writes under.
    pub(crate) fn owner(&self) -> &str {
        &self.inner.run.owner
    }

    /// Remembers a datasource this run used, to release it when the run finishes.
    pub(crate) fn use_datasource(&self, used: Arc<dyn Release>) {
        let mut list = self
            .inner
            .datasources
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if list.iter().all(|d| d.key() != used.key()) {
            list.push(used);
        }
    }

    /// Releases every datasource this run used, once its body has returned with an outcome
    /// of its own (never after an abort: the next execution still needs the records).
    pub(crate) async fn release_datasources(&self) {
        let used = std::mem::take(
            &mut *self
                .inner
                .datasources
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for ds in used {
            if self.abort().is_some() || !ds.release(self).await {
                return;
            }
        }
    }

    pub(crate) fn deadline(&self) -> Option<i64> {
        self.inner.run.deadline
    }

    /// Takes the next durable-call number (1-based, as DBOS numbers them).
    pub(crate) fn next_function_id(&self) -> u32 {
        self.inner.next_function_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The number the next durable call will take, without taking it.
    pub(crate) fn peek_function_id(&self) -> u32 {
        self.inner.next_function_id.load(Ordering::Relaxed)
    }

    /// Takes number `expected` if no other call took it first (a patch's reservation).
    pub(crate) fn take_function_id(&self, expected: u32) -> bool {
        self.inner
            .next_function_id
            .compare_exchange(expected, expected + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The name recorded at `function_id` in the history this run replays, if any, read if
    /// the window of the history does not hold it.
    pub(crate) async fn recorded_name(&self, function_id: u32) -> Result<Option<String>> {
        let db = &self.inner.shared.db;
        match self.inner.history.name(db, function_id).await {
            Ok(name) => Ok(name),
            Err(e) => Err(self.db_failure(e)),
        }
    }

    /// The name recorded at `function_id`, without reading: `None` when the history's window
    /// does not hold that number (it holds the next call's after every replayed call).
    pub(crate) fn known_recorded_name(&self, function_id: u32) -> Option<Option<String>> {
        self.inner.history.known_name(function_id)
    }

    /// Reads the history on so that the next call's recorded name is known without reading
    /// (`known_recorded_name`), after a replayed call.
    pub(crate) async fn read_ahead(&self) -> Result<()> {
        let next = self.peek_function_id();
        match self
            .inner
            .history
            .read_ahead(&self.inner.shared.db, next)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => Err(self.db_failure(e)),
        }
    }

    /// Begins durable call `function_id`, which the code now calls `name`: fails fast when the
    /// run must stop; on replay, the recorded call; otherwise writes the step records held back
    /// first, so nothing this call does happens before an earlier step is recorded. Every
    /// durable call enters here, so none can forget that.
    pub(crate) async fn begin(&self, function_id: u32, name: &str) -> Result<Begun<'_>> {
        self.live().await?;
        if let Some(row) = self.recorded(function_id, name).await? {
            self.count_call(budget::row_bytes(
                row.output.as_deref(),
                row.error.as_deref(),
            ));
            self.read_ahead().await?;
            return Ok(Begun::Recorded(row));
        }
        let busy = self.fresh().await?;
        // Writing the held records took a round trip, during which the lease may have run out
        // (a freeze, a lost network): the gate is passed again right before the call begins,
        // which on the usual path is one load.
        self.live().await?;
        #[cfg(feature = "testing")]
        self.crash_point(name)?;
        Ok(Begun::Fresh(busy))
    }

    /// The crash matrix's stop before call `name` (feature `testing`), once the records before
    /// it are written: the run stops as a fenced one does, writing nothing more.
    #[cfg(feature = "testing")]
    pub(crate) fn crash_point(&self, name: &str) -> Result<()> {
        match self.inner.shared.crash.get() {
            Some(plan) if plan.at_call(&self.inner.run.workflow_id, name) => {
                Err(self.stop(Abort::NotOwner))
            }
            _ => Ok(()),
        }
    }

    /// The crash matrix's stop at the run's end (feature `testing`): the records held back are
    /// written, the outcome is not.
    #[cfg(feature = "testing")]
    pub(crate) async fn crash_at_end(&self) {
        let Some(plan) = self.inner.shared.crash.get() else {
            return;
        };
        if self.abort().is_none() && plan.at_end(&self.inner.run.workflow_id) {
            // A failed write leaves the run stopped all the same, as a crash would.
            let _ = self.settle().await;
            self.stop(Abort::NotOwner);
        }
    }

    /// The fresh half of [`Context::begin`], for a call whose replay is looked up elsewhere (a
    /// transaction's record lives in the application's database).
    pub(crate) async fn fresh(&self) -> Result<Activity<'_>> {
        self.check_budget()?;
        let busy = self.busy();
        self.settle().await?;
        Ok(busy)
    }

    /// Replays a patch marker recorded at `function_id` (it consumes its number and does
    /// nothing else), whose name the caller has just probed: the window holds it.
    pub(crate) fn replay_marker(&self, function_id: u32, marker: &str) -> Result<()> {
        let name = self.known_recorded_name(function_id).flatten();
        let row = name.map(|name| StepRow {
            function_id,
            name,
            output: None,
            error: None,
            child_workflow_id: None,
            serialization: None,
        });
        self.check_recorded(function_id, marker, row)?;
        self.count_call(0);
        Ok(())
    }

    /// The recorded call at `function_id`, checked against the name the code now uses.
    async fn recorded(&self, function_id: u32, name: &str) -> Result<Option<StepRow>> {
        let db = &self.inner.shared.db;
        let row = match self.inner.history.take(db, function_id).await {
            Ok(row) => row,
            Err(e) => return Err(self.db_failure(e)),
        };
        self.check_recorded(function_id, name, row)
    }

    fn check_recorded(
        &self,
        function_id: u32,
        name: &str,
        row: Option<StepRow>,
    ) -> Result<Option<StepRow>> {
        if let Some(log) = &self.inner.replay {
            return match log.visit(function_id, name, row.as_ref()) {
                true => Ok(row),
                false => Err(self.stop(Abort::Cancelled)),
            };
        }
        match row {
            Some(row) if row.name != name => Err(Error::NonDeterminism {
                workflow_id: self.inner.run.workflow_id.clone(),
                function_id,
                recorded: row.name,
                called: name.to_owned(),
            }),
            other => Ok(other),
        }
    }

    /// True for a replay-only run, which must not wait for time to pass.
    pub(crate) fn is_replay_only(&self) -> bool {
        self.inner.replay.is_some()
    }

    /// Fails fast once the run has been told to stop (cancelled, taken over, crashed).
    pub(crate) fn check_abort(&self) -> Result<()> {
        match self.inner.stop.reason() {
            Some(reason) => Err(self.abort_error(reason)),
            None => Ok(()),
        }
    }

    /// The gate every durable call and every step attempt passes: waits while this process
    /// cannot prove it is alive (its lease ran out; `engine::fleet`), then, having waited,
    /// reads its own row before going on: a peer may have adopted it meanwhile, and the
    /// keeper's stop of such runs travels by message, so it may come after the gate opened.
    pub(crate) async fn live(&self) -> Result<()> {
        self.check_abort()?;
        let liveness = &self.inner.shared.liveness;
        if liveness.admits() {
            // The lease lapsed and came back since this run last looked (it was between calls
            // then, so it never waited at the gate): its row may have moved meanwhile.
            // One load on the usual path; a store only after a gap.
            let mark = liveness.gap_mark();
            if self.inner.gap_mark.load(Ordering::Acquire) == mark {
                return Ok(());
            }
            self.inner.gap_mark.store(mark, Ordering::Release);
            return self.recheck().await;
        }
        tokio::select! {
            () = liveness.admitted() => {}
            () = self.aborted() => {}
        }
        self.check_abort()?;
        self.inner
            .gap_mark
            .store(liveness.gap_mark(), Ordering::Release);
        self.recheck().await
    }

    /// Counts a durable activity other than a wait until the guard drops.
    pub(crate) fn busy(&self) -> Activity<'_> {
        self.inner.busy.fetch_add(1, Ordering::Relaxed);
        Activity(&self.inner.busy)
    }

    /// Counts a wait until the guard drops.
    pub(crate) fn waiting(&self) -> Activity<'_> {
        self.inner.waits.fetch_add(1, Ordering::Relaxed);
        Activity(&self.inner.waits)
    }

    /// The run is inside one wait and nothing else durable is in flight, so dropping its body
    /// loses nothing a replay would not redo. Read from inside that wait, on the body's task.
    pub(crate) fn only_waiting(&self) -> bool {
        self.inner.replay.is_none()
            && self.inner.busy.load(Ordering::Relaxed) == 0
            && self.inner.waits.load(Ordering::Relaxed) == 1
    }

    /// Notes whether the run is registered in the eviction registry.
    pub(crate) fn set_parked(&self, parked: bool) {
        self.inner.parked.store(parked, Ordering::Relaxed);
    }

    /// Registered in the eviction registry: a run that ends otherwise must withdraw.
    pub(crate) fn is_parked(&self) -> bool {
        self.inner.parked.load(Ordering::Relaxed)
    }

    /// Resolves once the run has been evicted (its body is to be dropped).
    pub(crate) async fn evicted(&self) {
        loop {
            self.aborted().await;
            if self.inner.stop.reason() == Some(&Abort::Evicted) {
                return;
            }
            std::future::pending::<()>().await;
        }
    }

    /// Why the run must stop, if it must.
    pub(crate) fn abort(&self) -> Option<Abort> {
        self.inner.stop.reason().cloned()
    }

    /// Stops the run before its next durable call, and interrupts any wait.
    pub(crate) fn cancel(&self) {
        self.stop(Abort::Cancelled);
    }

    /// Resolves once the run has been told to stop.
    pub(crate) async fn aborted(&self) {
        self.inner.stop.stopped().await
    }

    pub(crate) fn stop(&self, reason: Abort) -> Error {
        let err = self.abort_error(&reason);
        // The first reason wins; a later one only reports itself to its caller.
        self.inner.stop.stop(reason);
        err
    }

    fn abort_error(&self, reason: &Abort) -> Error {
        let id = self.inner.run.workflow_id.clone();
        match reason {
            Abort::Cancelled => Error::Cancelled { id },
            Abort::NotOwner | Abort::Evicted | Abort::Paused => Error::NotOwner { id },
            Abort::Crash(reason) => Error::Database(DbError::Transient(reason.clone())),
            Abort::Continued(next) => Error::ContinuedAsNew {
                id,
                next: next.clone(),
            },
        }
    }

    /// Reads whether the row is still `PENDING` under this run's owner token; stops the run
    /// when another writer cancelled (or took) it, or paused the workflow. One read, for after
    /// a long wait only.
    pub(crate) async fn recheck(&self) -> Result<()> {
        let held = vec![HeldRun {
            id: self.inner.run.workflow_id.clone(),
            owner: self.inner.run.owner.clone(),
        }];
        let lost = self
            .inner
            .shared
            .db
            .call_with(held, |db, held| async move { db.lost_runs(&held).await })
            .await;
        match lost {
            Ok(lost) => match lost.first() {
                None => Ok(()),
                Some(run) if run.status == "CANCELLED" => Err(self.stop(Abort::Cancelled)),
                Some(run) if run.status == PAUSED_RUN => Err(self.stop(Abort::Paused)),
                Some(_) => Err(self.stop(Abort::NotOwner)),
            },
            Err(e) => Err(self.db_failure(e)),
        }
    }

    /// The error a database failure inside a durable call becomes. A transient one that
    /// outlasted its retries (or the runtime closing) crashes the run, to be restarted; a
    /// permanent one (the database refused the record) fails this call only, typed: the same
    /// write would be refused on every restart.
    pub(crate) fn db_failure(&self, e: DbError) -> Error {
        if e.is_transient() || e == DbError::Closed {
            self.stop(Abort::Crash(e.to_string()))
        } else {
            Error::Database(e)
        }
    }
}

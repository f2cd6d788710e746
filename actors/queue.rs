//! A queue actor: the shell around one queue's admission machine (`crate::engine::admission`).
//! It feeds the machine its messages (wake-ups, ticks, claim answers, local enqueues, children's exits,
//! drain, retire, new definitions) and performs its decisions: sends claims and take-backs to
//! the database, runs each admitted workflow as a child workflow actor that keeps its slot,
//! restarts crashed children under their recovery budget, keeps the timers, parks children
//! evicted while waiting (with their slots) and runs them again when woken. The internal
//! queue's actor also runs this process's direct starts.
//!
//! It decides nothing about slots, ordering or its lifecycle itself, and never runs workflow code.
//! On ticks, at most every [`SURVEY_GAP`], it surveys the queue on the pool, off the claim lane:
//! the depth and lag gauges, and whether a row waits below the claims' floor, which the machine
//! is told of (`sysdb::claim`, "Surveys"). A claim that took every row it saw zeroes the gauges.
//!
//! **Crashes and budgets.** A panic (or an exhausted database retry) fails the workflow actor; its
//! queue actor bumps `recovery_attempts` and restarts it after a backoff. Past
//! `max_recovery_attempts + 1` dispatches (default 100, as DBOS) it is parked as
//! `MAX_RECOVERY_ATTEMPTS_EXCEEDED`. A name unknown to this executor is recorded as `ERROR`.
//!
//! **Direct starts** run under the internal queue's actor. A restarted queue actor takes back this
//! executor's `PENDING` workflows of its queue, so executor ids must be unique among live processes
//! sharing a database: on Postgres the fleet's liveness lock enforces it (`engine::fleet`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinSet;

mod claims;

use super::restart::Restart;
use super::workflow::{WorkflowActor, WorkflowArgs};
use crate::base::backoff::Backoff;
use crate::base::metrics::{self, QueueMetrics};
use crate::base::queue::Queue;
use crate::engine::admission::{Admission, Decision, Path, Permit};
use crate::engine::directory::Offer;
use crate::engine::dispatch::{Dispatch, QueueRequest};
use crate::engine::evict::{Attach, EVICTED};
use crate::engine::pause;
use crate::engine::shared::SharedRef;
use crate::engine::start::{self, EnqueueRequest, Target};
use crate::error::DbError;
use crate::sysdb::{ClaimOutcome, Claimed, QueueKey, Waiting};

/// The least time between two surveys of a queue: a poll every 10 ms must not count a deep
/// backlog 100 times a second.
const SURVEY_GAP: Duration = Duration::from_millis(500);

pub(crate) enum QueueMsg {
    Request(QueueRequest),
    /// The polling timer fired.
    Tick,
    /// A delayed workflow came due, or the rate limit's window freed a start.
    Due,
    /// A claim finished.
    Claimed(Result<ClaimOutcome, DbError>, Instant),
    /// A survey of the queue's waiting rows answered: sent at the instant, below the floor.
    Surveyed(Result<Waiting, DbError>, Instant, Option<QueueKey>),
    /// A take-back finished (after this actor restarted, or a claim's answer was lost).
    TookBack(Result<Vec<Claimed>, DbError>),
    /// A crashed workflow's backoff passed and its restart was counted; it kept its slot.
    Respawn(Dispatch, Permit),
    /// A crashed workflow will not be restarted here (no longer ours, or the database failed).
    RespawnAbandoned(Permit),
    /// The queue's definition changed.
    Configure(Queue),
    /// The queue was deleted: stop claiming, let the children finish, then stop.
    Retire,
    /// Stop claiming; let children finish within the grace; answer when none is left.
    Drain(Duration, RpcReplyPort<()>),
    /// The grace is over: kill the children still running (they stay `PENDING`).
    DrainDeadline,
}

impl From<QueueRequest> for QueueMsg {
    fn from(r: QueueRequest) -> Self {
        QueueMsg::Request(r)
    }
}

impl TryFrom<QueueMsg> for QueueRequest {
    type Error = ();
    fn try_from(m: QueueMsg) -> Result<Self, ()> {
        match m {
            QueueMsg::Request(r) => Ok(r),
            _ => Err(()),
        }
    }
}

pub(crate) struct QueueArgs {
    pub shared: SharedRef,
    pub def: Queue,
    /// Restarts of this actor so far; after one, take back the workflows the old one ran.
    pub restarts: u32,
}

pub(crate) struct QueueState {
    shared: SharedRef,
    def: Queue,
    metrics: QueueMetrics,
    /// When the view the waiting gauges show was read: an older answer arriving late is dropped.
    gauges_read: Instant,
    /// When the last survey was sent, and whether it is still in flight.
    surveyed: Option<Instant>,
    surveying: bool,
    admission: Admission<Dispatch>,
    children: HashMap<ActorId, Child>,
    running: HashMap<String, ActorId>,
    /// Drains waiting for this queue to be idle.
    drains: Vec<RpcReplyPort<()>>,
    /// Claims, restarts and timers in flight; dropped with the state (also on a kill), which
    /// aborts them, so nothing outlives the actor.
    tasks: JoinSet<()>,
    /// Told after a settle that began `reopening`: awaited enqueues waiting for the offer look
    /// again.
    settled: Arc<Notify>,
}

/// A workflow actor of this queue, with the workflow it runs and the slot it holds.
struct Child {
    cell: ActorCell,
    dispatch: Dispatch,
    slot: Permit,
}

pub(crate) struct QueueActor;

/// Delay before a crashed workflow is restarted, growing with its restarts.
const WORKFLOW_RESTART: Backoff =
    Backoff::exponential(Duration::from_millis(50), Duration::from_secs(10));

impl Actor for QueueActor {
    type Msg = QueueMsg;
    type State = QueueState;
    type Arguments = QueueArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<QueueMsg>,
        args: QueueArgs,
    ) -> Result<QueueState, ActorProcessingErr> {
        let mut admission = Admission::new(&args.def, args.shared.config.claim_batch);
        // Registered before the take-back below runs, so a direct start either reaches this
        // actor or is already committed when the take-back reads the table.
        let name = args.def.name.clone();
        let settled = Arc::new(Notify::new());
        let offer = Offer {
            slots: admission.slots().clone(),
            settled: settled.clone(),
        };
        args.shared.directory.open_slots.insert(name.clone(), offer);
        args.shared
            .directory
            .queues
            .insert(name, myself.get_derived());
        let first = admission.start(args.restarts > 0);
        let mut state = QueueState {
            metrics: QueueMetrics::new(&args.def.name),
            gauges_read: Instant::now(),
            surveyed: None,
            surveying: false,
            shared: args.shared,
            def: args.def,
            admission,
            children: HashMap::new(),
            running: HashMap::new(),
            drains: Vec::new(),
            tasks: JoinSet::new(),
            settled,
        };
        state.perform(&myself, first).await;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<QueueMsg>,
        msg: QueueMsg,
        state: &mut QueueState,
    ) -> Result<(), ActorProcessingErr> {
        // A claim or restart task that panicked lost track of its workflows: fail, and the
        // restarted actor takes them back from the table.
        while let Some(done) = state.tasks.try_join_next() {
            if let Err(e) = done {
                if e.is_panic() {
                    return Err(format!("a queue task panicked: {e}").into());
                }
            }
        }
        let admission = &mut state.admission;
        let decisions = match msg {
            QueueMsg::Request(QueueRequest::Run(d)) => admission.run(d),
            QueueMsg::Request(QueueRequest::RunReserved(d, slot)) => {
                state.metrics.claimed_locally();
                admission.reserved(d, slot)
            }
            QueueMsg::Request(QueueRequest::Release(slot)) => admission.released(slot),
            QueueMsg::Request(QueueRequest::TakeBack) => admission.retake(),
            QueueMsg::Request(QueueRequest::Resume(d, slot)) => {
                // Already running here (recovered meanwhile): the parked run is superseded.
                match state.running.contains_key(&d.id) {
                    true => admission.released(slot),
                    false => admission.reserved(d, slot),
                }
            }
            QueueMsg::Request(QueueRequest::Wake) => admission.woken(),
            QueueMsg::Request(QueueRequest::TabledLanded) => admission.tabled_landed(),
            #[cfg(feature = "test-hooks")]
            QueueMsg::Request(QueueRequest::Panic) => {
                panic!("injected fault: queue {}", state.def.name)
            }
            QueueMsg::Request(QueueRequest::Enqueue(request, reply)) => {
                state.enqueue(request, reply);
                Vec::new()
            }
            QueueMsg::Tick => {
                let (decisions, floor) = (admission.tick(), admission.floor());
                state.survey(&myself, floor);
                decisions
            }
            QueueMsg::Due => admission.due(),
            QueueMsg::Claimed(result, began) => state.claimed(result, began),
            QueueMsg::Surveyed(result, read, floor) => state.surveyed(result, read, floor),
            QueueMsg::TookBack(result) => state.took_back(result),
            QueueMsg::Respawn(d, slot) => admission.respawn(d, slot),
            QueueMsg::RespawnAbandoned(slot) => admission.respawn_abandoned(slot),
            QueueMsg::Configure(def) => {
                let decisions = admission.configure(&def);
                state.def = def;
                decisions
            }
            QueueMsg::Retire => admission.retire(),
            QueueMsg::Drain(grace, reply) => {
                state.drains.push(reply);
                state.after(&myself, grace, QueueMsg::DrainDeadline);
                state.admission.drain()
            }
            QueueMsg::DrainDeadline => admission.grace_over(),
        };
        state.perform(&myself, decisions).await;
        state.settle(&myself).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<QueueMsg>,
        event: SupervisionEvent,
        state: &mut QueueState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, abnormal, why) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, true, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, false, reason.unwrap_or_default())
            }
            _ => return Ok(()),
        };
        let evicted = !abnormal && why == EVICTED;
        if let Some(child) = state.exited(&cell.get_id()) {
            if evicted {
                let decisions = state.park(&myself, child);
                state.perform(&myself, decisions).await;
                state.settle(&myself).await;
                return Ok(());
            }
            if abnormal {
                tracing::warn!(workflow_id = %child.dispatch.id, error = %why, "workflow crashed");
            }
            let crashed = Restart::Transient.applies(abnormal);
            let decisions = state.admission.exited(child.dispatch, child.slot, crashed);
            state.perform(&myself, decisions).await;
        }
        state.settle(&myself).await;
        Ok(())
    }
}

impl QueueState {
    /// Begins a user actor's enqueue here, in the order the messages came; the writes complete
    /// together, concurrently.
    fn enqueue(&mut self, request: EnqueueRequest, reply: oneshot::Sender<crate::Result<String>>) {
        let begun = start::begin(
            &self.shared,
            Target::Queue(&self.def.name),
            &request.workflow,
            &request.input_json,
            request.options,
        );
        match begun {
            Ok(submission) => {
                self.tasks.spawn(async move {
                    let handle = submission.complete().await;
                    let _ = reply.send(handle.map(|h| h.id().to_owned()));
                });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Publishes the running gauge and performs what settling the machine decides.
    async fn settle(&mut self, myself: &ActorRef<QueueMsg>) {
        self.metrics.running(self.children.len());
        // Enqueues wait only while the slots say `reopening`, so only a settle that began so
        // can release one.
        let waited = self.admission.slots().reopening();
        let decisions = self.admission.settle(self.children.len());
        self.perform(myself, decisions).await;
        if waited {
            self.settled.notify_waiters();
        }
    }

    async fn perform(&mut self, myself: &ActorRef<QueueMsg>, decisions: Vec<Decision<Dispatch>>) {
        for decision in decisions {
            match decision {
                Decision::Run {
                    workflow,
                    slot,
                    path,
                } => {
                    let taken_back = path == Path::TakenBack;
                    if taken_back {
                        metrics::workflow_recovered(&workflow.name);
                    }
                    self.spawn(myself, workflow, slot, taken_back).await;
                }
                Decision::Claim { limit, floor } => self.claim(myself, limit, floor),
                Decision::TakeBack => self.take_back(myself),
                Decision::Restart { workflow, slot } => self.restart(myself, workflow, slot),
                Decision::Poll(base) => {
                    // ±10% jitter so executors do not poll in lockstep.
                    let jitter = (uuid::Uuid::new_v4().as_u128() % 2001) as f64 / 10_000.0 - 0.1;
                    self.after(myself, base.mul_f64(1.0 + jitter), QueueMsg::Tick);
                }
                Decision::WakeAt(due_ms) => {
                    let due = crate::base::clock::sleep_until_ms(due_ms);
                    self.when(myself, due, QueueMsg::Due);
                }
                Decision::KillChildren => {
                    for child in self.children.values() {
                        child.cell.kill();
                    }
                }
                Decision::AnswerDrains => {
                    for reply in self.drains.drain(..) {
                        let _ = reply.send(());
                    }
                }
                Decision::Stop => {
                    let me = myself.get_id();
                    self.shared
                        .directory
                        .queues
                        .remove_if(&self.def.name, |_, r| r.get_id() == me);
                    myself.stop(Some("queue deleted".into()));
                }
            }
        }
    }

    /// Spawns a workflow actor that keeps `slot`. A take-back (`replace`) or a run under a new
    /// owner (a resume claimed here) supersedes a local run of the same id: the row has a new
    /// owner, so the old run could not checkpoint again anyway.
    async fn spawn(
        &mut self,
        myself: &ActorRef<QueueMsg>,
        d: Dispatch,
        slot: Permit,
        replace: bool,
    ) {
        if let Some(old) = self.running.get(&d.id).copied() {
            let same_owner = self
                .children
                .get(&old)
                .is_some_and(|running| running.dispatch.owner == d.owner);
            if same_owner && !replace {
                return;
            }
            tracing::debug!(workflow_id = %d.id, replace, "a new dispatch supersedes a local run");
            if let Some(child) = self.children.remove(&old) {
                child.cell.kill();
            }
            self.running.remove(&d.id);
        }
        let id = d.id.clone();
        self.shared.starting.remove(&id);
        let args = WorkflowArgs {
            shared: self.shared.clone(),
            dispatch: d.clone(),
            queue: Arc::from(self.def.name.as_str()),
        };
        match Actor::spawn_linked(None, WorkflowActor, args, myself.get_cell()).await {
            Ok((child, _)) => {
                self.metrics.workflows_running(1.0);
                self.running.insert(id, child.get_id());
                let child = Child {
                    cell: child.get_cell(),
                    dispatch: d,
                    slot,
                };
                self.children.insert(child.cell.get_id(), child);
            }
            Err(e) => tracing::error!(workflow_id = %id, error = %e, "cannot spawn workflow actor"),
        }
    }

    /// Hands an evicted child's run and slot to the registry; runs it again at once if it was
    /// woken meanwhile, frees the slot if it was cancelled meanwhile, and also requeues its row if
    /// it was paused meanwhile (`engine::pause`).
    fn park(&mut self, myself: &ActorRef<QueueMsg>, child: Child) -> Vec<Decision<Dispatch>> {
        let evicted = &self.shared.signals.evicted;
        match evicted.attach(child.dispatch, &self.def.name, child.slot) {
            Attach::Parked => Vec::new(),
            Attach::Resume(d, slot) => self.admission.reserved(d, slot),
            Attach::Gone(slot) => self.admission.released(slot),
            Attach::Paused(d, slot) => {
                let (db, myself) = (self.shared.db.clone(), myself.clone());
                self.tasks.spawn(async move {
                    if pause::requeue_logged(&db, &d.id, &d.owner).await {
                        let _ = myself.send_message(QueueMsg::Request(QueueRequest::Wake));
                    }
                });
                self.admission.released(slot)
            }
        }
    }

    fn exited(&mut self, cell: &ActorId) -> Option<Child> {
        let child = self.children.remove(cell)?;
        // Only its own entry: a run that replaced it under the same id (a take-back, a resume
        // claimed here) stays known, or a parked run could be resumed beside it.
        if self.running.get(&child.dispatch.id) == Some(cell) {
            self.running.remove(&child.dispatch.id);
        }
        self.metrics.workflows_running(-1.0);
        Some(child)
    }

    /// Restarts a crashed workflow after a backoff, counting the restart in its row first; the
    /// slot travels with it.
    fn restart(&mut self, myself: &ActorRef<QueueMsg>, mut d: Dispatch, slot: Permit) {
        let delay = WORKFLOW_RESTART.delay(d.restarts);
        d.restarts += 1;
        d.fresh = false;
        let (db, myself) = (self.shared.db.clone(), myself.clone());
        self.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            let (id, owner) = (d.id.clone(), d.owner.clone());
            let bumped = db
                .call_with((id, owner), |sys, (id, owner)| async move {
                    sys.bump_attempts(&id, &owner).await
                })
                .await;
            let msg = match bumped {
                Ok(Some(attempts)) => {
                    metrics::workflow_recovered(&d.name);
                    d.attempts = attempts;
                    QueueMsg::Respawn(d, slot)
                }
                Ok(None) => QueueMsg::RespawnAbandoned(slot),
                Err(e) => {
                    tracing::error!(workflow_id = %d.id, error = %e,
                        "cannot count a restart; the workflow waits for recovery");
                    QueueMsg::RespawnAbandoned(slot)
                }
            };
            let _ = myself.send_message(msg);
        });
    }

    /// Sends `msg` to this actor after `delay`, unless the actor is gone by then.
    fn after(&mut self, myself: &ActorRef<QueueMsg>, delay: Duration, msg: QueueMsg) {
        self.when(myself, tokio::time::sleep(delay), msg);
    }

    /// Sends `msg` to this actor once `timer` completes (the task goes with the actor).
    fn when(
        &mut self,
        myself: &ActorRef<QueueMsg>,
        timer: impl std::future::Future<Output = ()> + Send + 'static,
        msg: QueueMsg,
    ) {
        let myself = myself.clone();
        self.tasks.spawn(async move {
            timer.await;
            let _ = myself.send_message(msg);
        });
    }
}

//! A queue actor: claims the enqueued workflows of one queue within its limits and runs each as a
//! child workflow actor, whose life is the concurrency slot (no counter to drift). The internal
//! queue's actor also runs this process's direct starts. Crashed children are restarted under
//! their recovery budget.
//!
//! It claims when woken (an enqueue here, a NOTIFY from elsewhere, a freed slot with work
//! waiting, a delayed workflow coming due) and on its polling timer, the fallback that keeps it
//! correct when a wake-up is lost. It never runs workflow code, and never claims while draining.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tokio::task::JoinSet;

use super::restart::Restart;
use super::workflow::{WorkflowActor, WorkflowArgs};
use crate::backoff::Backoff;
use crate::clock::now_ms;
use crate::dispatch::{Dispatch, OpenSlots, QueueRequest};
use crate::error::DbError;
use crate::metrics::{self, QueueMetrics};
use crate::queue::INTERNAL_QUEUE;
use crate::queue::{Queue, QueueMessage};
use crate::shared::SharedRef;
use crate::start::{self, Target};
use crate::sysdb::{ClaimOutcome, ClaimRequest, Claimed};

pub(crate) enum QueueMsg {
    Request(QueueRequest),
    Public(QueueMessage),
    /// The polling timer fired.
    Tick,
    /// A delayed workflow came due, or the rate limit's window freed a start.
    Due,
    /// A claim finished.
    Claimed(Result<ClaimOutcome, DbError>, Instant),
    /// A take-back finished (after this actor restarted, or a claim's answer was lost).
    TookBack(Result<Vec<Claimed>, DbError>),
    /// A crashed workflow's backoff passed and its restart was counted.
    Respawn(Dispatch),
    /// A crashed workflow will not be restarted here (no longer ours, or the database failed).
    RespawnAbandoned,
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

impl From<QueueMessage> for QueueMsg {
    fn from(m: QueueMessage) -> Self {
        QueueMsg::Public(m)
    }
}

impl TryFrom<QueueMsg> for QueueMessage {
    type Error = ();
    fn try_from(m: QueueMsg) -> Result<Self, ()> {
        match m {
            QueueMsg::Public(m) => Ok(m),
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
    children: HashMap<ActorId, (ActorCell, Dispatch)>,
    running: HashMap<String, ActorId>,
    /// Crashed workflows waiting for their restart; they keep their slot.
    restarting: usize,
    /// Slots taken by enqueues from this process that run at once, not yet arrived.
    reserved: usize,
    /// The slots offered to those enqueues, and how many were offered last.
    open: Arc<OpenSlots>,
    offered: i64,
    claiming: bool,
    /// Slots the claim in flight asked for: not offered to local enqueues until it answers, or
    /// its rows and theirs together could exceed the worker concurrency.
    asked: i64,
    /// Work may be waiting that a free slot could take: claim as soon as one frees.
    backlog: bool,
    /// Wake-ups so far, and how many there were when the claim in flight began: a claim's
    /// answer must not clear the backlog of work announced after it looked.
    wakes: u64,
    wakes_at_claim: u64,
    /// Local enqueues written to the table and those whose writes were over, at the claim's start.
    tabled_at_claim: (u64, u64),
    timer_armed: bool,
    /// Consecutive claims held back by limits other executors use up: polls back off.
    contended: u32,
    next_due: Option<i64>,
    draining: Option<Vec<RpcReplyPort<()>>>,
    deadline_passed: bool,
    retiring: bool,
    /// This actor replaces one that crashed: take its workflows back before claiming.
    restarted: bool,
    /// Claims, restarts and timers in flight; dropped with the state (also on a kill), which
    /// aborts them, so nothing outlives the actor.
    tasks: JoinSet<()>,
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
        // Registered before the take-back below runs, so a direct start either reaches this
        // actor or is already committed when the take-back reads the table.
        let name = args.def.name.clone();
        let open = Arc::new(OpenSlots::default());
        args.shared.open_slots.insert(name.clone(), open.clone());
        args.shared.queues.insert(name, myself.get_derived());
        Ok(QueueState {
            metrics: QueueMetrics::new(&args.def.name),
            shared: args.shared,
            def: args.def,
            children: HashMap::new(),
            running: HashMap::new(),
            restarting: 0,
            reserved: 0,
            open,
            offered: 0,
            claiming: false,
            asked: 0,
            backlog: true,
            wakes: 0,
            wakes_at_claim: 0,
            tabled_at_claim: (0, 0),
            timer_armed: false,
            contended: 0,
            next_due: None,
            draining: None,
            deadline_passed: false,
            retiring: false,
            restarted: args.restarts > 0,
            tasks: JoinSet::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<QueueMsg>,
        state: &mut QueueState,
    ) -> Result<(), ActorProcessingErr> {
        if state.restarted {
            state.take_back(&myself);
        } else {
            state.claim(&myself, true);
        }
        Ok(())
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
        match msg {
            QueueMsg::Request(QueueRequest::Run(d)) => {
                if state.draining.is_none() {
                    state.spawn(&myself, d, false).await;
                }
            }
            QueueMsg::Request(QueueRequest::RunReserved(d)) => {
                state.collect_reservations();
                state.reserved = state.reserved.saturating_sub(1);
                state.metrics.claimed_locally();
                if state.draining.is_none() {
                    state.spawn(&myself, d, false).await;
                }
            }
            QueueMsg::Request(QueueRequest::Release) => {
                state.collect_reservations();
                state.reserved = state.reserved.saturating_sub(1);
                state.claim(&myself, false);
            }
            QueueMsg::Request(QueueRequest::Wake) => {
                state.wakes += 1;
                state.backlog = true;
                state.claim(&myself, false);
            }
            QueueMsg::Request(QueueRequest::Panic) => {
                panic!("injected fault: queue {}", state.def.name)
            }
            QueueMsg::Public(QueueMessage::Enqueue(request, reply)) => {
                // Begun here, in the order the messages came; written together, concurrently.
                let begun = start::begin(
                    &state.shared,
                    Target::Queue(&state.def.name),
                    &request.workflow,
                    &request.input_json,
                    request.options,
                );
                match begun {
                    Ok(submission) => {
                        state.tasks.spawn(async move {
                            let handle = submission.complete().await;
                            let _ = reply.send(handle.map(|h| h.id().to_owned()));
                        });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            QueueMsg::Tick => {
                state.timer_armed = false;
                state.claim(&myself, true);
            }
            QueueMsg::Due => {
                state.next_due = None;
                state.wakes += 1;
                state.backlog = true;
                state.claim(&myself, false);
            }
            QueueMsg::Claimed(result, began) => state.claimed(&myself, result, began).await,
            QueueMsg::TookBack(result) => state.took_back(&myself, result).await,
            QueueMsg::Respawn(d) => {
                state.restarting -= 1;
                if state.draining.is_none() {
                    state.spawn(&myself, d, false).await;
                }
            }
            QueueMsg::RespawnAbandoned => state.restarting -= 1,
            QueueMsg::Configure(def) => {
                state.def = def;
                state.backlog = true;
                state.claim(&myself, false);
            }
            QueueMsg::Retire => state.retiring = true,
            QueueMsg::Drain(grace, reply) => {
                state.draining.get_or_insert_with(Vec::new).push(reply);
                state.after(&myself, grace, QueueMsg::DrainDeadline);
            }
            QueueMsg::DrainDeadline => {
                state.deadline_passed = true;
                for (cell, _) in state.children.values() {
                    cell.kill();
                }
            }
        }
        state.settle(&myself);
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
        if let Some(d) = state.exited(&cell.get_id()) {
            if abnormal {
                tracing::warn!(workflow_id = %d.id, error = %why, "workflow crashed");
            }
            if Restart::Transient.applies(abnormal) && state.draining.is_none() {
                state.restart(&myself, d);
            } else if state.backlog {
                // A slot freed and work may be waiting: take it now, not at the next poll.
                state.claim(&myself, false);
            }
        }
        state.settle(&myself);
        Ok(())
    }
}

impl QueueState {
    /// An enqueue from this process may run at once when nothing it would jump is waiting and
    /// only this executor's own limit applies.
    fn may_skip_the_queue(&self) -> bool {
        self.draining.is_none()
            && !self.retiring
            && !self.backlog
            && !self.def.shared_limits()
            && !self.def.partitioned
            && self.free_slots() > 0
    }

    /// Counts the slots enqueues took since the last offer, and withdraws the offer.
    fn collect_reservations(&mut self) {
        let (left, blocked) = self.open.withdraw();
        self.reserved += (self.offered - left).max(0) as usize;
        self.offered = 0;
        self.backlog |= blocked;
    }

    /// Offers the free slots to local enqueues when they may skip the queue.
    fn offer_slots(&mut self) {
        self.collect_reservations();
        let n = if self.may_skip_the_queue() {
            self.free_slots()
        } else {
            0
        };
        if self.open.offer(n) {
            self.offered = n;
        } else {
            self.backlog = true;
        }
    }

    fn free_slots(&self) -> i64 {
        let busy = (self.children.len() + self.restarting + self.reserved) as i64 + self.asked;
        match self.def.worker_concurrency {
            Some(limit) => i64::from(limit) - busy,
            None => self.shared.config.claim_batch,
        }
    }

    /// Claims as many workflows as there are free slots, unless a claim is already in flight.
    fn claim(&mut self, myself: &ActorRef<QueueMsg>, on_timer: bool) {
        if self.claiming || self.draining.is_some() || self.retiring {
            return;
        }
        // Slots taken by local enqueues are not free for a claim.
        self.collect_reservations();
        let limit = self.free_slots().min(self.shared.config.claim_batch);
        if limit <= 0 {
            self.arm_timer(myself);
            return;
        }
        self.claiming = true;
        self.asked = limit;
        self.wakes_at_claim = self.wakes;
        self.tabled_at_claim = self.open.tabled();
        let config = &self.shared.config;
        let request = ClaimRequest {
            queue: self.def.clone(),
            limit,
            with_depth: on_timer,
            executor_id: config.executor_id.clone(),
            app_version: config.app_version.clone(),
            app_name: config.app_name.clone(),
            now: now_ms(),
        };
        let (db, myself) = (self.shared.db.clone(), myself.clone());
        self.tasks.spawn(async move {
            let began = Instant::now();
            let result = db.claim(request).await;
            let _ = myself.send_message(QueueMsg::Claimed(result, began));
        });
    }

    async fn claimed(
        &mut self,
        myself: &ActorRef<QueueMsg>,
        result: Result<ClaimOutcome, DbError>,
        began: Instant,
    ) {
        self.claiming = false;
        self.asked = 0;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(queue = %self.def.name, error = %e, "claim failed");
                if e.is_transient() {
                    // It may have committed before the answer was lost: take those rows back.
                    self.take_back(myself);
                }
                self.arm_timer(myself);
                return;
            }
        };
        let (n, elapsed) = (out.claimed.len(), began.elapsed());
        self.metrics
            .claimed(n, elapsed, out.rate_limited, out.depth);
        let asked = self.free_slots().min(self.shared.config.claim_batch);
        let took = out.claimed.len() as i64;
        // Claimed while draining or retiring: they stay PENDING for the next launch to recover.
        if self.draining.is_none() {
            for row in out.claimed {
                self.spawn(myself, Dispatch::from(row), false).await;
            }
        }
        // Another executor uses up the shared concurrency: back off the polling a little. A rate
        // limit is not contention: the claim retries when the window frees a start.
        let contended = took == 0 && out.allowed < asked && !out.rate_limited;
        self.contended = if contended { self.contended + 1 } else { 0 };
        if let Some(free_at) = out.rate_free_at {
            self.wake_at(myself, free_at);
        }
        let woken_since = self.wakes != self.wakes_at_claim;
        // The claim saw every local enqueue's row only if all had landed before it and none
        // went to the table since.
        let (tabled, landed) = self.tabled_at_claim;
        let unseen = tabled != landed || self.open.tabled().0 != tabled;
        self.backlog = out.seen > took || out.promoted > 0 || woken_since || unseen;
        if let Some(due) = out.next_due {
            self.wake_at(myself, due);
        }
        let more = out.promoted > 0 || woken_since || (took > 0 && took >= asked);
        if more && self.free_slots() > 0 {
            self.claim(myself, false);
        }
        self.arm_timer(myself);
    }

    fn take_back(&mut self, myself: &ActorRef<QueueMsg>) {
        self.claiming = true;
        let (db, shared, myself) = (self.shared.db.clone(), self.shared.clone(), myself.clone());
        let queue = self.def.name.clone();
        let running: Vec<String> = self.running.keys().cloned().collect();
        self.tasks.spawn(async move {
            let result = db
                .call_with(
                    (shared, queue, running),
                    |sys, (shared, queue, running)| async move {
                        let me = shared.config.executor();
                        let direct = queue == INTERNAL_QUEUE;
                        sys.redispatch(&me, &queue, direct, &running).await
                    },
                )
                .await;
            let _ = myself.send_message(QueueMsg::TookBack(result));
        });
    }

    async fn took_back(
        &mut self,
        myself: &ActorRef<QueueMsg>,
        result: Result<Vec<Claimed>, DbError>,
    ) {
        self.claiming = false;
        match result {
            Ok(rows) if self.draining.is_none() => {
                for row in rows {
                    metrics::workflow_recovered(&row.name);
                    self.spawn(myself, Dispatch::from(row), true).await;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!(queue = %self.def.name, error = %e,
                "take-back failed; those workflows wait for the next launch's recovery"),
        }
        self.backlog = true;
        self.claim(myself, false);
    }

    /// Spawns a workflow actor. A take-back (`replace`) or a run under a new owner (a resume
    /// claimed here) supersedes a local run of the same id: the row has a new owner, so the old
    /// run could not checkpoint again anyway.
    async fn spawn(&mut self, myself: &ActorRef<QueueMsg>, d: Dispatch, replace: bool) {
        if let Some(old) = self.running.get(&d.id).copied() {
            let same_owner = self
                .children
                .get(&old)
                .is_some_and(|(_, running)| running.owner == d.owner);
            if same_owner && !replace {
                return;
            }
            if let Some((cell, _)) = self.children.remove(&old) {
                cell.kill();
            }
            self.running.remove(&d.id);
        }
        let id = d.id.clone();
        let args = WorkflowArgs {
            shared: self.shared.clone(),
            dispatch: d.clone(),
            queue: Arc::from(self.def.name.as_str()),
        };
        match Actor::spawn_linked(None, WorkflowActor, args, myself.get_cell()).await {
            Ok((child, _)) => {
                self.metrics.workflows_running(1.0);
                self.running.insert(id, child.get_id());
                self.children.insert(child.get_id(), (child.get_cell(), d));
            }
            Err(e) => tracing::error!(workflow_id = %id, error = %e, "cannot spawn workflow actor"),
        }
    }

    fn exited(&mut self, cell: &ActorId) -> Option<Dispatch> {
        let (_, d) = self.children.remove(cell)?;
        self.running.remove(&d.id);
        self.metrics.workflows_running(-1.0);
        Some(d)
    }

    /// Restarts a crashed workflow after a backoff, counting the restart in its row first.
    fn restart(&mut self, myself: &ActorRef<QueueMsg>, mut d: Dispatch) {
        self.restarting += 1;
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
                    QueueMsg::Respawn(d)
                }
                Ok(None) => QueueMsg::RespawnAbandoned,
                Err(e) => {
                    tracing::error!(workflow_id = %d.id, error = %e,
                        "cannot count a restart; the workflow waits for recovery");
                    QueueMsg::RespawnAbandoned
                }
            };
            let _ = myself.send_message(msg);
        });
    }

    /// Keeps the polling timer running: the queue's interval, doubled per contended claim (up
    /// to 8×), with ±10% jitter so executors do not poll in lockstep.
    fn arm_timer(&mut self, myself: &ActorRef<QueueMsg>) {
        if self.timer_armed || self.draining.is_some() || self.retiring {
            return;
        }
        self.timer_armed = true;
        let base = self
            .def
            .polling_interval
            .mul_f64(f64::from(1u32 << self.contended.min(3)));
        let jitter = (uuid::Uuid::new_v4().as_u128() % 2001) as f64 / 10_000.0 - 0.1;
        self.after(myself, base.mul_f64(1.0 + jitter), QueueMsg::Tick);
    }

    /// Claims again at `due_ms` (a delayed workflow comes due, or a rate window frees a start).
    fn wake_at(&mut self, myself: &ActorRef<QueueMsg>, due_ms: i64) {
        if self.next_due.is_some_and(|at| at <= due_ms) {
            return;
        }
        self.next_due = Some(due_ms);
        let wait = (due_ms - now_ms()).max(0) as u64;
        self.after(myself, Duration::from_millis(wait), QueueMsg::Due);
    }

    /// Sends `msg` to this actor after `delay`, unless the actor is gone by then.
    fn after(&mut self, myself: &ActorRef<QueueMsg>, delay: Duration, msg: QueueMsg) {
        let myself = myself.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = myself.send_message(msg);
        });
    }

    /// Publishes the running gauge; answers a drain, or stops a retired queue, once idle.
    fn settle(&mut self, myself: &ActorRef<QueueMsg>) {
        self.metrics.running(self.children.len());
        self.offer_slots();
        let idle = self.children.is_empty() && !self.claiming;
        let settled = idle && (self.restarting == 0 || self.deadline_passed);
        if settled {
            if let Some(waiters) = self.draining.as_mut() {
                for reply in waiters.drain(..) {
                    let _ = reply.send(());
                }
            }
            if self.retiring && self.restarting == 0 {
                let me = myself.get_id();
                self.shared
                    .queues
                    .remove_if(&self.def.name, |_, r| r.get_id() == me);
                myself.stop(Some("queue deleted".into()));
            }
        }
    }
}

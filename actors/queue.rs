//! A queue actor: claims the enqueued workflows of one queue and runs each as a child workflow
//! actor, whose life is the concurrency slot. It also runs this process's direct starts (the
//! internal queue does) and restarts children that crash, counting each against the workflow's
//! recovery budget.
//!
//! It never runs workflow code itself, and never claims while draining.

use std::collections::HashMap;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tokio::task::JoinSet;

use super::restart::Restart;
use super::workflow::{WorkflowActor, WorkflowArgs};
use crate::backoff::Backoff;
use crate::dispatch::{Dispatch, QueueRequest};
use crate::error::DbError;
use crate::metrics;
use crate::shared::SharedRef;
use crate::sysdb::{self, Claimed};

pub(crate) enum QueueMsg {
    Request(QueueRequest),
    /// Claim now (a wake-up).
    Poll,
    /// The polling timer fired.
    Tick,
    /// A claim (or, after a restart of this actor, a take-back: `true`) finished.
    Claimed(Result<Vec<Claimed>, DbError>, bool),
    /// A crashed workflow's backoff passed and its restart was counted.
    Respawn(Dispatch),
    /// A crashed workflow will not be restarted here (no longer ours, or the database failed).
    RespawnAbandoned,
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
    pub name: String,
    /// Restarts of this actor so far; after one, take back the workflows the old one ran.
    pub restarts: u32,
}

pub(crate) struct QueueState {
    shared: SharedRef,
    name: String,
    children: HashMap<ActorId, (ActorCell, Dispatch)>,
    running: HashMap<String, ActorId>,
    /// Crashed workflows waiting for their restart; they keep their slot.
    restarting: usize,
    claiming: bool,
    timer_armed: bool,
    draining: Option<Vec<RpcReplyPort<()>>>,
    deadline_passed: bool,
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
        args.shared
            .queues
            .insert(args.name.clone(), myself.get_derived());
        Ok(QueueState {
            shared: args.shared,
            name: args.name,
            children: HashMap::new(),
            running: HashMap::new(),
            restarting: 0,
            claiming: args.restarts > 0,
            timer_armed: false,
            draining: None,
            deadline_passed: false,
            tasks: JoinSet::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<QueueMsg>,
        state: &mut QueueState,
    ) -> Result<(), ActorProcessingErr> {
        if state.claiming {
            state.take_back(&myself);
        } else {
            let _ = myself.send_message(QueueMsg::Poll);
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
                    state.spawn(&myself, d).await;
                }
            }
            QueueMsg::Request(QueueRequest::Panic) => {
                panic!("injected fault: queue {}", state.name)
            }
            QueueMsg::Poll => state.poll(&myself),
            QueueMsg::Tick => {
                state.timer_armed = false;
                state.poll(&myself);
            }
            QueueMsg::Claimed(result, take_back) => {
                state.claimed(&myself, result).await;
                if take_back {
                    // Back in business: claim what was enqueued meanwhile.
                    state.poll(&myself);
                }
            }
            QueueMsg::Respawn(d) => {
                state.restarting -= 1;
                if state.draining.is_none() {
                    state.spawn(&myself, d).await;
                }
            }
            QueueMsg::RespawnAbandoned => state.restarting -= 1,
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
        state.answer_drain();
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
            }
        }
        state.answer_drain();
        Ok(())
    }
}

impl QueueState {
    fn poll(&mut self, myself: &ActorRef<QueueMsg>) {
        if self.claiming || self.draining.is_some() {
            return;
        }
        self.claiming = true;
        self.fetch(myself, false);
    }

    /// After this actor restarted: its old children died with it, so take their workflows back.
    fn take_back(&mut self, myself: &ActorRef<QueueMsg>) {
        self.fetch(myself, true);
    }

    /// Claims enqueued workflows (or takes back this executor's running ones) off the actor's
    /// mailbox; the rows come back as `Claimed`.
    fn fetch(&mut self, myself: &ActorRef<QueueMsg>, take_back: bool) {
        let (db, shared, queue) = (
            self.shared.db.clone(),
            self.shared.clone(),
            self.name.clone(),
        );
        let limit = self.shared.config.claim_batch;
        let myself = myself.clone();
        self.tasks.spawn(async move {
            let result = db
                .call(move |sys| {
                    let (shared, queue) = (shared.clone(), queue.clone());
                    async move {
                        let me = shared.config.executor();
                        if take_back {
                            let direct = queue == sysdb::INTERNAL_QUEUE;
                            sysdb::redispatch(&sys.pool, &sys.sql, &me, &queue, direct).await
                        } else {
                            sysdb::claim(&sys.pool, &sys.sql, &me, &queue, limit).await
                        }
                    }
                })
                .await;
            let _ = myself.send_message(QueueMsg::Claimed(result, take_back));
        });
    }

    async fn claimed(
        &mut self,
        myself: &ActorRef<QueueMsg>,
        result: Result<Vec<Claimed>, DbError>,
    ) {
        self.claiming = false;
        let full = match result {
            Ok(rows) => {
                let full = rows.len() as i64 >= self.shared.config.claim_batch;
                // Claimed while draining: they stay PENDING for the next launch to recover.
                if self.draining.is_none() {
                    for row in rows {
                        self.spawn(myself, Dispatch::from(row)).await;
                    }
                }
                full
            }
            Err(e) => {
                tracing::warn!(queue = %self.name, error = %e, "claim failed");
                false
            }
        };
        if full {
            let _ = myself.send_message(QueueMsg::Poll);
        } else if !self.timer_armed && self.draining.is_none() {
            self.timer_armed = true;
            self.after(myself, self.shared.config.internal_poll, QueueMsg::Tick);
        }
    }

    async fn spawn(&mut self, myself: &ActorRef<QueueMsg>, d: Dispatch) {
        if self.running.contains_key(&d.id) {
            return;
        }
        let id = d.id.clone();
        let args = WorkflowArgs {
            shared: self.shared.clone(),
            dispatch: d.clone(),
        };
        match Actor::spawn_linked(None, WorkflowActor, args, myself.get_cell()).await {
            Ok((child, _)) => {
                metrics::workflows_running(1.0);
                self.running.insert(id, child.get_id());
                self.children.insert(child.get_id(), (child.get_cell(), d));
            }
            Err(e) => tracing::error!(workflow_id = %id, error = %e, "cannot spawn workflow actor"),
        }
    }

    fn exited(&mut self, cell: &ActorId) -> Option<Dispatch> {
        let (_, d) = self.children.remove(cell)?;
        self.running.remove(&d.id);
        metrics::workflows_running(-1.0);
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
                .call(move |sys| {
                    let (id, owner) = (id.clone(), owner.clone());
                    async move { sysdb::bump_attempts(&sys.pool, &sys.sql, &id, &owner).await }
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

    /// Sends `msg` to this actor after `delay`, unless the actor is gone by then.
    fn after(&mut self, myself: &ActorRef<QueueMsg>, delay: Duration, msg: QueueMsg) {
        let myself = myself.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = myself.send_message(msg);
        });
    }

    fn answer_drain(&mut self) {
        let settled = self.children.is_empty() && (self.restarting == 0 || self.deadline_passed);
        if settled && !self.claiming {
            if let Some(waiters) = self.draining.as_mut() {
                for reply in waiters.drain(..) {
                    let _ = reply.send(());
                }
            }
        }
    }
}

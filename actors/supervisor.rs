//! The supervisor: root of the actor tree. Starts children in order, restarts them by their
//! restart policy, reports a fatal error when one keeps failing, and drains the tree on shutdown
//! (queues first, the database last).
//!
//! It also keeps one queue actor per queue definition: on `Reconcile` (at launch, after a local
//! change, and on a timer for changes made elsewhere) a new queue gets an actor, a changed one is
//! reconfigured, a deleted one is retired (it finishes its running workflows, then stops).
//!
//! It knows children only by their spec; it never runs a query or a workflow itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr, SupervisionEvent,
};

use tokio::task::JoinSet;

use super::queue::QueueMsg;
use super::restart::{Decision, Restart, RestartBudget};
use crate::base::metrics;
use crate::base::queue::Queue;
use crate::engine::config::RestartPolicy;
use crate::engine::db::Db;
use crate::error::DbError;

/// Spawns a child linked to the given supervisor; the count says how often it was restarted.
pub(crate) type SpawnFn =
    Arc<dyn Fn(ActorCell, u32) -> BoxFuture<'static, Result<ActorCell, SpawnErr>> + Send + Sync>;

/// What a child is, for shutdown ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The database actor: flushed and stopped last.
    Database,
    /// A queue actor: drained first.
    Queue,
    /// Anything else: stopped after the queues.
    Other,
}

/// How to start (and restart) one child.
#[derive(Clone)]
pub(crate) struct ChildSpec {
    pub name: String,
    pub restart: Restart,
    pub role: Role,
    pub spawn: SpawnFn,
}

/// How the supervisor keeps one queue actor per queue definition.
pub(crate) struct QueueSet {
    /// Reads the definitions this executor serves (the internal queue included).
    pub load: Arc<dyn Fn() -> BoxFuture<'static, Result<Vec<Queue>, DbError>> + Send + Sync>,
    /// The spec of a queue's actor.
    pub spec: Arc<dyn Fn(Queue) -> ChildSpec + Send + Sync>,
    /// How often definitions are re-read.
    pub every: Duration,
}

pub(crate) struct SupervisorArgs {
    pub children: Vec<ChildSpec>,
    /// Queue actors to keep in line with the queue definitions, if any.
    pub queues: Option<QueueSet>,
    pub policy: RestartPolicy,
    /// The database handle, flushed before the database actor stops.
    pub db: Option<Db>,
    /// Told once, when the supervisor gives up on a child.
    pub on_fatal: Arc<dyn Fn(String) + Send + Sync>,
    /// Counts every restart of a child.
    pub restarts: Arc<AtomicU64>,
}

pub(crate) enum SupervisorMsg {
    /// Starts another child (after the launch steps that must precede it).
    AddChild(ChildSpec, RpcReplyPort<Result<(), String>>),
    /// A restart's backoff has passed.
    Restart(String),
    /// Drains everything within the grace and stops; answers when done.
    Shutdown(Duration, RpcReplyPort<()>),
    /// Brings the queue actors in line with the definitions; the timer sends it without a reply.
    Reconcile(Option<RpcReplyPort<Result<(), String>>>),
}

struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    budget: RestartBudget,
    restarts: u32,
    /// The definition a queue actor runs with.
    queue: Option<Queue>,
    /// A deleted queue's actor finishing its work: not restarted when it stops.
    retiring: bool,
}

pub(crate) struct SupervisorState {
    children: Vec<Child>,
    queues: Option<QueueSet>,
    reconcile_armed: bool,
    policy: RestartPolicy,
    db: Option<Db>,
    on_fatal: Arc<dyn Fn(String) + Send + Sync>,
    restarts: Arc<AtomicU64>,
    stopping: bool,
    /// Pending restart timers; aborted when the supervisor's state is dropped.
    timers: JoinSet<()>,
}

pub(crate) struct Supervisor;

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let mut state = SupervisorState {
            children: Vec::new(),
            queues: args.queues,
            reconcile_armed: false,
            policy: args.policy,
            db: args.db,
            on_fatal: args.on_fatal,
            restarts: args.restarts,
            stopping: false,
            timers: JoinSet::new(),
        };
        for spec in args.children {
            state.add(&myself, spec, None).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        while state.timers.try_join_next().is_some() {}
        match msg {
            SupervisorMsg::AddChild(spec, reply) => {
                let result = state
                    .add(&myself, spec, None)
                    .await
                    .map_err(|e| e.to_string());
                let _ = reply.send(result);
            }
            SupervisorMsg::Reconcile(reply) => {
                let result = state.reconcile(&myself).await;
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "cannot read the queue definitions");
                }
                match reply {
                    Some(reply) => {
                        let _ = reply.send(result);
                    }
                    None => state.reconcile_armed = false,
                }
                state.arm_reconcile(&myself);
            }
            SupervisorMsg::Restart(name) => state.restart(&myself, &name).await,
            SupervisorMsg::Shutdown(grace, reply) => {
                state.shutdown(grace).await;
                let _ = reply.send(());
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, abnormal, why) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, true, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, false, reason.unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        if !state.stopping {
            state.on_exit(&myself, &cell, abnormal, &why);
        }
        Ok(())
    }
}

impl SupervisorState {
    async fn add(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        spec: ChildSpec,
        queue: Option<Queue>,
    ) -> Result<(), SpawnErr> {
        let cell = (spec.spawn)(myself.get_cell(), 0).await?;
        metrics::register_actor(&spec.name);
        self.children.push(Child {
            spec,
            cell: Some(cell),
            budget: RestartBudget::default(),
            restarts: 0,
            queue,
            retiring: false,
        });
        Ok(())
    }

    async fn reconcile(&mut self, myself: &ActorRef<SupervisorMsg>) -> Result<(), String> {
        let Some(set) = &self.queues else {
            return Ok(());
        };
        let (load, spec) = (set.load.clone(), set.spec.clone());
        let mut desired: HashMap<String, Queue> = load()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|q| (q.name.clone(), q))
            .collect();
        for child in self.children.iter_mut().filter(|c| !c.retiring) {
            let Some(current) = child.queue.clone() else {
                continue;
            };
            match desired.remove(&current.name) {
                None => {
                    child.retiring = true;
                    if let Some(cell) = &child.cell {
                        let _ =
                            ActorRef::<QueueMsg>::from(cell.clone()).send_message(QueueMsg::Retire);
                    }
                }
                Some(def) if def != current => {
                    if let Some(cell) = &child.cell {
                        let actor = ActorRef::<QueueMsg>::from(cell.clone());
                        let _ = actor.send_message(QueueMsg::Configure(def.clone()));
                    }
                    child.spec = spec(def.clone());
                    child.queue = Some(def);
                }
                Some(_) => {}
            }
        }
        // A retired queue whose actor was between restarts has nothing left to wait for.
        self.children.retain(|c| !(c.retiring && c.cell.is_none()));
        for def in desired.into_values() {
            let child = spec(def.clone());
            self.add(myself, child, Some(def))
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn arm_reconcile(&mut self, myself: &ActorRef<SupervisorMsg>) {
        let Some(every) = self.queues.as_ref().map(|q| q.every) else {
            return;
        };
        if self.reconcile_armed || self.stopping {
            return;
        }
        self.reconcile_armed = true;
        let myself = myself.clone();
        self.timers.spawn(async move {
            tokio::time::sleep(every).await;
            let _ = myself.send_message(SupervisorMsg::Reconcile(None));
        });
    }

    fn on_exit(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        cell: &ActorCell,
        abnormal: bool,
        why: &str,
    ) {
        let Some(i) = self
            .children
            .iter()
            .position(|c| c.cell.as_ref().is_some_and(|x| x.get_id() == cell.get_id()))
        else {
            return;
        };
        let child = &mut self.children[i];
        child.cell = None;
        if child.retiring || !child.spec.restart.applies(abnormal) {
            self.children.remove(i);
            return;
        }
        tracing::warn!(child = %child.spec.name, reason = why, "supervised actor exited");
        self.decide(myself, i, why);
    }

    fn decide(&mut self, myself: &ActorRef<SupervisorMsg>, i: usize, why: &str) {
        let child = &mut self.children[i];
        match child.budget.on_exit(&self.policy, Instant::now()) {
            Decision::RestartAfter(delay) => {
                let (name, myself) = (child.spec.name.clone(), myself.clone());
                self.timers.spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = myself.send_message(SupervisorMsg::Restart(name));
                });
            }
            Decision::GiveUp => {
                let reason = format!(
                    "{} failed more than {} times within {:?}; last: {why}",
                    child.spec.name, self.policy.max_restarts, self.policy.window
                );
                tracing::error!(%reason, "giving up: the runtime stops");
                self.stopping = true;
                (self.on_fatal)(reason.clone());
                // Stopping the supervisor kills the whole tree.
                myself.stop(Some(reason));
            }
        }
    }

    async fn restart(&mut self, myself: &ActorRef<SupervisorMsg>, name: &str) {
        if self.stopping {
            return;
        }
        let Some(i) = self.children.iter().position(|c| c.spec.name == name) else {
            return;
        };
        let child = &mut self.children[i];
        child.restarts += 1;
        self.restarts.fetch_add(1, Ordering::Relaxed);
        metrics::actor_restarted(name);
        match (child.spec.spawn)(myself.get_cell(), child.restarts).await {
            Ok(cell) => child.cell = Some(cell),
            Err(e) => self.decide(myself, i, &e.to_string()),
        }
    }

    async fn shutdown(&mut self, grace: Duration) {
        self.stopping = true;
        let queues: Vec<ActorRef<QueueMsg>> = self.cells(Role::Queue).map(ActorRef::from).collect();
        let timeout = grace.as_millis() as u64 + 5_000;
        let drains = queues
            .iter()
            .map(|q| async move { ractor::call_t!(q, QueueMsg::Drain, timeout, grace) });
        futures::future::join_all(drains).await;
        for cell in self.cells(Role::Queue) {
            let _ = cell
                .stop_and_wait(None, Some(grace + Duration::from_secs(5)))
                .await;
        }
        // Other children (the listener) work inside a never-ending handler: kill, not stop.
        for cell in self.cells(Role::Other) {
            let _ = cell.kill_and_wait(Some(Duration::from_secs(5))).await;
        }
        if let Some(db) = &self.db {
            db.flush().await;
        }
        for cell in self.cells(Role::Database) {
            let _ = cell
                .stop_and_wait(None, Some(Duration::from_secs(10)))
                .await;
        }
    }

    fn cells(&self, role: Role) -> impl Iterator<Item = ActorCell> + '_ {
        self.children
            .iter()
            .filter(move |c| c.spec.role == role)
            .filter_map(|c| c.cell.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Mutex;

    /// A child that fails as soon as it starts.
    struct Crasher;

    impl Actor for Crasher {
        type Msg = ();
        type State = ();
        type Arguments = Arc<AtomicU32>;

        async fn pre_start(
            &self,
            _: ActorRef<()>,
            starts: Arc<AtomicU32>,
        ) -> Result<(), ActorProcessingErr> {
            starts.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }

        async fn post_start(&self, _: ActorRef<()>, _: &mut ()) -> Result<(), ActorProcessingErr> {
            Err("poisoned".into())
        }
    }

    fn crasher(starts: Arc<AtomicU32>) -> ChildSpec {
        ChildSpec {
            name: "crasher".into(),
            restart: Restart::Permanent,
            role: Role::Other,
            spawn: Arc::new(move |sup, _| {
                let starts = starts.clone();
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(None, Crasher, starts, sup).await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }

    #[tokio::test]
    async fn a_child_that_keeps_failing_is_restarted_n_times_then_reported_fatal() {
        let starts = Arc::new(AtomicU32::new(0));
        let fatal = Arc::new(Mutex::new(None::<String>));
        let seen = fatal.clone();
        let args = SupervisorArgs {
            children: vec![crasher(starts.clone())],
            policy: RestartPolicy::default()
                .max_restarts(3)
                .window(Duration::from_secs(10))
                .backoff(Duration::from_millis(1), Duration::from_millis(10)),
            queues: None,
            db: None,
            on_fatal: Arc::new(move |r| *seen.lock().unwrap() = Some(r)),
            restarts: Arc::default(),
        };
        let (sup, handle) = Actor::spawn(None, Supervisor, args).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), handle)
            .await
            .expect("the supervisor stops instead of looping")
            .unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 4, "first start + 3 restarts");
        let reason = fatal.lock().unwrap().clone().expect("fatal reported");
        assert!(
            reason.contains("crasher") && reason.contains("poisoned"),
            "{reason}"
        );
        assert_eq!(sup.get_status(), ractor::ActorStatus::Stopped);
    }
}

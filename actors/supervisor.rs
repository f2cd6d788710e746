//! The supervisor: root of the actor tree. Starts children in order, restarts them by their
//! restart policy, reports a fatal error when one keeps failing, and drains the tree on shutdown
//! (queues first, the database last).
//!
//! It knows children only by their spec; it never runs a query or a workflow itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr, SupervisionEvent,
};

use tokio::task::JoinSet;

use super::queue::QueueMsg;
use super::restart::{Decision, Restart, RestartBudget, RestartPolicy};
use crate::db::Db;
use crate::metrics;

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

pub(crate) struct SupervisorArgs {
    pub children: Vec<ChildSpec>,
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
}

struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    budget: RestartBudget,
    restarts: u32,
}

pub(crate) struct SupervisorState {
    children: Vec<Child>,
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
            policy: args.policy,
            db: args.db,
            on_fatal: args.on_fatal,
            restarts: args.restarts,
            stopping: false,
            timers: JoinSet::new(),
        };
        for spec in args.children {
            state.add(&myself, spec).await?;
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
                let result = state.add(&myself, spec).await.map_err(|e| e.to_string());
                let _ = reply.send(result);
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
    ) -> Result<(), SpawnErr> {
        let cell = (spec.spawn)(myself.get_cell(), 0).await?;
        self.children.push(Child {
            spec,
            cell: Some(cell),
            budget: RestartBudget::default(),
            restarts: 0,
        });
        Ok(())
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
        if !child.spec.restart.applies(abnormal) {
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
        for cell in self.cells(Role::Queue).chain(self.cells(Role::Other)) {
            let _ = cell
                .stop_and_wait(None, Some(grace + Duration::from_secs(5)))
                .await;
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

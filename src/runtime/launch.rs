//! The composition root: the one module that names actor types (`actors/` is its private child
//! module). It builds the actor tree (supervisor → database, then scheduler, sweep, listener and
//! fleet on Postgres, retention when configured, and one actor per queue), runs the launch steps in
//! order (lock the SQLite file, take the executor's liveness lock, migrate, join the roster,
//! declare queues and schedules, recover, register the app version, then fire, listen, adopt and
//! claim), spawns the eviction registry's timer task, and tears the tree down.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};

use crate::base::queue::Queue;
use crate::engine::config::{Config, RestartPolicy};
use crate::engine::db::{Db, DbStats};
use crate::engine::dispatch::QueueRequest;
use crate::engine::parked::Parked;
use crate::engine::registry::Registry;
use crate::engine::retention::Retention;
use crate::engine::schedule::{self, Schedule};
use crate::engine::shared::{RunState, Shared, SharedRef};
use crate::error::{DbError, Error, Result};
use crate::sysdb::{self, Store};
use actors::{
    ChildSpec, Database, FleetActor, FleetArgs, ListenerActor, ListenerArgs, QueueActor, QueueArgs,
    QueueSet, Restart, RetentionActor, RetentionArgs, Role, SchedulerActor, SchedulerArgs,
    Supervisor, SupervisorArgs, SupervisorMsg, SweepActor, SweepArgs, LANE_NAMES,
};

// The actors live here, under the composition root, so no other core module can name one: the
// compiler holds "the core reaches actors only through its own message types".
#[path = "../../actors/mod.rs"]
mod actors;

/// What a running runtime holds on to.
pub(crate) struct Tree {
    pub shared: SharedRef,
    supervisor: ActorRef<SupervisorMsg>,
    pub stats: Arc<DbStats>,
    pub restarts: Arc<AtomicU64>,
    /// Runs this process's scheduler enqueued.
    pub fired: Arc<AtomicU64>,
    /// Closed when the runtime stops, which also ends the pool's maintenance task.
    sys: Arc<dyn Store>,
    /// The evicted workflows' timer task (executors), ended with the runtime.
    evictions: Option<tokio::task::JoinHandle<()>>,
}

/// What the builder declared, written at launch.
pub(crate) struct Declared {
    pub queues: Vec<Queue>,
    pub schedules: Vec<Schedule>,
    /// The periodic garbage collection, if any.
    pub retention: Option<Retention>,
}

/// Starts the actor tree on a connected database and runs the launch steps.
pub(crate) async fn launch(
    config: Config,
    registry: Registry,
    part: Part,
    sys: Arc<dyn Store>,
    db_retry_timeout: Duration,
    policy: RestartPolicy,
) -> Result<Tree> {
    let shared: SharedRef = Arc::new(Shared::new(config, registry, Db::new(db_retry_timeout)));
    crate::base::metrics::register_process(&LANE_NAMES);
    for name in shared.registry.names() {
        if let Some(entry) = shared.registry.get(name) {
            entry.metrics();
        }
    }
    let stats = Arc::new(DbStats {
        #[cfg(feature = "test-hooks")]
        faults: shared.db.faults(),
        ..DbStats::default()
    });
    let restarts = Arc::new(AtomicU64::new(0));
    let queues = matches!(part, Part::Executor(_)).then(|| queue_set(&shared));
    let evictions = queues
        .is_some()
        .then(|| tokio::spawn(evictions(shared.clone())));
    let supervisor = start_supervisor(
        &shared,
        &sys,
        policy,
        queues,
        stats.clone(),
        restarts.clone(),
    )
    .await?;
    let tree = Tree {
        shared,
        supervisor,
        stats,
        restarts,
        fired: Arc::default(),
        sys: sys.clone(),
        evictions,
    };
    match part {
        Part::Executor(declared) => tree.prepare(&sys, declared).await?,
        Part::Client => tree.prepare_client(&sys).await?,
    }
    Ok(tree)
}

/// What a process takes part in.
pub(crate) enum Part {
    /// It runs workflows: migrates, declares its queues and schedules, recovers, fires, claims.
    Executor(Declared),
    /// It only manages and produces work: it checks the schema and listens.
    Client,
}

impl Tree {
    /// Migrate, declare the builder's queues and schedules, recover, then listen, fire and
    /// start claiming.
    async fn prepare(&self, sys: &Arc<dyn Store>, declared: Declared) -> Result<()> {
        let shared = &self.shared;
        sys.lock_for_executor()?;
        let mut lease = hold(shared, sys).await?;
        let schema = shared.config.schema.clone();
        let migrated = shared
            .db
            .call(|db| async move { db.migrate().await })
            .await
            .map_err(|e| Error::Migration {
                schema: schema.clone(),
                reason: e.to_string(),
            })?;
        tracing::debug!(?migrated, "system database ready");
        lease.register(&member(&shared.config)).await?;
        for queue in declared.queues {
            put_queue(shared, queue, true).await?;
        }
        for s in declared.schedules {
            crate::base::metrics::register_schedule(&s.name);
            schedule::put(shared, s, true).await?;
        }
        let me = shared.clone();
        let recovered = shared
            .db
            .call_with(me, move |db, me| async move {
                db.recover(&me.config.executor(), db.is_embedded()).await
            })
            .await?;
        if recovered > 0 {
            crate::base::metrics::launch_recovered(recovered);
            tracing::info!(recovered, executor = %shared.config.executor_id, "recovering workflows");
        }
        let (version, app) = (
            shared.config.app_version.clone(),
            shared.config.app_name.clone(),
        );
        shared
            .db
            .call_with((version, app), move |db, (version, app)| async move {
                db.register_version(&version, app.as_deref()).await
            })
            .await?;
        // An embedded database has no other writers to hear from: local writes wake locally.
        let mut children = vec![
            scheduler_spec(shared, self.fired.clone()),
            sweep_spec(shared),
        ];
        if sys.can_listen() {
            children.push(listener_spec(shared, sys));
        } else if !sys.is_embedded() {
            shared.signals.set_deaf();
            log_poll_only();
        }
        if !sys.is_embedded() {
            children.push(fleet_spec(shared, sys, lease));
        }
        if let Some(policy) = declared.retention {
            children.push(retention_spec(shared, policy));
        }
        for child in children {
            self.add_child(child).await?;
        }
        self.reconcile().await
    }

    /// A client never migrates: it refuses a schema older than it needs.
    async fn prepare_client(&self, sys: &Arc<dyn Store>) -> Result<()> {
        let found = self
            .shared
            .db
            .call(|db| async move { db.schema_version().await })
            .await?;
        if found.is_none_or(|v| v < sysdb::DBOS_SCHEMA_VERSION) {
            return Err(Error::SchemaTooOld {
                schema: self.shared.config.schema.clone(),
                found,
                needed: sysdb::DBOS_SCHEMA_VERSION,
            });
        }
        if !sys.can_listen() {
            if !sys.is_embedded() {
                log_poll_only();
            }
            return Ok(());
        }
        self.add_child(listener_spec(&self.shared, sys)).await
    }

    async fn add_child(&self, child: ChildSpec) -> Result<()> {
        ractor::call!(self.supervisor, SupervisorMsg::AddChild, child)
            .map_err(|e| Error::Fatal(e.to_string()))?
            .map_err(Error::Fatal)
    }

    /// Brings the queue actors in line with the queue definitions now.
    pub(crate) async fn reconcile(&self) -> Result<()> {
        let reconcile = |tx| SupervisorMsg::Reconcile(Some(tx));
        match self.supervisor.call(reconcile, None).await {
            Ok(ractor::rpc::CallResult::Success(result)) => {
                result.map_err(|e| Error::Database(DbError::Transient(e)))
            }
            Ok(_) | Err(_) => Err(Error::Shutdown),
        }
    }

    /// Drains the tree within `grace` and stops it, database last.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        let timeout = grace.as_millis() as u64 + 30_000;
        let _ = ractor::call_t!(self.supervisor, SupervisorMsg::Shutdown, timeout, grace);
        self.supervisor.kill();
        self.stop_evictions();
        self.shared.db.close();
        self.sys.close().await;
    }

    /// Ends the evicted workflows' timer and drops their entries: their rows stay `PENDING`,
    /// recovered at the next launch.
    fn stop_evictions(&self) {
        if let Some(task) = &self.evictions {
            task.abort();
        }
        self.shared.signals.evicted.clear();
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Without a shutdown, stop everything now: no actor or task outlives the runtime.
        self.supervisor.kill();
        self.stop_evictions();
        self.shared.db.close();
        self.sys.close_now();
        self.shared.state.send_if_modified(|s| {
            let changed = matches!(s, RunState::Running | RunState::Stopping);
            if changed {
                *s = RunState::Stopped;
            }
            changed
        });
    }
}

/// The evicted workflows' timer: each one woken or due goes back to its queue actor.
async fn evictions(shared: SharedRef) {
    let resume = |parked: Parked| {
        let queue = shared
            .directory
            .queues
            .get(parked.queue())
            .map(|q| q.clone());
        let (d, slot) = parked.into_dispatch();
        let id = d.id.clone();
        let sent = queue.is_some_and(|q| q.send_message(QueueRequest::Resume(d, slot)).is_ok());
        if !sent {
            tracing::warn!(workflow_id = %id,
                "an evicted workflow's queue is gone here; it stays PENDING for recovery");
        }
    };
    shared.signals.evicted.run(&shared.residents, resume).await
}

/// Takes this executor's liveness lock, before anything is written: a launch under an id live
/// elsewhere fails here. A relaunch right after a crash may find its old session not yet
/// ended by the server, so a held lock is tried again for a second before it is refused.
async fn hold(shared: &SharedRef, sys: &Arc<dyn Store>) -> Result<Box<dyn sysdb::Lease>> {
    let (id, fleet) = (&shared.config.executor_id, shared.config.fleet);
    for attempt in 0..10 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let proved = std::time::Instant::now();
        if let Some(lease) = sys.hold(id, fleet.server_timeout_ms()).await? {
            // Only a lease the fleet actor keeps pinging may bound the runs.
            if lease.expires() {
                shared.liveness.renew(proved, fleet.lease);
            }
            return Ok(lease);
        }
    }
    Err(Error::ExecutorInUse {
        executor_id: id.clone(),
    })
}

/// This executor's roster row.
pub(crate) fn member(config: &Config) -> sysdb::Member {
    sysdb::Member {
        executor_id: config.executor_id.clone(),
        host: crate::engine::fleet::host_name(),
        pid: i64::from(std::process::id()),
        app_name: config.app_name.clone(),
        app_version: config.app_version.clone(),
        lease_ms: config.fleet.lease.as_millis() as i64,
    }
}

/// Writes a queue definition (`replace`: overwrite one that exists). `None`: it existed.
pub(crate) async fn put_queue(
    shared: &SharedRef,
    queue: Queue,
    replace: bool,
) -> Result<Option<bool>> {
    queue.validate()?;
    let app = shared.config.app_name.clone();
    let name = queue.name.clone();
    let put = shared
        .db
        .call_with((queue, app), move |db, (queue, app)| async move {
            db.put_queue(&queue, app.as_deref(), replace).await
        })
        .await?;
    shared.directory.queue_names.insert(name);
    Ok(put)
}

async fn start_supervisor(
    shared: &SharedRef,
    sys: &Arc<dyn Store>,
    policy: RestartPolicy,
    queues: Option<QueueSet>,
    stats: Arc<DbStats>,
    restarts: Arc<AtomicU64>,
) -> Result<ActorRef<SupervisorMsg>> {
    let state = shared.state.clone();
    let args = SupervisorArgs {
        children: vec![database_spec(shared, sys, stats)],
        queues,
        policy,
        db: Some(shared.db.clone()),
        on_fatal: Arc::new(move |reason| {
            state.send_replace(RunState::Fatal(reason));
        }),
        restarts,
    };
    let (supervisor, _) = Actor::spawn(None, Supervisor, args)
        .await
        .map_err(|e| Error::Fatal(format!("cannot start the supervisor: {e}")))?;
    Ok(supervisor)
}

fn database_spec(shared: &SharedRef, sys: &Arc<dyn Store>, stats: Arc<DbStats>) -> ChildSpec {
    let (db, sys) = (shared.db.clone(), sys.clone());
    ChildSpec {
        name: "database".into(),
        restart: Restart::Permanent,
        role: Role::Database,
        spawn: Arc::new(move |sup, _| {
            let (db, sys, stats) = (db.clone(), sys.clone(), stats.clone());
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, Database, (sys, stats), sup).await?;
                db.set(Some(actor.get_derived()));
                Ok(actor.get_cell())
            })
        }),
    }
}

fn fleet_spec(shared: &SharedRef, sys: &Arc<dyn Store>, lease: Box<dyn sysdb::Lease>) -> ChildSpec {
    let (shared, sys) = (shared.clone(), sys.clone());
    // The first start keeps the launch's lease; a restart takes the lock again.
    let lease = Arc::new(std::sync::Mutex::new(Some(lease)));
    ChildSpec {
        name: "fleet".into(),
        restart: Restart::Permanent,
        role: Role::Other,
        spawn: Arc::new(move |sup, _| {
            let args = FleetArgs {
                shared: shared.clone(),
                sys: sys.clone(),
                lease: lease.lock().ok().and_then(|mut l| l.take()),
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, FleetActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

/// The one line saying why nothing listens (the URL names a transaction pooler).
fn log_poll_only() {
    tracing::info!(
        "no LISTEN behind a transaction pooler (pooler=transaction): waits and queues poll \
         (messages and events within 1 s, other processes' enqueues within the queue's \
         polling interval)"
    );
}

fn listener_spec(shared: &SharedRef, sys: &Arc<dyn Store>) -> ChildSpec {
    let (shared, sys) = (shared.clone(), sys.clone());
    ChildSpec {
        name: "listener".into(),
        restart: Restart::Permanent,
        role: Role::Other,
        spawn: Arc::new(move |sup, _| {
            let args = ListenerArgs {
                shared: shared.clone(),
                sys: sys.clone(),
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, ListenerActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

fn scheduler_spec(shared: &SharedRef, fired: Arc<AtomicU64>) -> ChildSpec {
    let shared = shared.clone();
    ChildSpec {
        name: "scheduler".into(),
        restart: Restart::Permanent,
        role: Role::Other,
        spawn: Arc::new(move |sup, _| {
            let args = SchedulerArgs {
                shared: shared.clone(),
                fired: fired.clone(),
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, SchedulerActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

fn sweep_spec(shared: &SharedRef) -> ChildSpec {
    let shared = shared.clone();
    ChildSpec {
        name: "cancel sweep".into(),
        restart: Restart::Permanent,
        role: Role::Other,
        spawn: Arc::new(move |sup, _| {
            let args = SweepArgs {
                shared: shared.clone(),
                every: shared.config.cancel_sweep,
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, SweepActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

fn retention_spec(shared: &SharedRef, policy: Retention) -> ChildSpec {
    let shared = shared.clone();
    ChildSpec {
        name: "retention".into(),
        restart: Restart::Permanent,
        role: Role::Other,
        spawn: Arc::new(move |sup, _| {
            let args = RetentionArgs {
                shared: shared.clone(),
                policy,
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, RetentionActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

/// The queues this executor serves: the application's definitions (filtered by the listen
/// list) and the internal queue.
fn queue_set(shared: &SharedRef) -> QueueSet {
    let (loader, spawner) = (shared.clone(), shared.clone());
    QueueSet {
        load: Arc::new(move || {
            let shared = loader.clone();
            Box::pin(async move {
                let app = shared.config.app_name.clone();
                let defs = shared
                    .db
                    .call_with(app, move |db, app| async move {
                        db.list_queues(app.as_deref()).await
                    })
                    .await?;
                shared
                    .directory
                    .queue_names
                    .retain(|n| defs.iter().any(|q| q.name == *n));
                for q in &defs {
                    shared.directory.queue_names.insert(q.name.clone());
                }
                let listen = shared.config.listen_queues.as_ref();
                let mut served: Vec<Queue> = defs
                    .into_iter()
                    .filter(|q| listen.is_none_or(|l| l.contains(&q.name)))
                    .collect();
                shared.directory.queue_defs.clear();
                for q in &served {
                    shared
                        .directory
                        .queue_defs
                        .insert(q.name.clone(), q.clone());
                }
                served.push(Queue::internal(shared.config.internal_poll));
                Ok(served)
            })
        }),
        spec: Arc::new(move |def| queue_spec(&spawner, def)),
        every: shared.config.reconcile_every,
    }
}

fn queue_spec(shared: &SharedRef, def: Queue) -> ChildSpec {
    let shared = shared.clone();
    ChildSpec {
        name: format!("queue:{}", def.name),
        restart: Restart::Permanent,
        role: Role::Queue,
        spawn: Arc::new(move |sup, restarts| {
            let args = QueueArgs {
                shared: shared.clone(),
                def: def.clone(),
                restarts,
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, QueueActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

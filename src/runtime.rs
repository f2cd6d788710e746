//! The runtime: the public handle an embedding service holds.
//!
//! This is the composition root, the one core module that names actor types: `launch` starts
//! the supervisor with the database actor, migrates, recovers this executor's unfinished
//! workflows, and only then starts the queue actors that claim work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use ractor::{Actor, ActorRef};
use serde::Serialize;
use tokio::sync::watch;

use crate::actors::database::{DatabaseActor, DbStats};
use crate::actors::queue::{QueueActor, QueueArgs};
use crate::actors::restart::{Restart, RestartPolicy};
use crate::actors::supervisor::{ChildSpec, Role, Supervisor, SupervisorArgs, SupervisorMsg};
use crate::builder::RuntimeBuilder;
use crate::codec;
use crate::completion::Completions;
use crate::db::Db;
use crate::dispatch::{Dispatch, QueueRequest};
use crate::error::{Error, Result};
use crate::handle::WorkflowHandle;
use crate::metrics;
use crate::registry::Registry;
use crate::shared::{Config, RunState, Shared, SharedRef};
use crate::sysdb::{self, NewWorkflow, StartOutcome, SysDb, INTERNAL_QUEUE};

/// Options for starting one workflow.
#[derive(Debug, Clone, Default)]
pub struct WorkflowOptions {
    id: Option<String>,
}

impl WorkflowOptions {
    /// Options with a chosen workflow id: starting the same id again returns the same workflow.
    pub fn with_id(id: impl Into<String>) -> WorkflowOptions {
        WorkflowOptions {
            id: Some(id.into()),
        }
    }
}

/// Faults a test can inject (see `Runtime::inject_fault`).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Fault {
    /// The database actor panics.
    PanicDatabase,
    /// The named queue's actor panics (`_dbos_internal_queue` runs direct starts).
    PanicQueue(String),
}

/// Counters of the runtime's database traffic and supervision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Batched statements the database actor sent (each one statement and one commit).
    pub db_flushes: u64,
    /// Requests those statements carried.
    pub db_batched_requests: u64,
    /// Unbatched calls (reads, claims, recovery).
    pub db_calls: u64,
    /// Lane connections opened (the first one per lane, then one per connection loss).
    pub db_connections_opened: u64,
    /// Restarts of permanent actors (database, queues).
    pub actor_restarts: u64,
}

/// A running stead runtime, embedded in a service. Cloning shares it; dropping the last clone
/// without [`Runtime::shutdown`] kills its actors at once (workflows stay `PENDING` and are
/// recovered by the next launch).
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    shared: SharedRef,
    supervisor: ActorRef<SupervisorMsg>,
    stats: Arc<DbStats>,
    restarts: Arc<AtomicU64>,
    /// Closed when the runtime stops, which also ends the pool's maintenance task.
    pool: sqlx::PgPool,
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Starts the actor tree on a connected database, then runs the launch steps.
    pub(crate) async fn launch(
        config: Config,
        registry: Registry,
        sys: SysDb,
        db_retry_timeout: Duration,
        restart: RestartPolicy,
    ) -> Result<Runtime> {
        let (state, _) = watch::channel(RunState::Running);
        let shared: SharedRef = Arc::new(Shared {
            config,
            registry,
            db: Db::new(db_retry_timeout),
            completions: Completions::default(),
            state,
            queues: DashMap::new(),
        });
        let stats = Arc::new(DbStats::default());
        let pool = sys.pool.clone();
        let restarts = Arc::new(AtomicU64::new(0));
        let supervisor =
            start_supervisor(&shared, sys, stats.clone(), restarts.clone(), restart).await?;
        let runtime = Runtime {
            inner: Arc::new(Inner {
                shared,
                supervisor,
                stats,
                restarts,
                pool,
            }),
        };
        runtime.inner.prepare().await?;
        Ok(runtime)
    }

    /// Starts a registered workflow now, in this process. Starting an id that exists returns a
    /// handle on the existing workflow (its result, not a second run).
    pub async fn start<I: Serialize>(
        &self,
        workflow: &str,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle> {
        let shared = &self.inner.shared;
        self.check_running()?;
        let entry = shared
            .registry
            .get(workflow)
            .ok_or_else(|| Error::UnknownWorkflow(workflow.to_owned()))?;
        let json = codec::encode(&input, &format!("the input of workflow {workflow:?}"))?;
        entry.check_input(&json)?;
        let id = match options.id {
            Some(id) => {
                crate::validate_name(&id, "workflow id")?;
                id
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let owner = uuid::Uuid::new_v4().to_string();
        let inputs = codec::encode_inputs(&json);
        let new = NewWorkflow {
            id: id.clone(),
            name: workflow.to_owned(),
            owner: owner.clone(),
            inputs: inputs.clone(),
            executor_id: shared.config.executor_id.clone(),
            app_version: shared.config.app_version.clone(),
            app_name: shared.config.app_name.clone(),
        };
        match shared.db.start(new).await? {
            StartOutcome::Created => {
                metrics::workflow_started(workflow);
                shared.completions.slot(&id);
                self.dispatch(Dispatch {
                    id: id.clone(),
                    name: workflow.to_owned(),
                    owner,
                    attempts: 1,
                    inputs: Some(inputs),
                    serialization: Some(sysdb::PORTABLE_JSON.into()),
                    fresh: true,
                    restarts: 0,
                });
            }
            StartOutcome::Existing { name, .. } if name != workflow => {
                return Err(Error::WorkflowConflict {
                    id,
                    existing: name,
                    requested: workflow.to_owned(),
                })
            }
            StartOutcome::Existing { .. } => {}
        }
        Ok(WorkflowHandle::new(id, shared.clone()))
    }

    /// A handle on any workflow by id (it may run anywhere, or have finished).
    pub fn handle(&self, id: impl Into<String>) -> WorkflowHandle {
        WorkflowHandle::new(id.into(), self.inner.shared.clone())
    }

    /// This runtime's executor id.
    pub fn executor_id(&self) -> &str {
        &self.inner.shared.config.executor_id
    }

    /// This runtime's application version.
    pub fn app_version(&self) -> &str {
        &self.inner.shared.config.app_version
    }

    /// Fault injection for tests: makes an actor panic as if its state were poisoned.
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: Fault) -> bool {
        match fault {
            Fault::PanicDatabase => self.inner.shared.db.inject_panic(),
            Fault::PanicQueue(name) => {
                let queue = self.inner.shared.queues.get(&name).map(|q| q.clone());
                queue.is_some_and(|q| q.send_message(QueueRequest::Panic).is_ok())
            }
        }
    }

    /// Counters of database traffic and actor restarts so far.
    pub fn stats(&self) -> RuntimeStats {
        let s = &self.inner.stats;
        RuntimeStats {
            db_flushes: s.flushes.load(Ordering::Relaxed),
            db_batched_requests: s.batched_requests.load(Ordering::Relaxed),
            db_calls: s.calls.load(Ordering::Relaxed),
            db_connections_opened: s.connections_opened.load(Ordering::Relaxed),
            actor_restarts: self.inner.restarts.load(Ordering::Relaxed),
        }
    }

    /// Stops gracefully: queues stop claiming, running workflows get `grace` to finish, the rest
    /// are stopped and stay `PENDING` (the next launch recovers them), pending writes are
    /// flushed, and the database actor stops last.
    pub async fn shutdown(&self, grace: Duration) -> Result<()> {
        let shared = &self.inner.shared;
        if !shared.state.send_if_modified(|s| {
            let running = *s == RunState::Running;
            if running {
                *s = RunState::Stopping;
            }
            running
        }) {
            return self.stopped().await;
        }
        let _ = ractor::call_t!(
            self.inner.supervisor,
            SupervisorMsg::Shutdown,
            grace.as_millis() as u64 + 30_000,
            grace
        );
        self.inner.supervisor.kill();
        shared.db.close();
        self.inner.pool.close().await;
        shared.state.send_replace(RunState::Stopped);
        Ok(())
    }

    /// Resolves when the runtime has stopped: `Ok` after a shutdown, `Err(Fatal)` when a
    /// permanent actor kept failing and the supervisor gave up.
    pub async fn stopped(&self) -> Result<()> {
        let mut rx = self.inner.shared.state.subscribe();
        let state = rx
            .wait_for(|s| matches!(s, RunState::Stopped | RunState::Fatal(_)))
            .await
            .map(|s| s.clone())
            .unwrap_or(RunState::Stopped);
        match state {
            RunState::Fatal(reason) => Err(Error::Fatal(reason)),
            _ => Ok(()),
        }
    }

    fn check_running(&self) -> Result<()> {
        match &*self.inner.shared.state.borrow() {
            RunState::Running => Ok(()),
            RunState::Fatal(reason) => Err(Error::Fatal(reason.clone())),
            RunState::Stopping | RunState::Stopped => Err(Error::Shutdown),
        }
    }

    /// Hands a started workflow to the internal queue actor. If that actor is restarting, its
    /// successor takes the workflow back from the table, so a failed send loses nothing.
    fn dispatch(&self, d: Dispatch) {
        let queue = self
            .inner
            .shared
            .queues
            .get(INTERNAL_QUEUE)
            .map(|q| q.clone());
        let sent = queue.is_some_and(|q| q.send_message(QueueRequest::Run(d)).is_ok());
        if !sent {
            tracing::debug!("internal queue restarting; its take-back will run the workflow");
        }
    }
}

impl Inner {
    /// Launch steps that need the database actor: migrate, recover, then start claiming.
    async fn prepare(&self) -> Result<()> {
        let shared = &self.shared;
        let schema = shared.config.schema.clone();
        let migrated = shared
            .db
            .call(|db| async move {
                let mut conn = db.pool.acquire().await?;
                sysdb::migrate(&mut conn, &db.sql.schema).await
            })
            .await
            .map_err(|e| Error::Migration {
                schema: schema.clone(),
                reason: e.to_string(),
            })?;
        tracing::debug!(?migrated, "system database ready");
        let recover_from = shared.clone();
        let recovered = shared
            .db
            .call(move |db| {
                let shared = recover_from.clone();
                async move { sysdb::recover(&db.pool, &db.sql, &shared.config.executor()).await }
            })
            .await?;
        if recovered > 0 {
            tracing::info!(recovered, executor = %shared.config.executor_id, "recovering workflows");
        }
        let spec = queue_spec(shared, INTERNAL_QUEUE);
        ractor::call!(self.supervisor, SupervisorMsg::AddChild, spec)
            .map_err(|e| Error::Fatal(e.to_string()))?
            .map_err(Error::Fatal)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without a shutdown, stop everything now: no actor or task outlives the runtime.
        self.supervisor.kill();
        self.shared.db.close();
        // Marks the pool closed now (the returned future only waits for connections to close).
        drop(self.pool.close());
        self.shared.state.send_if_modified(|s| {
            let changed = matches!(s, RunState::Running | RunState::Stopping);
            if changed {
                *s = RunState::Stopped;
            }
            changed
        });
    }
}

async fn start_supervisor(
    shared: &SharedRef,
    sys: SysDb,
    stats: Arc<DbStats>,
    restarts: Arc<AtomicU64>,
    policy: RestartPolicy,
) -> Result<ActorRef<SupervisorMsg>> {
    let db = shared.db.clone();
    let db_stats = stats.clone();
    let database = ChildSpec {
        name: "database".into(),
        restart: Restart::Permanent,
        role: Role::Database,
        spawn: Arc::new(move |sup, _| {
            let (db, sys, stats) = (db.clone(), sys.clone(), db_stats.clone());
            Box::pin(async move {
                let (actor, _) =
                    Actor::spawn_linked(None, DatabaseActor, (sys, stats), sup).await?;
                db.set(Some(actor.get_derived()));
                Ok(actor.get_cell())
            })
        }),
    };
    let state = shared.state.clone();
    let args = SupervisorArgs {
        children: vec![database],
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

fn queue_spec(shared: &SharedRef, name: &str) -> ChildSpec {
    let (shared, queue) = (shared.clone(), name.to_owned());
    ChildSpec {
        name: format!("queue:{name}"),
        restart: Restart::Permanent,
        role: Role::Queue,
        spawn: Arc::new(move |sup, restarts| {
            let args = QueueArgs {
                shared: shared.clone(),
                name: queue.clone(),
                restarts,
            };
            Box::pin(async move {
                let (actor, _) = Actor::spawn_linked(None, QueueActor, args, sup).await?;
                Ok(actor.get_cell())
            })
        }),
    }
}

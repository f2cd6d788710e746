//! The runtime: the public handle an embedding service holds, and its builder.
//!
//! This is the composition root, the one core module that names actor types: `launch` connects,
//! starts the supervisor with the database actor, migrates, recovers this executor's unfinished
//! workflows, and only then starts the queue actors that claim work.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use ractor::{Actor, ActorRef};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

use crate::actors::database::{DatabaseActor, DbStats};
use crate::actors::queue::{QueueActor, QueueArgs};
use crate::actors::restart::{Restart, RestartPolicy};
use crate::actors::supervisor::{ChildSpec, Role, Supervisor, SupervisorArgs, SupervisorMsg};
use crate::codec;
use crate::completion::Completions;
use crate::context::Context;
use crate::db::Db;
use crate::dispatch::{Dispatch, QueueRequest};
use crate::error::{Error, Result};
use crate::handle::WorkflowHandle;
use crate::metrics;
use crate::registry::{Registry, WorkflowConfig};
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

/// Builds and launches a [`Runtime`].
pub struct RuntimeBuilder {
    database_url: Option<String>,
    schema: String,
    app_name: Option<String>,
    app_version: Option<String>,
    executor_id: Option<String>,
    pool_size: u32,
    connect_timeout: Duration,
    db_retry_timeout: Duration,
    restart: RestartPolicy,
    internal_poll: Duration,
    registry: Registry,
    error: Option<Error>,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            database_url: None,
            schema: "dbos".into(),
            app_name: None,
            app_version: None,
            executor_id: None,
            pool_size: 10,
            connect_timeout: Duration::from_secs(10),
            db_retry_timeout: Duration::from_secs(30),
            restart: RestartPolicy::default(),
            internal_poll: Duration::from_secs(1),
            registry: Registry::default(),
            error: None,
        }
    }
}

impl RuntimeBuilder {
    /// The system database. Without it, `STEAD_DATABASE_URL`, then `DATABASE_URL`, is used.
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// The schema of the system tables (default `dbos`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The application name written to `application_name`; claims and recovery are scoped by it.
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = Some(name.into());
        self
    }

    /// The application version. Default: `DBOS__APPVERSION`, else derived from the registered
    /// workflow names.
    pub fn app_version(mut self, version: impl Into<String>) -> Self {
        self.app_version = Some(version.into());
        self
    }

    /// This executor's id. Default: `DBOS__VMID`, else `local`. Give each live process of a
    /// fleet its own: recovery takes back every `PENDING` workflow of this id.
    pub fn executor_id(mut self, id: impl Into<String>) -> Self {
        self.executor_id = Some(id.into());
        self
    }

    /// The most pooled connections for unbatched calls (the write lanes keep their own).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// How long to wait for the database when connecting.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a call keeps retrying a lost connection before the workflow crashes (and is
    /// restarted from its checkpoints).
    pub fn db_retry_timeout(mut self, timeout: Duration) -> Self {
        self.db_retry_timeout = timeout;
        self
    }

    /// How the supervisor restarts the database and queue actors.
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.restart = policy;
        self
    }

    /// How often the internal queue is polled for recovered, resumed or forked workflows.
    pub fn internal_queue_poll(mut self, every: Duration) -> Self {
        self.internal_poll = every;
        self
    }

    /// Registers a workflow: `async fn(Context, I) -> Result<O, E>` with serde `I` and `O`.
    pub fn workflow<F, Fut, I, O, E>(self, name: &str, f: F) -> Self
    where
        F: Fn(Context, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, E>> + Send + 'static,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<Box<dyn StdError + Send + Sync>> + Send + 'static,
    {
        self.workflow_with(name, WorkflowConfig::default(), f)
    }

    /// Registers a workflow with its own settings.
    pub fn workflow_with<F, Fut, I, O, E>(
        mut self,
        name: &str,
        config: WorkflowConfig,
        f: F,
    ) -> Self
    where
        F: Fn(Context, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, E>> + Send + 'static,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<Box<dyn StdError + Send + Sync>> + Send + 'static,
    {
        if let Err(e) = self.registry.add(name, f, config) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// Connects, migrates, recovers this executor's unfinished workflows and starts running.
    pub async fn launch(self) -> Result<Runtime> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let url = resolve_url(self.database_url, env_var)?;
        sysdb::validate_schema(&self.schema)?;
        let config = Config {
            schema: self.schema,
            app_name: self.app_name,
            app_version: self
                .app_version
                .or_else(|| env_var("DBOS__APPVERSION"))
                .unwrap_or_else(|| derive_version(&self.registry)),
            executor_id: self
                .executor_id
                .or_else(|| env_var("DBOS__VMID"))
                .unwrap_or_else(|| "local".into()),
            internal_poll: self.internal_poll,
            claim_batch: 1000,
        };
        let sys =
            SysDb::connect(&url, &config.schema, self.pool_size, self.connect_timeout).await?;
        let (state, _) = watch::channel(RunState::Running);
        let shared: SharedRef = Arc::new(Shared {
            config,
            registry: self.registry,
            db: Db::new(self.db_retry_timeout),
            completions: Completions::default(),
            state,
            queues: DashMap::new(),
        });
        let stats = Arc::new(DbStats::default());
        let pool = sys.pool.clone();
        let supervisor = start_supervisor(&shared, sys, stats.clone(), self.restart).await?;
        let runtime = Runtime {
            inner: Arc::new(Inner {
                shared,
                supervisor,
                stats,
                pool,
            }),
        };
        runtime.inner.prepare().await?;
        Ok(runtime)
    }
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
    /// Closed when the runtime stops, which also ends the pool's maintenance task.
    pool: sqlx::PgPool,
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
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

    /// Counters of database traffic and actor restarts so far.
    pub fn stats(&self) -> RuntimeStats {
        let s = &self.inner.stats;
        RuntimeStats {
            db_flushes: s.flushes.load(Ordering::Relaxed),
            db_batched_requests: s.batched_requests.load(Ordering::Relaxed),
            db_calls: s.calls.load(Ordering::Relaxed),
            db_connections_opened: s.connections_opened.load(Ordering::Relaxed),
            actor_restarts: s.actor_restarts.load(Ordering::Relaxed),
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
    policy: RestartPolicy,
) -> Result<ActorRef<SupervisorMsg>> {
    let db = shared.db.clone();
    let db_stats = stats.clone();
    let database = ChildSpec {
        name: "database".into(),
        restart: Restart::Permanent,
        role: Role::Database,
        spawn: Arc::new(move |sup, restarts| {
            let (db, sys, stats) = (db.clone(), sys.clone(), db_stats.clone());
            Box::pin(async move {
                if restarts > 0 {
                    stats.actor_restarts.fetch_add(1, Ordering::Relaxed);
                }
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

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn resolve_url(configured: Option<String>, env: fn(&str) -> Option<String>) -> Result<String> {
    configured
        .or_else(|| env("STEAD_DATABASE_URL"))
        .or_else(|| env("DATABASE_URL"))
        .ok_or_else(|| {
            Error::Config(
                "no system database: call .database_url(..) or set STEAD_DATABASE_URL or \
                 DATABASE_URL"
                    .into(),
            )
        })
}

/// A stable version id from the registered workflow names (FNV-1a, so it never changes between
/// builds or toolchains for the same set of workflows).
fn derive_version(registry: &Registry) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for name in registry.names() {
        for byte in name.bytes().chain(std::iter::once(b'\n')) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn noop(_: Context, _: ()) -> Result<()> {
        Ok(())
    }

    #[test]
    fn the_derived_version_depends_only_on_the_workflow_names() {
        let mut a = Registry::default();
        a.add("b", noop, WorkflowConfig::default()).unwrap();
        a.add("a", noop, WorkflowConfig::default()).unwrap();
        let mut b = Registry::default();
        b.add("a", noop, WorkflowConfig::default()).unwrap();
        b.add("b", noop, WorkflowConfig::default()).unwrap();
        assert_eq!(derive_version(&a), derive_version(&b));
        b.add("c", noop, WorkflowConfig::default()).unwrap();
        assert_ne!(derive_version(&a), derive_version(&b));
        assert_eq!(derive_version(&a).len(), 16);
    }

    #[test]
    fn the_url_comes_from_the_builder_then_stead_then_database_url() {
        fn none(_: &str) -> Option<String> {
            None
        }
        fn both(name: &str) -> Option<String> {
            Some(format!("from-{name}"))
        }
        fn generic(name: &str) -> Option<String> {
            (name == "DATABASE_URL").then(|| "generic".to_string())
        }
        assert_eq!(resolve_url(Some("b".into()), both).unwrap(), "b");
        assert_eq!(resolve_url(None, both).unwrap(), "from-STEAD_DATABASE_URL");
        assert_eq!(resolve_url(None, generic).unwrap(), "generic");
        let err = resolve_url(None, none).unwrap_err();
        assert!(matches!(err, Error::Config(_)));
        assert!(err.to_string().contains("STEAD_DATABASE_URL"), "{err}");
    }
}

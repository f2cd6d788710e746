//! The runtime's builder: settings, workflow registration, and where each setting's default
//! comes from (the builder, then the environment, then a derived value).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::base::limits::{HistoryLimits, DEFAULT_MAX_VALUE_BYTES};
use crate::base::queue::Queue;
use crate::base::workflow::Workflow;
use crate::engine::config::{Config, RestartPolicy};
use crate::engine::fleet::FleetSettings;
use crate::engine::registry::{Registry, WorkflowConfig, WorkflowFn};
use crate::engine::retention::Retention;
use crate::engine::schedule::Schedule;
use crate::error::{Error, Result};
use crate::runtime::launch::Declared;
use crate::runtime::Runtime;
use crate::sysdb;

/// Builds and launches a [`Runtime`].
pub struct RuntimeBuilder {
    database_url: Option<String>,
    pool: Option<sysdb::DatabasePool>,
    schema: String,
    app_name: Option<String>,
    app_version: Option<String>,
    executor_id: Option<String>,
    pool_size: u32,
    connect_timeout: Duration,
    db_retry_timeout: Duration,
    restart: RestartPolicy,
    internal_poll: Duration,
    queues: Vec<Queue>,
    listen_queues: Option<Vec<String>>,
    queue_refresh: Duration,
    schedules: Vec<Schedule>,
    schedule_refresh: Duration,
    retention: Option<Retention>,
    cancel_sweep: Duration,
    evict_after: Option<Duration>,
    max_resident: Option<usize>,
    fleet: FleetSettings,
    history: HistoryLimits,
    max_value_bytes: usize,
    registry: Registry,
    error: Option<Error>,
}

// Here rather than in runtime.rs, so the builder depends on the runtime and never the reverse.
impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            database_url: None,
            pool: None,
            schema: sysdb::DEFAULT_SCHEMA.into(),
            app_name: None,
            app_version: None,
            executor_id: None,
            pool_size: 10,
            connect_timeout: Duration::from_secs(10),
            db_retry_timeout: Duration::from_secs(30),
            restart: RestartPolicy::default(),
            internal_poll: Duration::from_secs(1),
            queues: Vec::new(),
            listen_queues: None,
            queue_refresh: Duration::from_secs(10),
            schedules: Vec::new(),
            schedule_refresh: Duration::from_secs(10),
            retention: None,
            cancel_sweep: crate::engine::config::DEFAULT_CANCEL_SWEEP,
            evict_after: Some(crate::engine::config::DEFAULT_EVICT_AFTER),
            max_resident: Some(crate::engine::residents::DEFAULT_MAX_RESIDENT),
            fleet: FleetSettings::default(),
            history: HistoryLimits::default(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
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

    /// Runs on a pool the application already has (`sqlx::PgPool` or `sqlx::SqlitePool`)
    /// instead of connecting to a URL; it takes precedence over any URL. Stead borrows its
    /// connections for unbatched calls and (Postgres) holds one for LISTEN; it opens the write
    /// lanes' connections itself, with the pool's connect options. See
    /// [`DatabasePool`](crate::runtime::DatabasePool) for the details. Shutdown leaves the pool open.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stead::{Context, Runtime, WorkflowOptions};
    ///
    /// async fn greet(ctx: Context, name: String) -> stead::Result<String> {
    ///     ctx.step("compose", || async move { Ok(format!("hello {name}")) }).await
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = std::env::temp_dir().join(format!("stead-doc-pool-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let file = dir.join("app.sqlite");
    /// // The application's own pool (here over a SQLite file; a `PgPool` works the same way).
    /// let options = sqlx::sqlite::SqliteConnectOptions::new()
    ///     .filename(&file)
    ///     .create_if_missing(true);
    /// let pool = sqlx::SqlitePool::connect_with(options).await?;
    /// let runtime = Runtime::builder()
    ///     .pool(pool.clone())
    ///     .workflow("greet", greet)
    ///     .launch()
    ///     .await?;
    /// let handle = runtime
    ///     .start("greet", "ada".to_string(), WorkflowOptions::with_id("greet-ada"))
    ///     .await?;
    /// assert_eq!(handle.result::<String>().await?, "hello ada");
    /// runtime.shutdown(Duration::from_secs(5)).await?;
    /// // The pool is still the application's, and sees stead's tables.
    /// let done: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_status WHERE status = 'SUCCESS'")
    ///     .fetch_one(&pool)
    ///     .await?;
    /// assert_eq!(done, 1);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(()) }
    /// ```
    pub fn pool(mut self, pool: impl Into<sysdb::DatabasePool>) -> Self {
        self.pool = Some(pool.into());
        self
    }

    /// The schema of the system tables (default `dbos`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The application name written to `application_name`; claims, recovery, queues, schedules
    /// and versions are scoped by it. Default: `DBOS_APP_NAME`, else
    /// [`DEFAULT_APP_NAME`](crate::runtime::DEFAULT_APP_NAME)
    /// (`stead`): DBOS apps take unnamed rows for their own, so stead never writes one.
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

    /// This executor's id. Default: `DBOS__VMID`, else `<hostname>-<pid>-<6 random hex>`
    /// (unique per launch). On Postgres no two live processes hold one id: a launch with an id
    /// live elsewhere fails with [`Error::ExecutorInUse`]. A fixed id lets a relaunch recover
    /// its own work at once; any other id's work is adopted by the fleet once it is dead.
    pub fn executor_id(mut self, id: impl Into<String>) -> Self {
        self.executor_id = Some(id.into());
        self
    }

    /// How long one proof of life (a ping every fifth of it) lets this executor start steps;
    /// default 5 s. A process that cannot ping for this long stops its runs (fences), and is
    /// taken for dead by its peers a little later (the lease plus a tenth and 0.5 s after
    /// its last ping, and only once its lock session has ended).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.fleet.lease = lease;
        self
    }

    /// How often this executor looks for dead executors whose work it can adopt; default
    /// 2 s. Their work is adopted at most the lease, its margin and this interval after death.
    pub fn adoption_interval(mut self, every: Duration) -> Self {
        self.fleet.adopt_every = every;
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

    /// How often this executor checks, in one read, whether any workflow it runs was cancelled
    /// (or resumed) by a writer that does not announce it, such as DBOS's CLI or client
    /// (default 1 s). Such a run stops within this interval: its waits are interrupted and its
    /// slot freed; a step body already running finishes, but its result is not recorded.
    /// Cancels by stead itself are announced and stop a run at once.
    pub fn cancel_sweep(mut self, every: Duration) -> Self {
        self.cancel_sweep = every.max(Duration::from_millis(10));
        self
    }

    /// How long a workflow may wait idle in memory (a durable sleep, `recv` or `get_event` with
    /// nothing else in flight) before it is evicted: its actor and body are dropped, its row
    /// stays `PENDING` and owned here, and a timer entry and its wake-up key stand in for it
    /// (under a kilobyte). Its timer, message or event brings it back by replay. Default
    /// 60 s; `None` keeps every waiting workflow resident. Only waits with at least this long
    /// left are evicted.
    pub fn evict_after(mut self, idle: Option<Duration>) -> Self {
        self.evict_after = idle.map(|d| d.max(Duration::from_millis(10)));
        self
    }

    /// How many workflows this process holds in memory at once (default 10,000; `None`:
    /// unbounded). At the bound, waiting workflows are evicted at once rather than after
    /// [`evict_after`](Self::evict_after), and new work waits for room: a direct start from
    /// outside a workflow waits, claims from queues are held back, and enqueues from this
    /// process go to the queue's table (in order). Children started by a workflow never wait, so
    /// the bound is exceeded by at most those and one claim's batch per queue. With the
    /// defaults a million waiting workflows take under 1 GB.
    pub fn max_resident(mut self, bound: Option<usize>) -> Self {
        self.max_resident = bound.map(|b| b.max(1));
        self
    }

    /// How much history one run of a workflow may record (default 50,000 calls and 50 MiB; see
    /// [`HistoryLimits`]); a workflow registered with its own
    /// ([`WorkflowConfig::history_limits`]) uses those instead.
    pub fn history_limits(mut self, limits: HistoryLimits) -> Self {
        self.history = limits;
        self
    }

    /// The largest value recorded, in bytes of its JSON (default 16 MiB): a workflow's input
    /// (a start, an enqueue, a child, a continuation), a step's output, a message sent, an event
    /// set, a stream value written. A larger one fails its call with
    /// [`Error::ValueTooLarge`] before anything of it is written.
    pub fn max_value_bytes(mut self, bytes: usize) -> Self {
        self.max_value_bytes = bytes;
        self
    }

    /// Declares a queue: its row in `queues` is written (replacing any definition) at launch.
    pub fn queue(mut self, queue: Queue) -> Self {
        self.queues.push(queue);
        self
    }

    /// Serves only these queues (the internal queue is always served). Default: every queue of
    /// the application.
    pub fn listen_queues<S: Into<String>>(mut self, queues: impl IntoIterator<Item = S>) -> Self {
        self.listen_queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// How often queue definitions are re-read to follow changes made by other processes
    /// (changes made through this runtime apply at once).
    pub fn queue_refresh(mut self, every: Duration) -> Self {
        self.queue_refresh = every;
        self
    }

    /// Declares a schedule: its row in `workflow_schedules` is written at launch (replacing the
    /// definition of one of the same name, keeping whether it is paused).
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// How often the scheduler re-reads the schedules to follow changes made by other processes
    /// (changes made through this runtime apply at once).
    pub fn schedule_refresh(mut self, every: Duration) -> Self {
        self.schedule_refresh = every;
        self
    }

    /// Garbage-collects finished workflows by this policy, at launch and then periodically.
    pub fn retention(mut self, policy: Retention) -> Self {
        self.retention = Some(policy);
        self
    }

    /// Registers `f` as the workflow `workflow` names. The compiler checks that `f` is an
    /// `async fn(Context, I) -> Result<O, E>` of the reference's `I` and `O`, so starts,
    /// enqueues and child calls made with the reference agree with it (see [`Workflow`]).
    pub fn register<F, I, O>(self, workflow: Workflow<I, O>, f: F) -> Self
    where
        F: WorkflowFn<I, O>,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
    {
        self.register_with(workflow, WorkflowConfig::default(), f)
    }

    /// Like [`register`](RuntimeBuilder::register), with the workflow's own settings.
    pub fn register_with<F, I, O>(
        self,
        workflow: Workflow<I, O>,
        config: WorkflowConfig,
        f: F,
    ) -> Self
    where
        F: WorkflowFn<I, O>,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
    {
        self.workflow_with(workflow.name(), config, f)
    }

    /// Registers a workflow by name: `async fn(Context, I) -> Result<O, E>` with serde `I` and
    /// `O`. Starting it by name checks its input when the call runs; a typed [`Workflow`]
    /// reference ([`register`](RuntimeBuilder::register)) checks it when the code compiles.
    pub fn workflow<F, I, O>(self, name: &str, f: F) -> Self
    where
        F: WorkflowFn<I, O>,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
    {
        self.workflow_with(name, WorkflowConfig::default(), f)
    }

    /// Registers a workflow by name with its own settings.
    pub fn workflow_with<F, I, O>(mut self, name: &str, config: WorkflowConfig, f: F) -> Self
    where
        F: WorkflowFn<I, O>,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
    {
        if let Err(e) = self.registry.add(name, f, config) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// Stores errors of type `E` (a workflow's or a step's) with their serde data, in DBOS's
    /// portable error shape (`name`: the type's name, `message`: its `Display`, `data`: its
    /// JSON), so a caller reads them back as an `E` with [`Error::user_error`] and other SDKs
    /// read the same fields. Without it an error is stored with its name and message only.
    pub fn typed_error<E>(mut self) -> Self
    where
        E: std::error::Error + Serialize + 'static,
    {
        self.registry.errors.add::<E>();
        self
    }

    /// What a replay check needs instead of a launch: the resolved URL, a client's settings, and
    /// the registered workflows.
    pub(crate) fn into_check(self) -> Result<(String, crate::client::ClientOptions, Registry)> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let url = resolve_url(self.database_url, self.app_name.as_deref(), env_var);
        let options = crate::client::ClientOptions {
            schema: self.schema,
            app_name: self.app_name,
            connect_timeout: self.connect_timeout,
        };
        Ok((url, options, self.registry))
    }

    /// What a replay from files needs (feature `testing`): a passive configuration and the
    /// registered workflows; no database.
    #[cfg(feature = "testing")]
    pub(crate) fn into_offline(self) -> Result<(Config, Registry)> {
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok((Config::passive(self.schema, self.app_name), self.registry))
    }

    /// Connects, migrates, recovers this executor's unfinished workflows and starts running.
    pub async fn launch(self) -> Result<Runtime> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let app_name = crate::engine::config::app_name_or_default(self.app_name);
        sysdb::validate_schema(&self.schema)?;
        let mut names = std::collections::HashSet::new();
        for q in &self.queues {
            q.validate()?;
            if !names.insert(q.name.clone()) {
                return Err(Error::QueueExists(q.name.clone()));
            }
        }
        if let Some(policy) = &self.retention {
            policy.validate()?;
        }
        if self.fleet.lease < Duration::from_millis(500) || self.fleet.adopt_every.is_zero() {
            return Err(Error::Config(
                "the lease must be at least 500 ms and the adoption interval above zero".into(),
            ));
        }
        let app_version = self
            .app_version
            .or_else(|| env_var("DBOS__APPVERSION"))
            .unwrap_or_else(|| derive_version(&self.registry));
        crate::names::validate_name(&app_version, "application version")?;
        let executor_id = self
            .executor_id
            .or_else(|| env_var("DBOS__VMID"))
            .unwrap_or_else(crate::engine::fleet::default_executor_id);
        crate::names::validate_name(&executor_id, "executor id")?;
        let config = Config {
            schema: self.schema,
            app_name: Some(app_name),
            app_version,
            executor_id,
            internal_poll: self.internal_poll,
            claim_batch: 1000,
            listen_queues: self.listen_queues,
            reconcile_every: self.queue_refresh,
            executes: true,
            schedule_refresh: self.schedule_refresh,
            cancel_sweep: self.cancel_sweep,
            evict_after: self.evict_after,
            max_resident: self.max_resident,
            fleet: self.fleet,
            history: self.history,
            max_value_bytes: self.max_value_bytes,
        };
        let sys = match self.pool {
            Some(pool) => sysdb::from_pool(pool, &config.schema, self.connect_timeout).await?,
            None => {
                let url = resolve_url(self.database_url, config.app_name.as_deref(), env_var);
                let (size, timeout) = (self.pool_size, self.connect_timeout);
                sysdb::connect(&url, &config.schema, size, timeout, true).await?
            }
        };
        Runtime::launch(
            config,
            self.registry,
            Declared {
                queues: self.queues,
                schedules: self.schedules,
                retention: self.retention,
            },
            sys,
            self.db_retry_timeout,
            self.restart,
        )
        .await
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The configured URL, else the environment's, else the embedded default: a SQLite file in the
/// working directory named after the app.
fn resolve_url(
    configured: Option<String>,
    app: Option<&str>,
    env: fn(&str) -> Option<String>,
) -> String {
    configured
        .or_else(|| env("STEAD_DATABASE_URL"))
        .or_else(|| env("DATABASE_URL"))
        .unwrap_or_else(|| sysdb::default_url(app))
}

/// A stable version id from the registered workflow names (FNV-1a, so it never changes between
/// builds or toolchains for the same set of workflows).
fn derive_version(registry: &Registry) -> String {
    let names = registry
        .names()
        .flat_map(|name| name.bytes().chain([b'\n']));
    format!("{:016x}", crate::base::hash::fnv1a(names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::context::Context;

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
    fn the_url_comes_from_the_builder_then_stead_then_database_url_then_sqlite() {
        fn none(_: &str) -> Option<String> {
            None
        }
        fn both(name: &str) -> Option<String> {
            Some(format!("from-{name}"))
        }
        fn generic(name: &str) -> Option<String> {
            (name == "DATABASE_URL").then(|| "generic".to_string())
        }
        assert_eq!(resolve_url(Some("b".into()), None, both), "b");
        assert_eq!(resolve_url(None, None, both), "from-STEAD_DATABASE_URL");
        assert_eq!(resolve_url(None, None, generic), "generic");
        // Nothing configured: the embedded default, named after the app.
        assert_eq!(resolve_url(None, None, none), "sqlite://stead.sqlite");
        assert_eq!(
            resolve_url(None, Some("shop"), none),
            "sqlite://shop.sqlite"
        );
    }
}

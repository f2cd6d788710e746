//! The client: everything a producer service or an operator needs without running workflow code —
//! enqueue, send, read events and streams, wait for results, manage queues and workflows. It runs a
//! small actor tree (supervisor, database, listener) and never migrates on its own
//! ([`Client::migrate`] is the explicit step).
//!
//! A [`Runtime`](crate::Runtime) has one too ([`Runtime::client`](crate::Runtime::client)), sharing
//! the runtime's actors.
//!
//! This file is the client's core; its feature extensions (`manage`, `batch` with `filter`,
//! `steps`, `observe`, `outbox`, `schedule`, `debounce`, `retention`, `rewind`, `attributes`,
//! `fleet`, `updates`) are `impl Client` blocks in the submodules, built on the core and the
//! feature modules; nothing in the core names them.
//!
//! **What a client checks.** It refuses a schema whose `dbos_migrations` is below 125
//! (`SchemaTooOld`) rather than migrate it. It enqueues workflows by name without knowing them. It
//! never creates a SQLite file (only a runtime and `migrate` do), so a mistyped path is an error,
//! not an empty database. "Not found" is worded once, by `Error`'s `Display` (`workflow "x" not
//! found`), and the CLI and the admin API print it as is.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::base::clock::{millis, now_ms};
use crate::base::codec;
use crate::base::queue::{Queue, WaitingWork};
use crate::base::workflow::WorkflowRef;
use crate::durable::calls::{self, StreamValue};
use crate::engine::config::{Config, RestartPolicy};
use crate::engine::handle::WorkflowHandle;
use crate::engine::registry::Registry;
use crate::engine::shared::{RunState, SharedRef};
use crate::engine::signals;
use crate::engine::start::{self, Target, WorkflowOptions};
use crate::error::{Error, Result};
use crate::runtime::launch::{self, Part, Tree};
use crate::sysdb::{self, QueueDeletion};

mod attributes;
mod batch;
pub(crate) mod debounce;
mod filter;
mod fleet;
#[cfg(feature = "testing")]
mod history;
pub(crate) mod manage;
pub(crate) mod observe;
pub(crate) mod outbox;
pub(crate) mod pause;
mod retention;
mod rewind;
mod schedule;
pub(crate) mod steps;
mod updates;

pub use crate::engine::retention::Retention;
pub use crate::sysdb::{AppVersion, ExecutorInfo, MigrationReport};
pub use batch::{Batch, BatchProgress, DEFAULT_BATCH_PAGE, MAX_BATCH_PAGE};
pub use debounce::DebounceOptions;
pub use filter::WHERE_KEYS;
pub use manage::{ForkOptions, ListWorkflows, WorkflowInfo};
pub use outbox::Message;
pub use steps::{ListSteps, StepInfo, StepPage};
pub use updates::UpdateOptions;

/// Counters of database traffic and supervision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Batched statements the database actor sent (each one statement and one commit).
    pub db_flushes: u64,
    /// Requests those statements carried.
    pub db_batched_requests: u64,
    /// Unbatched calls (reads, recovery, queue definitions).
    pub db_calls: u64,
    /// Lane connections opened (the first one per lane, then one per connection loss).
    pub db_connections_opened: u64,
    /// Restarts of permanent actors (database, listener, scheduler, queues).
    pub actor_restarts: u64,
    /// Scheduled runs this process's scheduler enqueued (not those another executor enqueued
    /// first, nor backfills and triggers).
    pub schedule_firings: u64,
    /// Workflows evicted from memory while waiting (see `RuntimeBuilder::evict_after`).
    pub workflows_evicted: u64,
    /// Workflows with a resident actor in this process.
    pub workflows_resident: u64,
}

/// A connection to a stead (or DBOS) system database that runs no workflows.
///
/// ```no_run
/// # async fn demo() -> stead::Result<()> {
/// let client = stead::Client::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
/// let handle = client
///     .enqueue("orders", "checkout", 17u64, stead::WorkflowOptions::with_id("order-17"))
///     .await?;
/// let receipt: String = handle.result().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) tree: Arc<Tree>,
}

/// Settings of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The schema of the system tables (default `dbos`).
    pub schema: String,
    /// The application the client acts for: its queues, versions and schedules, and the owner
    /// of what it enqueues (onto another application's queue: that application, unless
    /// [`WorkflowOptions::app_name`] says otherwise). Default (`None`): `DBOS_APP_NAME`, else
    /// [`DEFAULT_APP_NAME`](crate::runtime::DEFAULT_APP_NAME), as a runtime's.
    pub app_name: Option<String>,
    /// How long to wait for the database when connecting.
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            schema: sysdb::DEFAULT_SCHEMA.into(),
            app_name: None,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl Client {
    /// Connects to the system database at `url` (schema `dbos`). Fails with
    /// [`Error::SchemaTooOld`] when the database was not migrated (the client never migrates).
    pub async fn connect(url: &str) -> Result<Client> {
        Client::connect_with(url, ClientOptions::default()).await
    }

    /// Connects with explicit settings.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Client> {
        sysdb::validate_schema(&options.schema)?;
        let sys = sysdb::connect(url, &options.schema, 4, options.connect_timeout, false).await?;
        Client::launch(sys, options).await
    }

    /// A client on a pool the application already has (`sqlx::PgPool` or `sqlx::SqlitePool`);
    /// see [`DatabasePool`](crate::runtime::DatabasePool) for which connections stead takes from it.
    /// Shutting the client down leaves the pool open.
    pub async fn from_pool(
        pool: impl Into<sysdb::DatabasePool>,
        options: ClientOptions,
    ) -> Result<Client> {
        let sys = sysdb::from_pool(pool.into(), &options.schema, options.connect_timeout).await?;
        Client::launch(sys, options).await
    }

    async fn launch(sys: Arc<dyn sysdb::Store>, options: ClientOptions) -> Result<Client> {
        let config = Config::passive(options.schema, options.app_name);
        let tree = launch::launch(
            config,
            Registry::default(),
            Part::Client,
            sys,
            Duration::from_secs(30),
            RestartPolicy::default(),
        )
        .await?;
        Ok(Client {
            tree: Arc::new(tree),
        })
    }

    /// Brings schema `options.schema` of the database at `url` to the DBOS 3.4 layout (what a
    /// runtime's launch does, and `stead migrate`), waiting at most `options.connect_timeout`
    /// for the connection. A client never migrates when it connects: this is the explicit step.
    /// Safe to run concurrently with other migrators.
    pub async fn migrate(url: &str, options: &ClientOptions) -> Result<MigrationReport> {
        let schema = options.schema.as_str();
        let db = sysdb::connect(url, schema, 1, options.connect_timeout, true).await?;
        let report = db.migrate().await.map_err(|e| Error::Migration {
            schema: schema.to_owned(),
            reason: e.to_string(),
        });
        db.close().await;
        report
    }

    pub(crate) fn shared(&self) -> &SharedRef {
        &self.tree.shared
    }

    /// Enqueues `workflow` on `queue`; an executor serving the queue runs it within the queue's
    /// limits. `workflow` is a typed [`Workflow<I, O>`] with its `I` (the handle's `result()` is
    /// an `O`), or a name with any serializable input. A client need not have registered it; a
    /// runtime's client refuses a name the runtime has not registered. Enqueueing an id that
    /// exists returns a handle on that workflow.
    ///
    /// Dropping the returned future does not call it off: once begun, the workflow is created
    /// (and runs) as if it had been awaited.
    ///
    /// [`Workflow<I, O>`]: crate::Workflow
    pub async fn enqueue<W, I>(
        &self,
        queue: &str,
        workflow: W,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle<W::Output>>
    where
        W: WorkflowRef<I>,
        I: Serialize,
    {
        let name = workflow.name();
        let json = codec::encode_input(name, &input)?;
        let target = Target::Queue(queue);
        let handle = start::submit(self.shared(), target, name, &json, options).await?;
        Ok(handle.typed())
    }

    /// A handle on any workflow by id (it may run anywhere, or have finished); its result is
    /// read as the type the caller asks for.
    pub fn handle(&self, id: impl Into<String>) -> WorkflowHandle {
        WorkflowHandle::new(id.into(), self.shared().clone())
    }

    /// Reads event `key` of workflow `workflow_id`, waiting up to `timeout` for it to be set.
    pub async fn get_event<T: DeserializeOwned>(
        &self,
        workflow_id: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<T>> {
        let shared = self.shared();
        crate::names::validate_name(workflow_id, "workflow id")?;
        crate::names::validate_text(key, "event key")?;
        let until = now_ms().saturating_add(millis(timeout));
        let check = || calls::read_event(shared, workflow_id, key);
        let key_signal = signals::event_key(workflow_id, key);
        let found = calls::until_found(shared, key_signal, Some(until), None, check).await?;
        found
            .map(|text| codec::decode(Some(&text), "an event value"))
            .transpose()
    }

    /// Follows stream `key` of workflow `workflow_id` from its start: each value as it is
    /// written, ending when the workflow closes the stream (or finishes).
    pub fn read_stream<T: DeserializeOwned>(
        &self,
        workflow_id: &str,
        key: &str,
    ) -> impl Stream<Item = Result<StreamValue<T>>> {
        self.read_stream_from(workflow_id, key, 0)
    }

    /// Like [`Client::read_stream`], from `offset` on.
    pub fn read_stream_from<T: DeserializeOwned>(
        &self,
        workflow_id: &str,
        key: &str,
        offset: u32,
    ) -> impl Stream<Item = Result<StreamValue<T>>> {
        calls::read_stream(self.shared().clone(), workflow_id, key, offset)
    }

    /// Cancels workflow `id`: it becomes `CANCELLED` and stops before its next durable call,
    /// wherever it runs. Its children keep running (see [`Client::cancel_with_children`]).
    pub async fn cancel(&self, id: &str) -> Result<()> {
        self.cancel_tree(id, false).await
    }

    /// Cancels workflow `id` and every workflow it started, recursively.
    pub async fn cancel_with_children(&self, id: &str) -> Result<()> {
        self.cancel_tree(id, true).await
    }

    async fn cancel_tree(&self, id: &str, cascade: bool) -> Result<()> {
        let shared = self.shared();
        start::check_running(shared)?;
        crate::names::validate_name(id, "workflow id")?;
        let target = id.to_owned();
        let done = shared
            .db
            .call_with(target, move |db, target| async move {
                db.cancel(&target, cascade).await
            })
            .await?;
        if !done.exists {
            return Err(Error::NotFound(id.to_owned()));
        }
        for cancelled in &done.ids {
            shared.cancel_local(cancelled, None);
        }
        Ok(())
    }

    /// Defines a new queue; every executor serving it starts an actor for it.
    pub async fn create_queue(&self, queue: Queue) -> Result<()> {
        let name = queue.name.clone();
        match launch::put_queue(self.shared(), queue, false).await? {
            None => Err(Error::QueueExists(name)),
            Some(_) => self.tree.reconcile().await,
        }
    }

    /// Defines a queue or replaces its definition; new limits apply from the next claim.
    pub async fn set_queue(&self, queue: Queue) -> Result<()> {
        launch::put_queue(self.shared(), queue, true).await?;
        self.tree.reconcile().await
    }

    /// Deletes a queue's definition; its actors finish their running workflows, then stop.
    /// Refused with [`Error::QueueNotEmpty`] while workflows wait on it (`ENQUEUED` or
    /// `DELAYED`): nothing would ever run them. See [`Client::delete_queue_with`].
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        self.delete_queue_with(name, WaitingWork::Refuse).await
    }

    /// [`Client::delete_queue`], doing with the workflows that wait on the queue what
    /// `waiting` says: refuse, or cancel them first (a workflow enqueued meanwhile is cancelled
    /// on a later pass; after three passes the deletion is refused).
    pub async fn delete_queue_with(&self, name: &str, waiting: WaitingWork) -> Result<()> {
        let mut left = 0;
        for _ in 0..3 {
            let queue = name.to_owned();
            let found = self
                .shared()
                .db
                .call_with(queue, move |db, queue| async move {
                    db.delete_queue(&queue).await
                })
                .await?;
            match (found, waiting) {
                (QueueDeletion::Missing, _) => return Err(Error::UnknownQueue(name.to_owned())),
                (QueueDeletion::Deleted, _) => return self.tree.reconcile().await,
                (QueueDeletion::Waiting(n), WaitingWork::Refuse) => {
                    return Err(Error::QueueNotEmpty {
                        queue: name.to_owned(),
                        waiting: n,
                    })
                }
                (QueueDeletion::Waiting(n), WaitingWork::Cancel) => {
                    left = n;
                    self.cancel_waiting(name).await?
                }
            }
        }
        Err(Error::QueueNotEmpty {
            queue: name.to_owned(),
            waiting: left,
        })
    }

    /// Cancels every workflow waiting on queue `name`.
    async fn cancel_waiting(&self, name: &str) -> Result<()> {
        let filter = crate::client::ListWorkflows::new()
            .queue(name)
            .status(crate::Status::Enqueued)
            .status(crate::Status::Delayed);
        for w in self.list_workflows(filter).await? {
            match self.cancel(&w.status.id).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The queue definitions of this application.
    pub async fn queues(&self) -> Result<Vec<Queue>> {
        let app = self.shared().config.app_name.clone();
        Ok(self
            .shared()
            .db
            .call_with(app, move |db, app| async move {
                db.list_queues(app.as_deref()).await
            })
            .await?)
    }

    /// Every application's queue definitions (not only this client's), by name, each with the
    /// application it belongs to (`None`: shared by all).
    pub async fn all_queues(&self) -> Result<Vec<(Option<String>, Queue)>> {
        Ok(self
            .shared()
            .db
            .call(|db| async move { db.list_all_queues().await })
            .await?)
    }

    /// Counters of database traffic and actor restarts so far.
    pub fn stats(&self) -> RuntimeStats {
        let s = &self.tree.stats;
        RuntimeStats {
            db_flushes: s.flushes.load(Ordering::Relaxed),
            db_batched_requests: s.batched_requests.load(Ordering::Relaxed),
            db_calls: s.calls.load(Ordering::Relaxed),
            db_connections_opened: s.connections_opened.load(Ordering::Relaxed),
            actor_restarts: self.tree.restarts.load(Ordering::Relaxed),
            schedule_firings: self.tree.fired.load(Ordering::Relaxed),
            workflows_evicted: self.shared().signals.evicted.len() as u64,
            workflows_resident: self.shared().directory.running.len() as u64,
        }
    }

    /// Stops gracefully: queues stop claiming, running workflows get `grace` to finish, the rest
    /// are stopped and stay `PENDING` (the next launch recovers them), pending writes are
    /// flushed, and the database actor stops last.
    pub async fn shutdown(&self, grace: Duration) -> Result<()> {
        let shared = self.shared();
        if !shared.state.send_if_modified(|s| {
            let running = *s == RunState::Running;
            if running {
                *s = RunState::Stopping;
            }
            running
        }) {
            return self.stopped().await;
        }
        self.tree.shutdown(grace).await;
        shared.state.send_replace(RunState::Stopped);
        Ok(())
    }

    /// Resolves when the runtime (or client) has stopped: `Ok` after a shutdown, `Err(Fatal)`
    /// when a permanent actor kept failing and the supervisor gave up.
    pub async fn stopped(&self) -> Result<()> {
        let mut rx = self.shared().state.subscribe();
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
}

//! The runtime: the public handle an embedding service holds. It starts and enqueues workflows,
//! hands out workflow handles and queue actor refs, manages queue definitions, and shuts the
//! actor tree down. The tree itself is built in `launch`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use ractor::DerivedActorRef;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::actors::restart::RestartPolicy;
use crate::builder::RuntimeBuilder;
use crate::calls::{self, StreamValue};
use crate::codec;
use crate::debounce::{self, DebounceOptions};
use crate::dispatch::{self, QueueRequest};
use crate::error::{DbError, Error, Result};
use crate::handle::WorkflowHandle;
use crate::launch::{self, Declared, Tree};
use crate::queue::{Queue, QueueMessage};
use crate::registry::Registry;
use crate::retention::{self, Retention};
use crate::schedule::{self, Backfilled, Schedule, ScheduleInfo, ScheduleStatus};
use crate::shared::{Config, RunState};
use crate::signals;
use crate::start::{self, Target, WorkflowOptions};
use crate::sysdb::{self, SysDb};

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
    /// Unbatched calls (reads, recovery, queue definitions).
    pub db_calls: u64,
    /// Lane connections opened (the first one per lane, then one per connection loss).
    pub db_connections_opened: u64,
    /// Restarts of permanent actors (database, listener, scheduler, queues).
    pub actor_restarts: u64,
    /// Scheduled runs this process's scheduler enqueued (not those another executor enqueued
    /// first, nor backfills and triggers).
    pub schedule_firings: u64,
}

/// A running stead runtime, embedded in a service. Cloning shares it; dropping the last clone
/// without [`Runtime::shutdown`] kills its actors at once (workflows stay `PENDING` and are
/// recovered by the next launch).
#[derive(Clone)]
pub struct Runtime {
    tree: Arc<Tree>,
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    pub(crate) async fn launch(
        config: Config,
        registry: Registry,
        declared: Declared,
        sys: SysDb,
        db_retry_timeout: Duration,
        restart: RestartPolicy,
    ) -> Result<Runtime> {
        let tree =
            launch::launch(config, registry, declared, sys, db_retry_timeout, restart).await?;
        Ok(Runtime {
            tree: Arc::new(tree),
        })
    }

    /// Starts a registered workflow now, in this process. Starting an id that exists returns a
    /// handle on the existing workflow (its result, not a second run).
    pub async fn start<I: Serialize>(
        &self,
        workflow: &str,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle> {
        let json = codec::encode(&input, &format!("the input of workflow {workflow:?}"))?;
        start::submit(&self.tree.shared, Target::Direct, workflow, &json, options).await
    }

    /// Enqueues a registered workflow on `queue`; an executor serving the queue runs it within
    /// the queue's limits. Enqueueing an id that exists returns a handle on that workflow.
    pub async fn enqueue<I: Serialize>(
        &self,
        queue: &str,
        workflow: &str,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle> {
        let json = codec::encode(&input, &format!("the input of workflow {workflow:?}"))?;
        start::submit(
            &self.tree.shared,
            Target::Queue(queue),
            workflow,
            &json,
            options,
        )
        .await
    }

    /// A handle on any workflow by id (it may run anywhere, or have finished).
    pub fn handle(&self, id: impl Into<String>) -> WorkflowHandle {
        WorkflowHandle::new(id.into(), self.tree.shared.clone())
    }

    /// The actor of `queue` in this process, for other actors to enqueue through
    /// ([`QueueMessage`]). A restarted queue actor has a new ref: fetch it again.
    pub fn queue_ref(&self, queue: &str) -> Result<DerivedActorRef<QueueMessage>> {
        self.tree.queue_ref(queue)
    }

    /// Defines a new queue; every executor serving it starts an actor for it.
    pub async fn create_queue(&self, queue: Queue) -> Result<()> {
        let name = queue.name.clone();
        match launch::put_queue(&self.tree.shared, queue, false).await? {
            None => Err(Error::QueueExists(name)),
            Some(_) => self.tree.reconcile().await,
        }
    }

    /// Defines a queue or replaces its definition; new limits apply from the next claim.
    pub async fn set_queue(&self, queue: Queue) -> Result<()> {
        launch::put_queue(&self.tree.shared, queue, true).await?;
        self.tree.reconcile().await
    }

    /// Deletes a queue's definition; its actors finish their running workflows, then stop.
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        let queue = name.to_owned();
        let deleted = self
            .tree
            .shared
            .db
            .call(move |db| {
                let queue = queue.clone();
                async move { sysdb::delete_queue(&db.pool, &db.sql, &queue).await }
            })
            .await?;
        if !deleted {
            return Err(Error::UnknownQueue(name.to_owned()));
        }
        self.tree.reconcile().await
    }

    /// The queue definitions of this application.
    pub async fn queues(&self) -> Result<Vec<Queue>> {
        let app = self.tree.shared.config.app_name.clone();
        Ok(self
            .tree
            .shared
            .db
            .call(move |db| {
                let app = app.clone();
                async move { sysdb::list_queues(&db.pool, &db.sql, app.as_deref()).await }
            })
            .await?)
    }

    /// Creates a schedule; every executor of the application fires it from its next firing on.
    pub async fn create_schedule(&self, schedule: Schedule) -> Result<()> {
        schedule::put(&self.tree.shared, schedule, false).await
    }

    /// The schedules of this application.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        schedule::list(&self.tree.shared).await
    }

    /// Stops a schedule's firings until it is resumed.
    pub async fn pause_schedule(&self, name: &str) -> Result<()> {
        schedule::set_status(&self.tree.shared, name, ScheduleStatus::Paused).await
    }

    /// Restarts a paused schedule's firings, from its next firing time on.
    pub async fn resume_schedule(&self, name: &str) -> Result<()> {
        schedule::set_status(&self.tree.shared, name, ScheduleStatus::Active).await
    }

    /// Deletes a schedule; runs it already enqueued are left alone.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        schedule::delete(&self.tree.shared, name).await
    }

    /// Enqueues every firing of schedule `name` in `[start, end)` that was not enqueued yet
    /// (firings have deterministic ids, so running a backfill again enqueues nothing).
    pub async fn backfill_schedule(
        &self,
        name: &str,
        start: chrono::DateTime<chrono::Utc>,
        end: chrono::DateTime<chrono::Utc>,
    ) -> Result<Backfilled> {
        schedule::backfill(&self.tree.shared, name, start, end).await
    }

    /// Enqueues one run of schedule `name` now, outside its cron timetable.
    pub async fn trigger_schedule(&self, name: &str) -> Result<WorkflowHandle> {
        schedule::trigger(&self.tree.shared, name).await
    }

    /// Debounces a workflow: calls with the same `key` (and workflow) less than `period` apart
    /// collapse into one run with the latest call's input, which starts once `period` passes
    /// without a call, or at the latest `max_wait` (see [`DebounceOptions`]) after the first.
    /// Holds across processes sharing the database. Returns a handle on that run.
    pub async fn debounce<I: Serialize>(
        &self,
        key: &str,
        period: Duration,
        workflow: &str,
        input: I,
        options: DebounceOptions,
    ) -> Result<WorkflowHandle> {
        debounce::debounce(&self.tree.shared, key, period, workflow, input, options).await
    }

    /// Deletes the finished workflows `policy` does not keep, now; returns how many.
    /// `PENDING`, `ENQUEUED` and `DELAYED` workflows are never deleted.
    pub async fn garbage_collect(&self, policy: &Retention) -> Result<u64> {
        retention::collect(&self.tree.shared, policy).await
    }

    /// Cancels workflow `id`: it becomes `CANCELLED` and stops before its next durable call,
    /// wherever it runs. Its children keep running (see [`Runtime::cancel_with_children`]).
    pub async fn cancel(&self, id: &str) -> Result<()> {
        self.cancel_tree(id, false).await
    }

    /// Cancels workflow `id` and every workflow it started, recursively.
    pub async fn cancel_with_children(&self, id: &str) -> Result<()> {
        self.cancel_tree(id, true).await
    }

    async fn cancel_tree(&self, id: &str, cascade: bool) -> Result<()> {
        let shared = &self.tree.shared;
        start::check_running(shared)?;
        let target = id.to_owned();
        let done = shared
            .db
            .call(move |db| {
                let target = target.clone();
                async move { sysdb::cancel(&db.pool, &db.sql, &target, cascade).await }
            })
            .await?;
        if !done.exists {
            return Err(Error::NotFound(id.to_owned()));
        }
        for cancelled in &done.ids {
            dispatch::cancel_local(shared, cancelled);
        }
        Ok(())
    }

    /// Sends `message` to workflow `destination` on `topic`, from outside any workflow.
    pub async fn send<T: Serialize>(
        &self,
        destination: &str,
        message: &T,
        topic: Option<&str>,
    ) -> Result<()> {
        let shared = &self.tree.shared;
        let message = codec::encode(message, "a message")?;
        let topic = topic.unwrap_or(calls::NULL_TOPIC).to_owned();
        let (dest, t) = (destination.to_owned(), topic.clone());
        let id = uuid::Uuid::new_v4().to_string();
        let sent = shared
            .db
            .call(move |db| {
                let (id, dest, t, message) = (id.clone(), dest.clone(), t.clone(), message.clone());
                async move { sysdb::send(&db.pool, &db.sql, &id, &dest, &t, &message).await }
            })
            .await;
        match sent {
            Err(DbError::MissingReference { .. }) => {
                return Err(Error::NotFound(destination.to_owned()))
            }
            other => other?,
        }
        shared
            .signals
            .notify(&signals::message_key(destination, &topic));
        Ok(())
    }

    /// Reads event `key` of workflow `workflow_id`, waiting up to `timeout` for it to be set.
    pub async fn get_event<T: DeserializeOwned>(
        &self,
        workflow_id: &str,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<T>> {
        let shared = &self.tree.shared;
        let until = sysdb::now_ms() + timeout.as_millis().min(i64::MAX as u128 / 2) as i64;
        let check = || calls::read_event(shared, workflow_id, key);
        let found = calls::until_found(
            shared,
            signals::event_key(workflow_id, key),
            Some(until),
            None,
            check,
        )
        .await?;
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

    /// Like [`Runtime::read_stream`], from `offset` on.
    pub fn read_stream_from<T: DeserializeOwned>(
        &self,
        workflow_id: &str,
        key: &str,
        offset: u32,
    ) -> impl Stream<Item = Result<StreamValue<T>>> {
        calls::read_stream(self.tree.shared.clone(), workflow_id, key, offset)
    }

    /// This runtime's executor id.
    pub fn executor_id(&self) -> &str {
        &self.tree.shared.config.executor_id
    }

    /// This runtime's application version.
    pub fn app_version(&self) -> &str {
        &self.tree.shared.config.app_version
    }

    /// Fault injection for tests: makes an actor panic as if its state were poisoned.
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: Fault) -> bool {
        let shared = &self.tree.shared;
        match fault {
            Fault::PanicDatabase => shared.db.inject_panic(),
            Fault::PanicQueue(name) => {
                let queue = shared.queues.get(&name).map(|q| q.clone());
                queue.is_some_and(|q| q.send_message(QueueRequest::Panic).is_ok())
            }
        }
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
        }
    }

    /// Stops gracefully: queues stop claiming, running workflows get `grace` to finish, the rest
    /// are stopped and stay `PENDING` (the next launch recovers them), pending writes are
    /// flushed, and the database actor stops last.
    pub async fn shutdown(&self, grace: Duration) -> Result<()> {
        let shared = &self.tree.shared;
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

    /// Resolves when the runtime has stopped: `Ok` after a shutdown, `Err(Fatal)` when a
    /// permanent actor kept failing and the supervisor gave up.
    pub async fn stopped(&self) -> Result<()> {
        let mut rx = self.tree.shared.state.subscribe();
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

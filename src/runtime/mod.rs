//! The runtime: the handle an embedding service holds. It runs workflows: it starts and enqueues
//! registered workflows, hands out queue refs (`QueueRef`), and owns the actor tree built in
//! `launch`. It has a [`Client`] for everything else (messages, events, cancel, lists, queue and
//! schedule management): [`Runtime::client`].
//!
//! **Runtime and client.** The runtime *has* a client, sharing its actor tree, rather than
//! dereferencing to one: the runtime's own surface is what executes (start, enqueue, queue refs,
//! executor id, app version) plus its lifecycle. `shutdown`, `stopped` and `stats` are on both: a
//! standalone client has a tree of its own to stop and count, and `runtime.shutdown(grace)` reads
//! as what it does; on a runtime they are the same call (so `runtime.client().shutdown(..)` also
//! stops the runtime). `enqueue` is on both too (the runtime's delegates), since producing work is
//! part of what a runtime's callers do.

pub(crate) mod builder;
pub(crate) mod launch;

pub use crate::engine::config::{RestartPolicy, DEFAULT_APP_NAME};
pub use crate::sysdb::DatabasePool;
pub use builder::RuntimeBuilder;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::base::codec;
use crate::base::workflow::WorkflowRef;
use crate::client::{Client, RuntimeStats};
use crate::engine::config::Config;
use crate::engine::handle::WorkflowHandle;
use crate::engine::registry::Registry;
use crate::engine::start::{self, QueueRef, Target, WorkflowOptions};
use crate::error::Result;
use crate::sysdb::Store;
use launch::{Declared, Part};

/// A running stead runtime, embedded in a service. Cloning shares it; dropping the last clone
/// without [`Runtime::shutdown`] kills its actors at once (workflows stay `PENDING` and are
/// recovered by the next launch).
///
/// The runtime starts and enqueues workflows; every other operation (send, events, streams,
/// cancel, list, resume, fork, queues, schedules) is on its [`client`](Runtime::client), which
/// shares its connection and actors.
#[derive(Clone)]
pub struct Runtime {
    client: Client,
}

impl Runtime {
    pub(crate) async fn launch(
        config: Config,
        registry: Registry,
        declared: Declared,
        sys: Arc<dyn Store>,
        db_retry_timeout: Duration,
        restart: RestartPolicy,
    ) -> Result<Runtime> {
        let part = Part::Executor(declared);
        let tree = launch::launch(config, registry, part, sys, db_retry_timeout, restart).await?;
        Ok(Runtime {
            client: Client {
                tree: Arc::new(tree),
            },
        })
    }

    /// The client for every operation besides starting and enqueueing: messages, events,
    /// streams, cancel, list, resume, fork, queue and schedule management. It shares this
    /// runtime's connection and actors (so its [`Client::shutdown`] stops the runtime too).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Starts a registered workflow now, in this process: a typed [`Workflow<I, O>`] with its
    /// `I` (the handle's `result()` is an `O`), or a name with any serializable input. Starting
    /// an id that exists returns a handle on the existing workflow (its result, not a second
    /// run).
    ///
    /// Dropping the returned future does not call it off: once begun, the workflow is created
    /// (and runs) as if it had been awaited.
    ///
    /// [`Workflow<I, O>`]: crate::Workflow
    pub async fn start<W, I>(
        &self,
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
        let handle = start::submit(self.shared(), Target::Direct, name, &json, options).await?;
        Ok(handle.typed())
    }

    /// Sends `message` (on `topic`) to workflow `options.id`, first starting `workflow` with
    /// `input` here under that id unless a workflow with it exists (see
    /// [`Client::signal_with_start`], which enqueues instead). Two concurrent calls start it
    /// once, and both messages arrive.
    pub async fn signal_with_start<W, I, T>(
        &self,
        workflow: W,
        input: I,
        options: WorkflowOptions,
        message: &T,
        topic: Option<&str>,
    ) -> Result<WorkflowHandle<W::Output>>
    where
        W: WorkflowRef<I>,
        I: Serialize,
        T: Serialize + ?Sized,
    {
        self.client
            .signal_with_start_in(Target::Direct, workflow, input, options, message, topic)
            .await
    }

    /// Enqueues a registered workflow on `queue` (see [`Client::enqueue`]); this runtime refuses
    /// a name it has not registered, and a queue no definition names
    /// ([`Error::UnknownQueue`](crate::Error::UnknownQueue)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stead::{Context, Queue, Runtime, Workflow, WorkflowOptions};
    ///
    /// const SQUARE: Workflow<u64, u64> = Workflow::new("square");
    ///
    /// async fn square(ctx: Context, n: u64) -> stead::Result<u64> {
    ///     ctx.step("multiply", || async move { Ok(n * n) }).await
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> stead::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("stead-doc-enqueue-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let url = format!("sqlite://{}", dir.join("squares.sqlite").display());
    /// let runtime = Runtime::builder()
    ///     .database_url(url)
    ///     .queue(Queue::new("math").worker_concurrency(2))
    ///     .register(SQUARE, square)
    ///     .launch()
    ///     .await?;
    /// let mut handles = Vec::new();
    /// for n in 1..=3u64 {
    ///     let options = WorkflowOptions::with_id(format!("square-{n}"));
    ///     handles.push(runtime.enqueue("math", SQUARE, n, options).await?);
    /// }
    /// let mut results = Vec::new();
    /// for handle in handles {
    ///     results.push(handle.result().await?);
    /// }
    /// assert_eq!(results, [1, 4, 9]);
    /// // A misspelt queue is refused, not left waiting forever.
    /// let typo = runtime.enqueue("maht", SQUARE, 4, WorkflowOptions::default()).await;
    /// assert!(matches!(typo, Err(stead::Error::UnknownQueue(_))));
    /// runtime.shutdown(Duration::from_secs(5)).await?;
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(()) }
    /// ```
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
        self.client.enqueue(queue, workflow, input, options).await
    }

    /// `queue` of this runtime, for your own actors (or any code) to enqueue through without
    /// awaiting each write, in the order sent ([`QueueRef`]). [`Error::UnknownQueue`] when no
    /// actor here runs it.
    ///
    /// [`Error::UnknownQueue`]: crate::Error::UnknownQueue
    pub fn queue_ref(&self, queue: &str) -> Result<QueueRef> {
        QueueRef::new(self.shared(), queue)
    }

    /// This runtime's executor id.
    pub fn executor_id(&self) -> &str {
        &self.shared().config.executor_id
    }

    /// This runtime's application version.
    pub fn app_version(&self) -> &str {
        &self.shared().config.app_version
    }

    /// Stops gracefully: queues stop claiming, running workflows get `grace` to finish, the rest
    /// are stopped and stay `PENDING` (the next launch recovers them), pending writes are
    /// flushed, and the database actor stops last. The same as [`Client::shutdown`] on its
    /// client.
    pub async fn shutdown(&self, grace: Duration) -> Result<()> {
        self.client.shutdown(grace).await
    }

    /// Resolves when the runtime has stopped: `Ok` after a shutdown, `Err(Fatal)` when a
    /// permanent actor kept failing and the supervisor gave up.
    pub async fn stopped(&self) -> Result<()> {
        self.client.stopped().await
    }

    /// Counters of database traffic and actor restarts so far.
    pub fn stats(&self) -> RuntimeStats {
        self.client.stats()
    }

    pub(crate) fn shared(&self) -> &crate::engine::shared::SharedRef {
        self.client.shared()
    }

    /// Fault injection for stead's own tests (feature `test-hooks`): makes an actor panic as if
    /// its state were poisoned, or transactional steps park after their commit.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: crate::engine::faults::Fault) -> bool {
        use crate::engine::faults::Fault;
        let shared = self.shared();
        match fault {
            Fault::PanicDatabase => shared.db.inject_panic(),
            Fault::PanicQueue(name) => {
                let queue = shared.directory.queues.get(&name).map(|q| q.clone());
                queue.is_some_and(|q| {
                    q.send_message(crate::engine::dispatch::QueueRequest::Panic)
                        .is_ok()
                })
            }
            Fault::HoldAfterTransactionCommit => {
                shared.faults.hold_after_commit();
                true
            }
            Fault::HoldAfterContinue => {
                shared.faults.hold_after_continue();
                true
            }
            Fault::Store { seed, per_mille } => shared.db.faults().start(seed, per_mille),
        }
    }

    /// How many injected store faults struck so far: before the database, after it.
    #[doc(hidden)]
    #[cfg(feature = "test-hooks")]
    pub fn store_faults_struck(&self) -> (u64, u64) {
        self.shared().db.faults().struck()
    }
}

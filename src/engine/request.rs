//! What a caller asks when it starts or enqueues a workflow: its options, and an enqueue handed
//! to a queue actor ([`EnqueueRequest`]). Plain values and their checks; never writes or
//! dispatches.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::base::attributes::Attributes;
use crate::base::codec;
use crate::base::queue::Dedup;
use crate::base::workflow::WorkflowRef;
use crate::error::Result;

/// Options for starting or enqueueing one workflow. Queue-only options (priority,
/// deduplication, delay, partition key) are refused on a direct start.
///
/// ```
/// use std::time::Duration;
/// let options = stead::WorkflowOptions::with_id("order-17")
///     .priority(1)
///     .deduplication_id("customer-9", stead::queues::Dedup::ReturnExisting)
///     .delay(Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Default)]
pub struct WorkflowOptions {
    pub(crate) id: Option<String>,
    pub(crate) priority: Option<i32>,
    pub(crate) dedup: Option<(String, Dedup)>,
    pub(crate) delay: Option<Duration>,
    pub(crate) partition_key: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) app_version: Option<String>,
    pub(crate) attributes: Option<Attributes>,
    /// The queue may have no definition yet (another process defines it later).
    pub(crate) undefined_queue_ok: bool,
    /// Set for a child: its parent, and the parent's deadline it inherits.
    pub(crate) parent: Option<(String, Option<i64>)>,
    pub(crate) reject_existing: bool,
    pub(crate) app_name: Option<String>,
    /// A workflow this process need not implement (a child enqueued by name for another
    /// process, possibly another language's).
    pub(crate) foreign: bool,
    /// The shard key it lives under on a sharded system database.
    pub(crate) shard_key: Option<String>,
}

impl WorkflowOptions {
    /// Options with a chosen workflow id: starting the same id again returns the same workflow.
    pub fn with_id(id: impl Into<String>) -> WorkflowOptions {
        WorkflowOptions::default().id(id)
    }

    /// Refuses an id that already exists with
    /// [`Error::WorkflowExists`](crate::Error::WorkflowExists), instead of returning a handle on
    /// the existing workflow (DBOS's `workflow_id_reuse_policy="reject"`). A retry of this same
    /// start after a lost answer still succeeds: the store tells a retried commit of the same
    /// request (`Created`) from another's row (`Existing`).
    pub fn reject_existing(mut self) -> Self {
        self.reject_existing = true;
        self
    }

    /// The workflow id (a fresh UUID when unset).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Queue priority: lower runs first (the queue must have priority enabled).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// At most one workflow with this id waits or runs on the queue at a time.
    pub fn deduplication_id(mut self, id: impl Into<String>, policy: Dedup) -> Self {
        self.dedup = Some((id.into(), policy));
        self
    }

    /// Stays `DELAYED` for this long before it can be claimed.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// On a sharded system database (Citus, `sharding=citus`), the shard key this workflow
    /// lives under: workflows (and their messages, events and steps) under one key share a
    /// bucket, so a tenant's work stays on one node. Without one, the workflow id is its key.
    /// A workflow started under a key is found by id alone too (by one read of each bucket, the
    /// first time); ignored on an unsharded database.
    ///
    /// ```
    /// let options = stead::WorkflowOptions::with_id("order-17").shard_key("tenant-42");
    /// ```
    pub fn shard_key(mut self, key: impl Into<String>) -> Self {
        self.shard_key = Some(key.into());
        self
    }

    /// The partition of a partitioned queue.
    pub fn partition_key(mut self, key: impl Into<String>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// The workflow may run for this long (from its start, or from its claim when enqueued);
    /// then it is cancelled. Recovery keeps the deadline: a recovered workflow gets only what is
    /// left. Children inherit their parent's deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Only executors running this application version may run the workflow (default: a
    /// runtime's own version; from a client, any executor running the latest version).
    pub fn app_version(mut self, version: impl Into<String>) -> Self {
        self.app_version = Some(version.into());
        self
    }

    /// Custom attributes recorded with the workflow (DBOS's `attributes` column): listed with
    /// it, filterable ([`crate::client::ListWorkflows::attributes`]) and changeable later
    /// ([`crate::Client::update_workflow_attributes`]). Children do not inherit them.
    pub fn attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = Some(attributes);
        self
    }

    /// Adds one attribute (see [`WorkflowOptions::attributes`]).
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.attributes
            .get_or_insert_with(Attributes::new)
            .insert(key.into(), value.into());
        self
    }

    /// Enqueues even when no definition (of any application) names the queue (one another
    /// process defines later, or a DBOS application defines in its code). Without it, such an
    /// enqueue fails with [`Error::UnknownQueue`](crate::Error::UnknownQueue): a misspelt queue would wait forever.
    pub fn allow_undefined_queue(mut self) -> Self {
        self.undefined_queue_ok = true;
        self
    }

    /// The application whose executors may run it (default: this process's). Name another
    /// application (a DBOS app, say) to enqueue work only it implements.
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = Some(name.into());
        self
    }

    /// Accepts a workflow name this process has not registered (an enqueue for other
    /// executors); its version defaults to none, so the latest version of its application
    /// runs it.
    pub(crate) fn foreign(mut self) -> Self {
        self.foreign = true;
        self
    }

    pub(crate) fn chosen_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    pub(crate) fn child_of(mut self, parent: &str, deadline: Option<i64>) -> Self {
        self.parent = Some((parent.to_owned(), deadline));
        self
    }

    pub(crate) fn queue_only(&self) -> bool {
        self.priority.is_some()
            || self.dedup.is_some()
            || self.delay.is_some()
            || self.partition_key.is_some()
    }
}

/// An enqueue to send through a [`QueueRef`](crate::queues::QueueRef).
#[derive(Debug, Clone)]
pub struct EnqueueRequest {
    pub(crate) workflow: String,
    pub(crate) input_json: String,
    pub(crate) options: WorkflowOptions,
}

impl EnqueueRequest {
    /// Enqueue `workflow` with `input`: a typed [`Workflow<I, O>`](crate::Workflow) with its
    /// `I`, or a name with any serde value the workflow takes.
    pub fn new<W, I>(workflow: W, input: &I) -> Result<EnqueueRequest>
    where
        W: WorkflowRef<I>,
        I: Serialize,
    {
        let workflow = workflow.name().to_owned();
        let input_json = codec::encode_input(&workflow, input)?;
        Ok(EnqueueRequest {
            workflow,
            input_json,
            options: WorkflowOptions::default(),
        })
    }

    /// With these options (id, priority, deduplication, delay, partition key).
    pub fn options(mut self, options: WorkflowOptions) -> Self {
        self.options = options;
        self
    }
}

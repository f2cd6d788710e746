//! Debouncing: repeated calls with one key within a period collapse into one run of a workflow,
//! with the latest call's input, which starts once a period passes without a call, or at the
//! latest `max_wait` after the first call.
//!
//! The run is a `DELAYED`, debounced row (DBOS's `is_debounced`, `debounce_deadline_epoch_ms`)
//! whose delay and input each call pushes back, in one statement (see `sysdb::debounce`), so
//! calls from every process sharing the database agree. It never runs the workflow itself: the
//! queue's claim promotes the row when its delay passes.
//!
//! **As DBOS 3.4.** The key is the deduplication id `<workflow>-<key>` on the run's queue (internal
//! by default); the run is a `DELAYED` row with `is_debounced` and `debounce_deadline_epoch_ms =
//! first call + max_wait`. One statement either pushes the holder back (`delay_until = min(now +
//! period, deadline)`, input replaced, under the row lock) or creates the row (`ON CONFLICT DO
//! NOTHING` on the unique deduplication index); a caller that loses a race retries. The claim's
//! promotion of due `DELAYED` rows clears the deduplication id of debounced ones, so a call after
//! the run left `DELAYED` starts a new run. A key held by a non-debounced workflow (or another
//! workflow's) is `Error::Duplicate`. The option `id` names a new run only; an id that exists
//! returns it.

use std::time::Duration;

use serde::Serialize;

use crate::base::clock::now_ms;
use crate::base::codec;
use crate::base::metrics;
use crate::base::queue::INTERNAL_QUEUE;
use crate::base::workflow::WorkflowRef;
use crate::client::Client;
use crate::engine::handle::WorkflowHandle;
use crate::engine::shared::SharedRef;
use crate::engine::start;
use crate::error::{Error, Result};
use crate::sysdb::{Bounce, Bounced};

/// Options of a debounced workflow.
///
/// ```
/// use std::time::Duration;
/// let options = stead::client::DebounceOptions::default()
///     .max_wait(Duration::from_secs(60))
///     .queue("indexing");
/// ```
#[derive(Debug, Clone, Default)]
pub struct DebounceOptions {
    max_wait: Option<Duration>,
    queue: Option<String>,
    id: Option<String>,
    timeout: Option<Duration>,
    undefined_queue_ok: bool,
}

impl DebounceOptions {
    /// The run starts at the latest this long after the first call of a burst, however many
    /// calls keep coming (default: no bound).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The queue the run goes to (default: the internal queue).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Debounces onto the queue even when no definition names it (see
    /// [`WorkflowOptions::allow_undefined_queue`](crate::WorkflowOptions::allow_undefined_queue)).
    pub fn allow_undefined_queue(mut self) -> Self {
        self.undefined_queue_ok = true;
        self
    }

    /// The id of the run, if this call starts a new one (default: a fresh UUID).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The run's timeout, counted from its claim.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Attempts before giving up on a key that keeps changing hands under us.
const ATTEMPTS: u32 = 50;

fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128 / 4) as i64
}

/// Debounces one call: pushes back the pending run of (`workflow`, `key`) with this input, or
/// creates it. Returns a handle on the run.
pub(crate) async fn debounce<I: Serialize>(
    shared: &SharedRef,
    key: &str,
    period: Duration,
    workflow: &str,
    input: I,
    options: DebounceOptions,
) -> Result<WorkflowHandle> {
    start::check_running(shared)?;
    crate::names::validate_name(key, "debounce key")?;
    let json = codec::encode_input(workflow, &input)?;
    let what = || format!("the input of workflow {workflow:?} (debounced as {key:?})");
    shared
        .config
        .check_value(&codec::encode_inputs(&json), what)?;
    match shared.registry.get(workflow) {
        Some(entry) => entry.check_input(&codec::as_received(&json)?)?,
        // A client debounces by name for the executors that do run it.
        None if !shared.config.executes => crate::names::validate_name(workflow, "workflow name")?,
        None => return Err(Error::UnknownWorkflow(workflow.to_owned())),
    }
    let queue = options
        .queue
        .clone()
        .unwrap_or_else(|| INTERNAL_QUEUE.into());
    start::check_queue_defined(shared, &queue, options.undefined_queue_ok).await?;
    if let Some(id) = &options.id {
        crate::names::validate_name(id, "workflow id")?;
    }
    let dedup_id = format!("{workflow}-{key}");
    for attempt in 0..ATTEMPTS {
        let now = now_ms();
        let bounce = Bounce {
            id: options.id.clone().unwrap_or_else(start::new_workflow_id),
            workflow: workflow.to_owned(),
            queue: queue.clone(),
            dedup_id: dedup_id.clone(),
            run_at: now.saturating_add(millis(period)),
            deadline: options.max_wait.map(|w| now.saturating_add(millis(w))),
            inputs: codec::encode_inputs(&json),
            timeout_ms: options.timeout.map(millis),
            app_version: shared.config.own_version(),
            app_name: shared.config.app_name.clone(),
            now,
        };
        let outcome = shared
            .db
            .call_with(
                bounce,
                move |db, bounce| async move { db.bounce(&bounce).await },
            )
            .await?;
        match outcome {
            Bounced::Extended(id) => return Ok(WorkflowHandle::new(id, shared.clone())),
            Bounced::Created(id) => {
                metrics::workflow_started(workflow);
                start::wake(shared, &queue);
                return Ok(WorkflowHandle::new(id, shared.clone()));
            }
            // A debounced run of this workflow leaving DELAYED right now releases the key.
            Bounced::Conflict {
                debounced: true,
                name: Some(name),
                ..
            } if name == workflow => {}
            Bounced::Conflict { holder, .. } => {
                return Err(Error::Duplicate {
                    queue,
                    dedup_id,
                    holder,
                })
            }
            Bounced::Existing { name } => {
                let id = options.id.clone().unwrap_or_default();
                return match name {
                    Some(existing) if existing != workflow => Err(Error::WorkflowConflict {
                        id,
                        existing,
                        requested: workflow.to_owned(),
                    }),
                    _ => Ok(WorkflowHandle::new(id, shared.clone())),
                };
            }
            Bounced::Retry => {}
        }
        tokio::time::sleep(Duration::from_millis(u64::from(attempt.min(10)) * 5)).await;
    }
    Err(Error::Database(crate::error::DbError::Transient(format!(
        "debounce key {key:?} kept changing hands"
    ))))
}

impl Client {
    /// Debounces a workflow: calls with the same `key` (and workflow) less than `period` apart
    /// collapse into one run with the latest call's input, which starts once `period` passes
    /// without a call, or at the latest `max_wait` (see [`DebounceOptions`]) after the first.
    /// Holds across processes sharing the database. Returns a handle on that run.
    /// `workflow` is a typed [`Workflow<I, O>`](crate::Workflow) or a name, as for
    /// [`Client::enqueue`].
    pub async fn debounce<W, I>(
        &self,
        key: &str,
        period: Duration,
        workflow: W,
        input: I,
        options: DebounceOptions,
    ) -> Result<WorkflowHandle<W::Output>>
    where
        W: WorkflowRef<I>,
        I: Serialize,
    {
        let name = workflow.name();
        let handle = debounce(self.shared(), key, period, name, input, options).await?;
        Ok(handle.typed())
    }
}

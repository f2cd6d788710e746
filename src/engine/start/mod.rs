//! Starting and enqueueing: validates a request, creates the workflow row through the database
//! actor, and hands a direct start to the internal queue actor or wakes the target queue.
//!
//! Shared by the runtime's `start`/`enqueue` and by queue actors answering user actors. What a
//! caller may ask (options, an enqueue request) is in `engine::request`; `queue_ref` is the
//! handle other actors enqueue through.
//!
//! **A start or enqueue, once begun, completes.** Its write and the hand-off to the queue actor run
//! in a task of their own, so a caller that drops the future (a timeout, a `select!`) does not
//! leave an owned row that no actor runs (a taken slot is freed by its permit regardless). Running
//! it in the caller's task instead (a drop guard finishing it) saved one hop and nothing
//! measurable.
//!
//! **Enqueues name a defined queue.** An enqueue (a debounce, a child enqueued from a workflow) to
//! a queue no definition names, of any application (names are unique across them, and an app-less
//! client feeds an application's queues), fails with `UnknownQueue` before anything is written;
//! `allow_undefined_queue()` opts out (a queue another process defines later, or a DBOS app's
//! in-code queue, which DBOS never writes to `queues`). Known names are kept in the directory's
//! `queue_names`, so the check costs nothing on the hot path; an unknown name costs one read.
//! Enqueues through a queue actor's ref need no check. A queue another application defined makes
//! the run that application's (`foreign_owner`): only its executors claim from it.

use std::time::Duration;

use ractor::DerivedActorRef;

use crate::base::attributes;
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::base::codec::PORTABLE_JSON;
use crate::base::metrics;
use crate::base::queue::Dedup;
use crate::base::queue::INTERNAL_QUEUE;
use crate::engine::admission::{Permit, Tabled, Take};
use crate::engine::dispatch::{Dispatch, QueueRequest};
use crate::engine::handle::WorkflowHandle;
use crate::engine::shared::{RunState, SharedRef};
use crate::engine::signals;
use crate::error::{Error, Result};
use crate::sysdb::{self, NewWorkflow, OutgoingMessage, StartOutcome};

mod queue_ref;
mod row;

pub use crate::engine::request::{EnqueueRequest, WorkflowOptions};
pub use queue_ref::{Enqueued, QueueRef};
use row::new_row;
pub(crate) use row::{check_queue_defined, new_workflow_id};

/// Where a new workflow goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// Runs now, in this process.
    Direct,
    /// Waits on a queue for an executor to claim it.
    Queue(&'a str),
}

/// Creates a workflow (idempotently by id) and returns a handle on it.
///
/// Once begun, the write and the hand-off to the queue actor run to the end in a task of their
/// own even if the caller stops waiting: a slot taken, or a row written as owned here, must
/// reach its actor, or the slot is lost and the workflow waits for the next launch.
pub(crate) async fn submit(
    shared: &SharedRef,
    target: Target<'_>,
    workflow: &str,
    input_json: &str,
    options: WorkflowOptions,
) -> Result<WorkflowHandle> {
    submit_with(shared, target, workflow, input_json, options, None).await
}

/// [`submit`], with signal-with-start's `message` to the workflow written in the same
/// transaction as its row (when the row is created or already is this workflow).
pub(crate) async fn submit_with(
    shared: &SharedRef,
    target: Target<'_>,
    workflow: &str,
    input_json: &str,
    options: WorkflowOptions,
    message: Option<OutgoingMessage>,
) -> Result<WorkflowHandle> {
    if let Target::Queue(queue) = target {
        check_queue_defined(shared, queue, options.undefined_queue_ok).await?;
        if options.delay.is_none() {
            await_reopening(shared, queue, || runs_here(shared, workflow, &options)).await;
        }
    }
    // A start from outside a workflow waits for room under the resident bound; a child never
    // does (its parent holds a place and may be waiting on it).
    let promised = match target {
        Target::Direct if options.parent.is_none() => Some(shared.residents.room().await),
        _ => None,
    };
    let mut submission = begin(shared, target, workflow, input_json, options)?;
    submission.new.message = message.map(Box::new);
    let created = tokio::spawn(submission.complete())
        .await
        .map_err(|e| Error::Fatal(format!("a workflow's creation failed: {e}")))?;
    drop(promised);
    created
}

/// A workflow whose row is decided (id, queue position, slot) but not yet written.
pub(crate) struct Submission {
    shared: SharedRef,
    /// The row; its queue (`None` for a direct start) and name say where it goes.
    new: NewWorkflow,
    reservation: Reservation,
    dedup: Option<(String, Dedup)>,
    reject_existing: bool,
}

/// Everything of a submission that must happen in the caller's order: checks, the queue
/// position (`created_at`) and a slot. A queue actor calls it in its handler, so enqueues a user
/// actor sends one after another keep their order even though their writes complete apart.
pub(crate) fn begin(
    shared: &SharedRef,
    target: Target<'_>,
    workflow: &str,
    input_json: &str,
    options: WorkflowOptions,
) -> Result<Submission> {
    check_running(shared)?;
    match shared.registry.get(workflow) {
        Some(entry) => entry.check_input(&codec::as_received(input_json)?)?,
        // A client (or a workflow's foreign child) enqueues by name for the executors that do
        // run it.
        None if (!shared.config.executes || options.foreign)
            && matches!(target, Target::Queue(_)) =>
        {
            crate::names::validate_name(workflow, "workflow name")?
        }
        None => return Err(Error::UnknownWorkflow(workflow.to_owned())),
    }
    let id = match &options.id {
        Some(id) => {
            crate::names::validate_name(id, "workflow id")?;
            id.clone()
        }
        None => new_workflow_id(),
    };
    if let Some(key) = &options.shard_key {
        crate::names::validate_name(key, "shard key")?;
    }
    let mut new = new_row(shared, target, workflow, input_json, &options, id)?;
    shared.config.check_value(&new.inputs, || {
        format!("the input of workflow {workflow:?} ({})", new.id)
    })?;
    // An enqueue that may run here at once is written as already claimed by this executor.
    let reservation = match target {
        // At the resident bound an enqueue goes to the table, behind what waits there.
        Target::Queue(queue)
            if options.delay.is_none()
                && !shared.residents.full()
                && runs_here(shared, workflow, &options) =>
        {
            reserve(shared, queue)
        }
        _ => Reservation::NoActor,
    };
    if matches!(reservation, Reservation::Slot(..)) {
        new.owner = Some(uuid::Uuid::new_v4().to_string());
        // Claimed now, so its clock starts now too.
        new.deadline = new.deadline.or(new.timeout_ms.map(|t| now_ms() + t));
    }
    Ok(Submission {
        shared: shared.clone(),
        new,
        reservation,
        dedup: options.dedup,
        reject_existing: options.reject_existing,
    })
}

impl Submission {
    /// Writes the row, then runs or announces the workflow.
    pub(crate) async fn complete(self) -> Result<WorkflowHandle> {
        let Submission {
            shared,
            new,
            reservation,
            dedup,
            reject_existing,
        } = self;
        let (workflow, queue) = (new.name.clone(), new.queue.clone());
        let (shared, workflow) = (&shared, workflow.as_str());
        let target = queue.as_deref().map_or(Target::Direct, Target::Queue);
        let (id, owner, inputs) = (new.id.clone(), new.owner.clone(), new.inputs.clone());
        let deadline = new.deadline;
        let trace = attributes::trace_context(new.attributes.as_deref());
        let tabled = matches!(reservation, Reservation::Tabled(_));
        let message = new
            .message
            .as_ref()
            .map(|m| (m.destination.clone(), m.topic.clone()));
        // Known as starting from before its row is written until a queue actor runs it.
        let mut starting = owner.as_ref().map(|_| Starting::new(shared, &id));
        let outcome = shared.db.start(new).await;
        let created = matches!(outcome, Ok(StartOutcome::Created));
        if let (Some((to, topic)), Ok(o)) = (&message, &outcome) {
            if !matches!(o, StartOutcome::Duplicate { .. }) {
                // Woken before the hand-off below, a local receiver never misses it.
                shared.signals.notify(&signals::message_key(to, topic));
            }
        }
        let reserved = match reservation {
            Reservation::Slot(actor, slot) if created => Some((actor, slot)),
            Reservation::Slot(actor, slot) => {
                let _ = actor.send_message(QueueRequest::Release(slot));
                None
            }
            Reservation::Tabled(write) => {
                drop(write);
                // A created row wakes the actor below; otherwise it still learns its backlog is
                // clear.
                if let (Target::Queue(queue), false) = (target, created) {
                    tabled_landed(shared, queue);
                }
                None
            }
            Reservation::NoActor => None,
        };
        match outcome? {
            StartOutcome::Created => {
                match shared.registry.get(workflow) {
                    Some(entry) => entry.metrics().started(),
                    None => metrics::workflow_started(workflow),
                }
                match (target, owner) {
                    (Target::Direct, Some(owner)) => {
                        shared.completions.slot(&id);
                        let d = direct(&id, workflow, owner, inputs, deadline, trace);
                        if dispatch(shared, d) {
                            if let Some(s) = starting.as_mut() {
                                s.handed();
                            }
                        }
                    }
                    (Target::Queue(_), Some(owner)) => {
                        shared.completions.slot(&id);
                        let d = direct(&id, workflow, owner, inputs, deadline, trace);
                        if let Some((queue, slot)) = reserved {
                            // If the actor died meanwhile, its successor's take-back runs it.
                            if queue
                                .send_message(QueueRequest::RunReserved(d, slot))
                                .is_ok()
                            {
                                if let Some(s) = starting.as_mut() {
                                    s.handed();
                                }
                            }
                        }
                    }
                    (Target::Queue(queue), None) if tabled => tabled_landed(shared, queue),
                    (Target::Queue(queue), None) => wake(shared, queue),
                    (Target::Direct, None) => {}
                }
            }
            StartOutcome::Existing { name, .. } if name != workflow => {
                return Err(Error::WorkflowConflict {
                    id,
                    existing: name,
                    requested: workflow.to_owned(),
                })
            }
            StartOutcome::Existing { .. } if reject_existing => {
                return Err(Error::WorkflowExists(id))
            }
            StartOutcome::Existing { .. } => {}
            StartOutcome::Duplicate { holder } => {
                let (Target::Queue(queue), Some((dedup_id, policy))) = (target, dedup) else {
                    return Err(Error::Fatal(
                        "a deduplication conflict without a key".into(),
                    ));
                };
                metrics::queue_deduplicated(queue);
                return match policy {
                    Dedup::ReturnExisting => Ok(WorkflowHandle::new(holder, shared.clone())),
                    Dedup::Reject => Err(Error::Duplicate {
                        queue: queue.to_owned(),
                        dedup_id,
                        holder,
                    }),
                };
            }
        }
        Ok(WorkflowHandle::new(id, shared.clone()))
    }
}

/// Runs or announces the next run of a continued workflow (`Context::continue_as_new`), its row
/// committed: one made `PENDING` here under `owner` goes to the internal queue actor as a direct
/// start does (if that actor is restarting, its take-back runs it); an enqueued one wakes its
/// queue.
pub(crate) fn hand_on(
    shared: &SharedRef,
    workflow: &str,
    next: &sysdb::Continued,
    owner: String,
    inputs: String,
) {
    match shared.registry.get(workflow) {
        Some(entry) => entry.metrics().started(),
        None => metrics::workflow_started(workflow),
    }
    let Some(queue) = &next.queue else {
        let mut starting = Starting::new(shared, &next.next_id);
        shared.completions.slot(&next.next_id);
        let trace = attributes::trace_context(next.attributes.as_deref());
        let d = direct(&next.next_id, workflow, owner, inputs, next.deadline, trace);
        if dispatch(shared, d) {
            starting.handed();
        }
        return;
    };
    wake(shared, queue);
}

fn direct(
    id: &str,
    workflow: &str,
    owner: String,
    inputs: String,
    deadline: Option<i64>,
    trace_context: Option<String>,
) -> Dispatch {
    Dispatch {
        id: id.to_owned(),
        name: workflow.to_owned(),
        owner,
        attempts: 1,
        inputs: Some(inputs),
        serialization: Some(PORTABLE_JSON.into()),
        fresh: true,
        restarts: 0,
        deadline,
        trace_context,
    }
}

/// Hands a started workflow to the internal queue actor; false when it could not. If that actor
/// is restarting, its successor takes the workflow back from the table, so a failed send loses
/// nothing.
fn dispatch(shared: &SharedRef, d: Dispatch) -> bool {
    let queue = shared
        .directory
        .queues
        .get(INTERNAL_QUEUE)
        .map(|q| q.clone());
    let sent = queue.is_some_and(|q| q.send_message(QueueRequest::Run(d)).is_ok());
    if !sent {
        tracing::debug!("internal queue restarting; its take-back will run the workflow");
    }
    sent
}

/// A workflow in `Shared::starting` until its run is handed to a queue actor (which forgets it
/// when it spawns the run); dropped without that, it is forgotten here.
struct Starting<'a> {
    shared: &'a SharedRef,
    id: String,
    handed: bool,
}

impl<'a> Starting<'a> {
    fn new(shared: &'a SharedRef, id: &str) -> Starting<'a> {
        shared.starting.insert(id.to_owned());
        Starting {
            shared,
            id: id.to_owned(),
            handed: false,
        }
    }

    fn handed(&mut self) {
        self.handed = true;
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if !self.handed {
            self.shared.starting.remove(&self.id);
        }
    }
}

/// Whether this executor's version may run the workflow.
fn runs_here(shared: &SharedRef, workflow: &str, options: &WorkflowOptions) -> bool {
    shared.registry.get(workflow).is_some()
        && options
            .app_name
            .as_ref()
            .is_none_or(|a| Some(a) == shared.config.app_name.as_ref())
        && options
            .app_version
            .as_ref()
            .is_none_or(|v| *v == shared.config.app_version)
}

/// Where an enqueue from this process goes.
enum Reservation {
    /// Into a slot this process's actor of the queue offered: it runs at once, in that slot.
    Slot(DerivedActorRef<QueueRequest>, Permit),
    /// To the table, behind the work there; the actor learns when the write is over.
    Tabled(Tabled),
    /// To the table; no actor of the queue runs here.
    NoActor,
}

/// Takes a slot this process's actor of `queue` offers, to run an enqueue at once.
fn reserve(shared: &SharedRef, queue: &str) -> Reservation {
    let Some(slots) = shared
        .directory
        .open_slots
        .get(queue)
        .map(|o| o.slots.clone())
    else {
        return Reservation::NoActor;
    };
    let Some(actor) = shared.directory.queues.get(queue).map(|q| q.clone()) else {
        return Reservation::NoActor;
    };
    match slots.take() {
        Take::Slot(slot) => Reservation::Slot(actor, slot),
        Take::Tabled(write) => Reservation::Tabled(write),
    }
}

/// The most an awaited enqueue waits for a claim in flight to reopen its queue's offer.
const REOPENING_WAIT: Duration = Duration::from_millis(20);

/// Waits, at most [`REOPENING_WAIT`], while this process's actor of `queue` offers no slot but
/// its claim in flight may reopen the offer (`Slots::reopening`): an enqueue that went to the
/// table meanwhile would keep the offer closed, and every later one would follow it there.
/// `runs_here` is asked only when there is something to wait for (the usual enqueue finds a
/// slot offered and pays two atomic loads).
async fn await_reopening(shared: &SharedRef, queue: &str, runs_here: impl FnOnce() -> bool) {
    let offer = match shared.directory.open_slots.get(queue) {
        Some(o) if o.slots.offered() == 0 && o.slots.reopening() => o.clone(),
        _ => return,
    };
    if !runs_here() {
        return;
    }
    let until = tokio::time::Instant::now() + REOPENING_WAIT;
    loop {
        let settled = offer.settled.notified();
        tokio::pin!(settled);
        // Registered before looking, so a settle right after the look is not missed.
        settled.as_mut().enable();
        if offer.slots.offered() > 0 || !offer.slots.reopening() {
            return;
        }
        if tokio::time::timeout_at(until, settled).await.is_err() {
            return;
        }
    }
}

/// Tells this process's actor of `queue` (if it runs one) that work arrived.
pub(crate) fn wake(shared: &SharedRef, queue: &str) {
    send_to_queue(shared, queue, QueueRequest::Wake);
}

/// Tells this process's actor of `queue` that an enqueue of ours that found no slot landed.
fn tabled_landed(shared: &SharedRef, queue: &str) {
    send_to_queue(shared, queue, QueueRequest::TabledLanded);
}

fn send_to_queue(shared: &SharedRef, queue: &str, request: QueueRequest) {
    if let Some(actor) = shared.directory.queues.get(queue).map(|q| q.clone()) {
        let _ = actor.send_message(request);
    }
}

pub(crate) fn check_running(shared: &SharedRef) -> Result<()> {
    match &*shared.state.borrow() {
        RunState::Running => Ok(()),
        RunState::Fatal(reason) => Err(Error::Fatal(reason.clone())),
        RunState::Stopping | RunState::Stopped => Err(Error::Shutdown),
    }
}

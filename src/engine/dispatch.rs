//! Dispatch: a workflow this executor owns and must run, and the requests the core sends a queue
//! actor. Defined here so the core can talk to queue actors without naming their type.

use tokio::sync::oneshot;

use crate::engine::admission::Permit;
use crate::engine::request::EnqueueRequest;
use crate::error::Result;
use crate::sysdb::Claimed;

/// A workflow owned by this executor (under `owner`), ready for a workflow actor.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub id: String,
    pub name: String,
    pub owner: String,
    /// Dispatches so far, this one included; checked against the recovery budget.
    pub attempts: i64,
    /// The input envelope, if the row has one.
    pub inputs: Option<String>,
    pub serialization: Option<String>,
    /// Created by this process just now: there are no recorded steps to load.
    pub fresh: bool,
    /// Crash restarts in this process, for the restart backoff.
    pub restarts: u32,
    /// When the workflow's time runs out (epoch ms), if it has a timeout.
    pub deadline: Option<i64>,
    /// The trace its spans continue (the JSON of its `dbos.otelContext` attribute), if any;
    /// read only with the `otel` feature.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub trace_context: Option<String>,
}

impl From<Claimed> for Dispatch {
    fn from(c: Claimed) -> Self {
        Dispatch {
            id: c.id,
            name: c.name,
            owner: c.owner,
            attempts: c.recovery_attempts,
            inputs: c.inputs,
            serialization: c.serialization,
            fresh: !c.has_steps,
            restarts: 0,
            deadline: c.deadline,
            trace_context: c.trace_context,
        }
    }
}

/// What the core asks of a queue actor.
pub(crate) enum QueueRequest {
    /// Run a workflow this executor already owns (a direct start).
    Run(Dispatch),
    /// Work was enqueued (here, or announced by another process): claim now.
    Wake,
    /// An enqueue of this process that found no slot wrote its row to the table: claim now.
    TabledLanded,
    /// Run a workflow enqueued into the slot it took (its row is already `PENDING` and ours).
    RunReserved(Dispatch, Permit),
    /// The slot an enqueue took was not used (no row was written).
    Release(Permit),
    /// Run again by replay a workflow evicted while waiting, in the slot it kept.
    Resume(Dispatch, Permit),
    /// This executor holds its liveness lock again after its lease ran out: take back its
    /// `PENDING` workflows of the queue that no run here holds.
    TakeBack,
    /// Enqueue on this queue for a [`QueueRef`](crate::queues::QueueRef) caller, in the order
    /// sent; answered with the id once the row is committed.
    Enqueue(EnqueueRequest, oneshot::Sender<Result<String>>),
    /// Fault injection for tests: the actor panics, killing its workflow actors.
    #[cfg(feature = "test-hooks")]
    Panic,
}

/// A workflow run in this process: the owner token it runs under, and its stop flag, which
/// its `Context` reads on every durable call (`Abort::Cancelled` for a cancelled row,
/// `NotOwner` for one another execution owns now, `Paused` to write the held step records
/// and put the row back on its queue).
pub(crate) struct LocalRun {
    pub owner: String,
    pub stop: std::sync::Arc<crate::engine::stop::Stop>,
}

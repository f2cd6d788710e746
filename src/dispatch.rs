//! Dispatch: a workflow this executor owns and must run, and the requests the core sends a queue
//! actor. Defined here so the core can talk to queue actors without naming their type.

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
        }
    }
}

/// What the core asks of a queue actor.
pub(crate) enum QueueRequest {
    /// Run a workflow this executor already owns (a direct start).
    Run(Dispatch),
    /// Work was enqueued (here, or announced by another process): claim now.
    Wake,
    /// Fault injection for tests: the actor panics, killing its workflow actors.
    Panic,
}

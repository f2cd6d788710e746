//! Dispatch: a workflow this executor owns and must run, and the requests the core sends a queue
//! actor. Defined here so the core can talk to queue actors without naming their type.

use std::sync::atomic::{AtomicI64, Ordering};

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
        }
    }
}

/// Slots a queue actor offers to enqueues from this process, which then run at once instead of
/// waiting in the queue. The actor publishes a count when nothing would be jumped (no backlog)
/// and only its own limit applies; an enqueue takes one by decrementing it, without a message.
#[derive(Debug, Default)]
pub(crate) struct OpenSlots(AtomicI64);

impl OpenSlots {
    /// Takes a slot if one is offered.
    pub(crate) fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then(|| n - 1)
            })
            .is_ok()
    }

    /// Withdraws the offer, returning how many slots were still open.
    pub(crate) fn withdraw(&self) -> i64 {
        self.0.swap(0, Ordering::AcqRel)
    }

    /// Offers `n` slots (after a withdraw).
    pub(crate) fn offer(&self, n: i64) {
        self.0.store(n.max(0), Ordering::Release);
    }
}

/// What the core asks of a queue actor.
pub(crate) enum QueueRequest {
    /// Run a workflow this executor already owns (a direct start).
    Run(Dispatch),
    /// Work was enqueued (here, or announced by another process): claim now.
    Wake,
    /// Run a workflow enqueued into a reserved slot (its row is already `PENDING` and ours).
    RunReserved(Dispatch),
    /// The reserved slot was not used.
    Release,
    /// Fault injection for tests: the actor panics, killing its workflow actors.
    Panic,
}

/// What the core asks of a running workflow's actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkflowRequest {
    /// Stop before the next durable call (the row is already `CANCELLED`).
    Cancel,
}

/// Tells the actor of `id`, if it runs in this process, that the workflow was cancelled.
pub(crate) fn cancel_local(shared: &crate::shared::Shared, id: &str) {
    if let Some(actor) = shared.running.get(id).map(|a| a.clone()) {
        let _ = actor.send_message(WorkflowRequest::Cancel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_until_none_is_left_and_withdrawn_at_once() {
        let slots = OpenSlots::default();
        assert!(!slots.take());
        slots.offer(2);
        assert!(slots.take());
        assert_eq!(slots.withdraw(), 1);
        assert!(!slots.take());
    }
}

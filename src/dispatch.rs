//! Dispatch: a workflow this executor owns and must run, and the requests the core sends a queue
//! actor. Defined here so the core can talk to queue actors without naming their type.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

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
///
/// An enqueue that finds no slot goes to the table. Until a claim that began after its row
/// landed has run, no later enqueue may overtake it: it marks the offer [`BLOCKED`] (so an offer
/// racing with it fails) and counts itself in `tabled`/`landed`, which the actor compares around
/// its claims.
#[derive(Debug, Default)]
pub(crate) struct OpenSlots {
    slots: AtomicI64,
    tabled: AtomicU64,
    landed: AtomicU64,
}

/// An enqueue from this process went to the table since the last offer.
const BLOCKED: i64 = -1;

impl OpenSlots {
    /// Takes a slot if one is offered. If none is, the caller writes its row to the table and
    /// must call [`OpenSlots::landed`] once that write is over, whatever its outcome.
    pub(crate) fn take(&self) -> bool {
        let before = self
            .slots
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then(|| n - 1)
            });
        if before.is_ok() {
            return true;
        }
        self.tabled.fetch_add(1, Ordering::AcqRel);
        let _ = self
            .slots
            .compare_exchange(0, BLOCKED, Ordering::AcqRel, Ordering::Acquire);
        false
    }

    /// A tabled enqueue's write is over (committed or failed).
    pub(crate) fn landed(&self) {
        self.landed.fetch_add(1, Ordering::AcqRel);
    }

    /// How many enqueues went to the table, and how many of those writes are over.
    pub(crate) fn tabled(&self) -> (u64, u64) {
        // `landed` first: a write counted as landed was counted as tabled before.
        let landed = self.landed.load(Ordering::Acquire);
        (self.tabled.load(Ordering::Acquire), landed)
    }

    /// Withdraws the offer: how many slots were still open, and whether an enqueue went to the
    /// table since the offer.
    pub(crate) fn withdraw(&self) -> (i64, bool) {
        let left = self.slots.swap(0, Ordering::AcqRel);
        (left.max(0), left == BLOCKED)
    }

    /// Offers `n` slots (after a withdraw); false, offering nothing, when an enqueue went to the
    /// table in between.
    pub(crate) fn offer(&self, n: i64) -> bool {
        self.slots
            .compare_exchange(0, n.max(0), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
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

/// Tells the actors of `id` running in this process to stop: all of them after a cancel, or only
/// the one running as `owner` after a takeover (resume).
pub(crate) fn cancel_local(shared: &crate::shared::Shared, id: &str, owner: Option<&str>) {
    let runs: Vec<_> = shared
        .running
        .get(id)
        .map(|runs| {
            runs.iter()
                .filter(|r| owner.is_none_or(|o| o == r.owner))
                .map(|r| r.actor.clone())
                .collect()
        })
        .unwrap_or_default();
    for actor in runs {
        let _ = actor.send_message(WorkflowRequest::Cancel);
    }
}

/// A workflow actor running in this process, and the owner token it runs under.
pub(crate) struct LocalRun {
    pub owner: String,
    pub actor: ractor::DerivedActorRef<WorkflowRequest>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_until_none_is_left_and_withdrawn_at_once() {
        let slots = OpenSlots::default();
        assert!(slots.offer(2));
        assert!(slots.take());
        assert_eq!(slots.withdraw(), (1, false));
        assert!(!slots.take());
    }

    #[test]
    fn an_enqueue_that_finds_no_slot_blocks_the_next_offer() {
        let slots = OpenSlots::default();
        assert!(!slots.take(), "nothing offered: this one goes to the table");
        assert_eq!(slots.tabled(), (1, 0));
        assert!(!slots.offer(1), "a later enqueue must not overtake it");
        assert!(!slots.take());
        assert_eq!(slots.withdraw(), (0, true));
        slots.landed();
        slots.landed();
        assert_eq!(slots.tabled(), (2, 2));
        assert!(slots.offer(1));
        assert!(slots.take());
    }
}

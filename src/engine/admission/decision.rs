//! What the admission machine is told and what it decides: its phases, how a run came to be
//! admitted, the decisions the queue actor performs, and a claim's answer as the machine reads
//! it. Plain data: no logic and no I/O.

use std::time::Duration;

use super::Permit;
use crate::sysdb::QueueKey;

/// Where a queue is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Claims, offers slots, runs what it is given.
    Running,
    /// The queue was deleted: no claims or offers; its workflows finish, then it stops.
    Retiring,
    /// The runtime stops: nothing new runs; answered once idle, or at once after the grace
    /// (children killed, crashed ones no longer waited for).
    Draining { deadline_passed: bool },
    /// Retired and idle.
    Stopped,
}

/// How a workflow came to run here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// A direct start (on the internal queue, which has no limit): admitted whatever is free.
    Direct,
    /// An enqueue from this process that took an offered slot.
    Reserved,
    /// A claim took its row.
    Claimed,
    /// Taken back from the table after a restart or a lost claim answer, whatever is free: it
    /// replaces a local run of the same id.
    TakenBack,
    /// A crashed run, restarted in the slot it kept.
    Restarted,
}

/// What the queue actor does next.
#[derive(Debug)]
pub(crate) enum Decision<W> {
    /// Run `workflow` in `slot`, keeping the slot until it exits.
    Run {
        workflow: W,
        slot: Permit,
        path: Path,
    },
    /// Claim up to `limit` workflows (the slots are held until the answer), passing over rows
    /// below `floor`.
    Claim { limit: i64, floor: Option<QueueKey> },
    /// Take back this executor's workflows of the queue that no local actor runs.
    TakeBack,
    /// Restart a crashed workflow after its backoff; it keeps `slot` meanwhile.
    Restart { workflow: W, slot: Permit },
    /// Arm the polling timer: about this long (before jitter).
    Poll(Duration),
    /// Wake at this time (epoch ms): a delayed workflow comes due, or a rate window frees a start.
    WakeAt(i64),
    /// The grace is over: kill the children still running (they stay `PENDING`).
    KillChildren,
    /// Answer every drain waiting.
    AnswerDrains,
    /// Retired and idle: stop the actor.
    Stop,
}

/// A claim's answer, as the admission machine needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClaimAnswer {
    /// Rows the shared limits allowed (the claim may have taken fewer).
    pub allowed: i64,
    /// The rate limit, not the slots asked for, stopped the claim.
    pub rate_limited: bool,
    /// When rate-limited: when the window frees a start.
    pub rate_free_at: Option<i64>,
    /// Delayed rows that became due.
    pub promoted: i64,
    /// The earliest future due time of a delayed row.
    pub next_due: Option<i64>,
    /// Rows seen waiting before the claim (more than it took: work still waits).
    pub seen: i64,
    /// The first waiting row the claim saw at or above its floor.
    pub head: Option<QueueKey>,
    /// The queue is paused for the fleet (`sysdb::pauses`).
    pub paused: bool,
}

//! Claiming: how an executor takes enqueued workflows of a queue to run. Both backends follow
//! these rules, in this order (the shared suite checks them on each):
//!
//! 1. **Budget.** `allowed` = the smallest of the caller's free slots (`limit`, which already
//!    counts worker concurrency), the queue's global concurrency minus its `PENDING` rows, and
//!    its rate limit minus the starts of rate-limited runs within the trailing period; never
//!    below zero. `rate_limited` says the rate limit was smaller than the slots.
//! 2. **Pick.** `ENQUEUED` rows of the queue in priority order, then `created_at` (FIFO),
//!    that this executor may run: of its application version, or of none when no newer version
//!    of its application is registered; of its application name, or of none. On a partitioned
//!    queue, per partition key, only as many as the partition's concurrency, worker concurrency
//!    (rows this executor runs) and rate limit leave. At most `allowed` rows.
//! 3. **Take.** Each picked row becomes `PENDING` under a fresh owner token, this executor and
//!    version, `started_at = now`, one more recovery attempt, `rate_limited` set when the queue
//!    or its partitions have a rate limit, and a deadline of `now + timeout` when it has a
//!    timeout and no deadline yet. A row another executor took meanwhile is skipped.
//! 4. **Promote.** Every `DELAYED` row of the queue that is due (`delay_until <= now`) becomes
//!    `ENQUEUED` (`promoted` counts them); a debounced one also releases its deduplication id,
//!    its debounce key, so a later call starts a new run. Promoted rows are taken by the next
//!    claim (Postgres's one statement picks from the snapshot before it); the caller claims
//!    again at once when `promoted > 0`.
//! 5. **Report.** What was taken (priority, then FIFO order); the earliest future due time of
//!    the queue's `DELAYED` rows (`next_due`); the `ENQUEUED` rows there were before the claim,
//!    counted up to `limit + 1` (`seen`); and, when rate-limited, when the oldest start in the
//!    window leaves it (`rate_free_at`). Each taken row reports when it
//!    became ready to start (`ready_at`): its `created_at`, or its due time if it was delayed.
//! 6. **Floor.** A claim may carry a floor, a (priority, `created_at`) key: Postgres then passes
//!    over the rows of the floor's priority older than it (rows of every other priority are read
//!    as before) when it picks and counts `seen`, and reports the key of the first `ENQUEUED` row
//!    it saw (`head`). SQLite ignores the floor and reports no head: its scans never pass the
//!    row versions the floor exists to skip (see "Why a floor" below).
//!
//! **Surveys.** A claim counts no depth: the queue's depth, its oldest waiting row (the lag
//! gauge) and whether any row waits below a floor are one read of their own
//! (`Observe::waiting`), sent by the queue actor at most once a second on the pool, so a scan of
//! the whole backlog never holds up the claim lane. The oldest row is by `created_at`, an index
//! column; a due time is not in that index, so a promoted delayed row counts from its
//! `created_at` (reading due times reads each waiting row's heap: on Postgres 15, 100,000
//! waiting rows, 15 ms → 55 ms).
//!
//! **Why a floor.** A claim scans the in-flight index from the front of the queue, and every row
//! claimed since the oldest open snapshot began leaves a version there that vacuum may not remove
//! yet (an index entry whose heap tuple the scan must visit to learn it is dead). Under a
//! transaction held open for a minute at 1,000 workflows/s, that is 60,000 entries before the
//! first live row, on every claim: W9 measured the claim at 0.43 ms before the hold and 7.6 ms
//! within it, and completions fell from 1,000/s to 350/s. The live rows sit behind all of those
//! entries, because they are newer; a floor just below the last head starts the scan at them. The
//! claimer keeps the floor (`engine::admission`), so the database keeps nothing more: no table of
//! stead's own, and no row a fleet would contend on.
//!
//! What the floor costs: a row of the floor's priority that becomes `ENQUEUED` below it (enqueued
//! by a clock behind the others by more than the margin, committed long after it was stamped,
//! resumed, or re-enqueued by a fleet) is passed over by floored claims until the next unfloored
//! one: the claim after a survey found it (within a second, or the polling interval if longer:
//! the bound DBOS's default polling gives), or after a promotion, a take-back or a failed claim.
//! Rows of a more urgent priority are always read. Polls are floored too: a poll from the front
//! passes every dead entry, and under a held snapshot those grow without bound (W9's 10-minute
//! hold at 300/s: polls from the front took claim p99 from 3 to 140 ms).
//!
//! Counts of shared limits must be exact when several executors claim at once: Postgres takes
//! a per-queue advisory lock for claims of queues with a shared limit; SQLite's one writer
//! already excludes every other claim.

use crate::base::queue::Queue;

/// A row's place in its queue's order: (priority, `created_at`).
pub(crate) type QueueKey = (i32, i64);

/// A claim of up to `limit` workflows of `queue` for this executor.
#[derive(Debug, Clone)]
pub(crate) struct ClaimRequest {
    pub queue: Queue,
    pub limit: i64,
    /// Rows below this key may be passed over (rule 6).
    pub floor: Option<QueueKey>,
    pub executor_id: String,
    pub app_version: String,
    pub app_name: Option<String>,
    pub now: i64,
}

/// A workflow this executor now owns and must run.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub recovery_attempts: i64,
    pub inputs: Option<String>,
    pub serialization: Option<String>,
    /// False when the workflow has never recorded a step: nothing to load before running it.
    pub has_steps: bool,
    /// When the workflow's time runs out, if it has a timeout.
    pub deadline: Option<i64>,
    /// The trace context its starter recorded (the JSON of its `dbos.otelContext` attribute).
    pub trace_context: Option<String>,
    /// When it became ready to start (epoch ms): its `created_at`, or its due time if it was
    /// delayed (a debounced workflow's `created_at` is its first call's).
    pub ready_at: i64,
}

/// What a claim found besides the workflows it took.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimOutcome {
    /// In priority, then FIFO order.
    pub claimed: Vec<Claimed>,
    /// How many wanted rows the shared limits allowed (the claim may take fewer: locked rows,
    /// or none enqueued).
    pub allowed: i64,
    /// The rate limit (not the caller's slots) was what stopped the claim.
    pub rate_limited: bool,
    /// `DELAYED` rows that became due and are now `ENQUEUED`.
    pub promoted: i64,
    /// The earliest future due time of this queue's `DELAYED` rows.
    pub next_due: Option<i64>,
    /// `ENQUEUED` rows seen before the claim, counted up to one more than the claim could take:
    /// more than it took means work is still waiting.
    pub seen: i64,
    /// When rate-limited: when the oldest start leaves the window, freeing a start.
    pub rate_free_at: Option<i64>,
    /// The key of the first `ENQUEUED` row seen at or above the floor (Postgres only).
    pub head: Option<QueueKey>,
    /// The queue is paused (`sysdb::pauses`): nothing was allowed.
    pub paused: bool,
}

impl ClaimRequest {
    /// Whether a taken row counts against a rate limit (the queue's or its partitions').
    pub(crate) fn rate_limited(&self) -> bool {
        self.queue.rate_limit.is_some() || self.queue.partition_rate_limit.is_some()
    }
}

/// Orders taken rows by their dispatch key (priority, `created_at`): `UPDATE ... RETURNING` has
/// no order of its own.
pub(crate) fn in_dispatch_order(mut keyed: Vec<(QueueKey, Claimed)>) -> Vec<Claimed> {
    keyed.sort_by_key(|(key, _)| *key);
    keyed.into_iter().map(|(_, c)| c).collect()
}

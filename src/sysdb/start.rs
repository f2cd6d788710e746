//! Creating workflow rows: direct starts and enqueues that run here at once (`PENDING`, owned at
//! once), and enqueues that wait (`ENQUEUED` or `DELAYED`). Postgres announces waiting enqueues
//! on [`QUEUE_CHANNEL`] so listening executors claim without waiting for a poll.
//!
//! **Inputs go in the status row** (`workflow_status.inputs`), not a `workflow_input` row: DBOS
//! 3.4 and stead read `COALESCE(workflow_input.inputs, workflow_status.inputs)` everywhere, so
//! a start costs one heap tuple and two index entries fewer (W9, "Churn"). A `workflow_input`
//! row written later (a debounce replacing the inputs, DBOS's own writes) still wins.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::base::clock::now_ms;
use crate::sysdb::OutgoingMessage;

/// The channel an enqueue is announced on; the payload is the queue's name.
pub(crate) const QUEUE_CHANNEL: &str = "stead_queue_channel";

/// A workflow row to create.
#[derive(Debug, Clone)]
pub(crate) struct NewWorkflow {
    pub id: String,
    pub name: String,
    /// The owner token of a direct start, which runs at once; `None` for an enqueue.
    pub owner: Option<String>,
    /// Inputs in the `{"positionalArgs":[..],"namedArgs":{}}` envelope.
    pub inputs: String,
    pub queue: Option<String>,
    pub priority: i32,
    pub dedup_id: Option<String>,
    pub partition_key: Option<String>,
    /// An enqueue that waits until then (`DELAYED`).
    pub delay_until: Option<i64>,
    /// The workflow's timeout; its deadline is set now for a direct start, at claim otherwise.
    pub timeout_ms: Option<i64>,
    /// A deadline fixed now (a direct start with a timeout, or a child inheriting its parent's).
    pub deadline: Option<i64>,
    /// The workflow that started this one as its child.
    pub parent: Option<String>,
    pub executor_id: String,
    /// `None`: any executor running the latest version may run it.
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    /// Custom attributes, a JSON object (DBOS's `attributes` column).
    pub attributes: Option<String>,
    /// Stamped when the request was made (strictly increasing in this process): the queue's
    /// order is the order of submission, however the writes interleave.
    pub created_at: i64,
    /// Signal-with-start's message to this workflow, sent in the start's transaction when the
    /// row is created or already is this workflow (never on a conflict or a duplicate).
    pub message: Option<Box<OutgoingMessage>>,
    /// The shard key it lives under on a sharded layout (a tenant); `None`: its id. Ignored
    /// on one bucket.
    pub shard_key: Option<String>,
}

impl NewWorkflow {
    pub(crate) fn status(&self) -> &'static str {
        match (&self.owner, self.delay_until) {
            (Some(_), _) => "PENDING",
            (None, Some(_)) => "DELAYED",
            (None, None) => "ENQUEUED",
        }
    }

    /// Whether this start's message goes with `outcome`: the row is (now) this workflow's.
    pub(crate) fn delivers_message(&self, outcome: &StartOutcome) -> bool {
        self.message.is_some()
            && match outcome {
                StartOutcome::Created => true,
                StartOutcome::Existing { name, .. } => *name == self.name,
                StartOutcome::Duplicate { .. } => false,
            }
    }

    /// The key its bucket is chosen by on a sharded layout: the shard key the caller gave, else
    /// its queue's deduplication id (so every workflow holding one meets in one bucket's unique
    /// index, and deduplication holds across buckets), else its partition key (so a partition's
    /// limits are counted where all its workflows are), else its id.
    pub(crate) fn placement_key(&self) -> &str {
        self.shard_key
            .as_deref()
            .or(self.dedup_id.as_deref())
            .or(self.partition_key.as_deref())
            .unwrap_or(&self.id)
    }

    /// The queue's deduplication key, when it has one.
    pub(crate) fn dedup_key(&self) -> Option<(&str, &str)> {
        Some((self.queue.as_deref()?, self.dedup_id.as_deref()?))
    }
}

/// What creating a workflow row found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartOutcome {
    /// The row is ours (created now, or by an earlier attempt of this same request).
    Created,
    /// A workflow with this id already existed.
    Existing { name: String, status: String },
    /// The queue's deduplication id is held by this running workflow.
    Duplicate { holder: String },
}

/// `created_at` orders a queue (FIFO within a priority) but has only millisecond resolution:
/// rows this process creates get strictly increasing values, so two enqueues within one
/// millisecond keep their order (the stamp may run a few ms ahead of the clock under bursts).
static LAST_CREATED: AtomicI64 = AtomicI64::new(0);

pub(crate) fn next_created_at() -> i64 {
    let now = now_ms();
    let mut last = LAST_CREATED.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST_CREATED.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// A time no row this process stamped so far is later than: the clock, or the last stamp
/// when bursts ran it ahead. (Rows stamped or claimed from now on are later, or at most equal.)
pub(crate) fn stamped_until() -> i64 {
    now_ms().max(LAST_CREATED.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_at_is_strictly_increasing_within_a_process() {
        let stamps: Vec<i64> = (0..1000).map(|_| next_created_at()).collect();
        assert!(stamps.windows(2).all(|w| w[1] > w[0]));
    }
}

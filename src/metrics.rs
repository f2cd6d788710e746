//! Metric names and the calls that emit them, through the `metrics` facade.
//!
//! Names are stable: dashboards depend on them. Without an installed recorder every call is a
//! no-op, so emitting on the hot path costs next to nothing.

use std::time::Duration;

/// Counter: workflows started in this process, by `workflow`.
pub const WORKFLOWS_STARTED: &str = "stead_workflows_started_total";
/// Counter: workflows finished in this process, by `workflow` and final `status`.
pub const WORKFLOWS_FINISHED: &str = "stead_workflows_finished_total";
/// Gauge: workflow actors running in this process.
pub const WORKFLOWS_RUNNING: &str = "stead_workflows_running";
/// Counter: workflows re-dispatched after a crash (recovery, or a panic restart), by `workflow`.
pub const WORKFLOWS_RECOVERED: &str = "stead_workflow_recoveries_total";
/// Histogram: seconds a step's body took (all attempts), by `workflow`.
pub const STEP_DURATION: &str = "stead_step_duration_seconds";
/// Counter: step attempts that failed and were retried, by `workflow`.
pub const STEP_RETRIES: &str = "stead_step_retries_total";
/// Histogram: requests carried by one database flush, by `lane`.
pub const DB_FLUSH_SIZE: &str = "stead_db_flush_size";
/// Histogram: seconds one database flush took, by `lane`.
pub const DB_FLUSH_SECONDS: &str = "stead_db_flush_seconds";
/// Counter: failed database flushes, by `lane` and `kind` (`transient` or `query`).
pub const DB_ERRORS: &str = "stead_db_errors_total";
/// Gauge: `ENQUEUED` workflows of a queue (sampled on its polling timer), by `queue`.
pub const QUEUE_ENQUEUED: &str = "stead_queue_enqueued";
/// Gauge: workflows of a queue running in this process, by `queue`.
pub const QUEUE_RUNNING: &str = "stead_queue_running";
/// Counter: workflows claimed from a queue by this process, by `queue`.
pub const QUEUE_CLAIMED: &str = "stead_queue_claimed_total";
/// Counter: claims a queue's rate limit cut short, by `queue`.
pub const QUEUE_RATE_LIMITED: &str = "stead_queue_rate_limited_total";
/// Counter: enqueues answered by deduplication (rejected or returned the holder), by `queue`.
pub const QUEUE_DEDUPLICATED: &str = "stead_queue_deduplicated_total";
/// Histogram: seconds one claim took, by `queue`.
pub const QUEUE_CLAIM_SECONDS: &str = "stead_queue_claim_seconds";
/// Counter: actor restarts by the supervision tree, by `actor`.
pub const ACTOR_RESTARTS: &str = "stead_actor_restarts_total";
/// Counter: scheduled runs this process's scheduler enqueued (firings another executor enqueued
/// first are not counted), by `schedule`.
pub const SCHEDULE_FIRINGS: &str = "stead_schedule_firings_total";
/// Counter: finished workflows deleted by garbage collection.
pub const WORKFLOWS_COLLECTED: &str = "stead_workflows_collected_total";

pub(crate) fn workflow_started(workflow: &str) {
    metrics::counter!(WORKFLOWS_STARTED, "workflow" => workflow.to_owned()).increment(1);
}

pub(crate) fn workflow_finished(workflow: &str, status: &'static str) {
    metrics::counter!(WORKFLOWS_FINISHED, "workflow" => workflow.to_owned(), "status" => status)
        .increment(1);
}

pub(crate) fn workflows_running(delta: f64) {
    metrics::gauge!(WORKFLOWS_RUNNING).increment(delta);
}

pub(crate) fn workflow_recovered(workflow: &str) {
    metrics::counter!(WORKFLOWS_RECOVERED, "workflow" => workflow.to_owned()).increment(1);
}

pub(crate) fn step_finished(workflow: &str, took: Duration) {
    metrics::histogram!(STEP_DURATION, "workflow" => workflow.to_owned()).record(took);
}

pub(crate) fn step_retried(workflow: &str) {
    metrics::counter!(STEP_RETRIES, "workflow" => workflow.to_owned()).increment(1);
}

pub(crate) fn db_flushed(lane: &'static str, size: usize, took: Duration) {
    metrics::histogram!(DB_FLUSH_SIZE, "lane" => lane).record(size as f64);
    metrics::histogram!(DB_FLUSH_SECONDS, "lane" => lane).record(took);
}

pub(crate) fn db_failed(lane: &'static str, transient: bool) {
    let kind = if transient { "transient" } else { "query" };
    metrics::counter!(DB_ERRORS, "lane" => lane, "kind" => kind).increment(1);
}

pub(crate) fn queue_claimed(queue: &str, n: usize, took: Duration, rate_limited: bool) {
    metrics::counter!(QUEUE_CLAIMED, "queue" => queue.to_owned()).increment(n as u64);
    metrics::histogram!(QUEUE_CLAIM_SECONDS, "queue" => queue.to_owned()).record(took);
    if rate_limited {
        metrics::counter!(QUEUE_RATE_LIMITED, "queue" => queue.to_owned()).increment(1);
    }
}

pub(crate) fn queue_depth(queue: &str, enqueued: i64) {
    metrics::gauge!(QUEUE_ENQUEUED, "queue" => queue.to_owned()).set(enqueued as f64);
}

pub(crate) fn queue_running(queue: &str, running: usize) {
    metrics::gauge!(QUEUE_RUNNING, "queue" => queue.to_owned()).set(running as f64);
}

pub(crate) fn queue_deduplicated(queue: &str) {
    metrics::counter!(QUEUE_DEDUPLICATED, "queue" => queue.to_owned()).increment(1);
}

pub(crate) fn actor_restarted(actor: &str) {
    metrics::counter!(ACTOR_RESTARTS, "actor" => actor.to_owned()).increment(1);
}

pub(crate) fn schedule_fired(schedule: &str, created: u64) {
    metrics::counter!(SCHEDULE_FIRINGS, "schedule" => schedule.to_owned()).increment(created);
}

pub(crate) fn workflows_collected(n: u64) {
    metrics::counter!(WORKFLOWS_COLLECTED).increment(n);
}

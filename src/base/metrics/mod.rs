//! Metric names and the calls that emit them, through the `metrics` facade. It owns the names
//! (stable: dashboards depend on them) and never keeps state of its own: without an installed
//! recorder every call is a no-op. With the `prometheus` feature, `install_prometheus` serves
//! them over HTTP.
//!
//! Counts are of what this process did; a fleet's totals are the sum over its executors.
//!
//! | name | type | labels | unit | what |
//! |---|---|---|---|---|
//! | `stead_workflows_started_total` | counter | `workflow` | workflows | created by this process (start, enqueue, debounce) |
//! | `stead_workflows_finished_total` | counter | `workflow`, `status` | workflows | outcomes recorded here: `SUCCESS`, `ERROR`, `CANCELLED` (a cancelled run stopped here), `MAX_RECOVERY_ATTEMPTS_EXCEEDED` |
//! | `stead_workflows_running` | gauge | | workflows | workflow actors alive |
//! | `stead_workflows_evicted` | gauge | | workflows | waiting workflows evicted from memory (an entry in the timer registry, no actor), set when the registry's timer task runs |
//! | `stead_workflow_recoveries_total` | counter | `workflow` | dispatches | re-dispatched after a crash: a panic restart, or a queue actor's take-back |
//! | `stead_launch_recoveries_total` | counter | | workflows | unfinished workflows of this executor put back on their queues at launch |
//! | `stead_steps_total` | counter | `workflow`, `outcome` (`ok`, `error`) | steps | step bodies run to an outcome (replays are not counted) |
//! | `stead_step_duration_seconds` | histogram | `workflow` | seconds | one step's body, all attempts and backoffs included |
//! | `stead_step_retries_total` | counter | `workflow` | attempts | failed step attempts that were retried |
//! | `stead_history_warnings_total` | counter | `workflow` | runs | executions whose history passed 80% of a limit (calls or bytes; once per execution) |
//! | `stead_history_refusals_total` | counter | `workflow` | calls | durable calls refused at a history limit |
//! | `stead_queue_enqueued` | gauge | `queue` | workflows | `ENQUEUED` rows of the queue (sampled on its polling timer) |
//! | `stead_queue_lag_seconds` | gauge | `queue` | seconds | age of the queue's oldest `ENQUEUED` workflow by its `created_at`, whatever its priority; 0 when none waits (sampled with `stead_queue_enqueued`) |
//! | `stead_queue_running` | gauge | `queue` | workflows | the queue's workflows running here |
//! | `stead_queue_claimed_total` | counter | `queue` | workflows | taken from the queue by this process (claims, and local enqueues run at once) |
//! | `stead_queue_claim_seconds` | histogram | `queue` | seconds | one claim statement, round trip included |
//! | `stead_queue_start_delay_seconds` | histogram | `queue` | seconds | each workflow this process took from the queue: from ready (enqueued, or due if delayed) to taken; a local enqueue run at once waits 0 |
//! | `stead_queue_rate_limited_total` | counter | `queue` | claims | claims the queue's rate limit cut short |
//! | `stead_queue_deduplicated_total` | counter | `queue` | enqueues | enqueues answered by deduplication (rejected, or given the holder) |
//! | `stead_db_flush_size` | histogram | `lane` | requests | requests one database flush carried |
//! | `stead_db_flush_seconds` | histogram | `lane` | seconds | one flush, round trip included |
//! | `stead_db_errors_total` | counter | `lane`, `kind` (`transient`, `query`) | flushes | failed flushes |
//! | `stead_actor_restarts_total` | counter | `actor` | restarts | restarts by the supervision tree (`database`, `listener`, `scheduler`, `queue:<name>`, ...) |
//! | `stead_schedule_firings_total` | counter | `schedule` | workflows | firings this process enqueued first |
//! | `stead_schedule_held_total` | counter | `schedule` | firings | firings this process's scheduler did not enqueue because of the schedule's overlap policy |
//! | `stead_workflows_collected_total` | counter | | workflows | finished workflows deleted by garbage collection |
//! | `stead_executors_live` | gauge | | executors | live stead executors of this application (sampled on the adoption timer) |
//! | `stead_adoptions_total` | counter | | workflows | dead executors' workflows this process put back on their queues |
//! | `stead_workflows_stranded` | gauge | | workflows | dead executors' `PENDING` workflows no live executor can run (sampled on the adoption timer) |
//! | `stead_fences_total` | counter | | fences | times this executor suspended its runs (no durable call starts) because it could not prove it was alive within its lease |
//!
//! Lanes are the database actor's connections: `start`, `checkpoint`, `finish`, `load_steps`,
//! `claim`, `ops`. With `install_prometheus` (feature `prometheus`), histograms of seconds use
//! `SECONDS_BUCKETS`, start delays `WAIT_BUCKETS` (up to an hour) and flush sizes `SIZE_BUCKETS`.
//!
//! **Queue lag.** Two series show a queue falling behind before it fails: the lag gauge (how
//! long the oldest waiting workflow has waited, whichever executor will run it) and the start
//! delay histogram (how long the workflows this process started had waited). The lag is sampled
//! where the depth is: by the claim on the polling timer (`sysdb::claim`, "Queue lag", for what
//! it reads and why it is free), or, when a tick sends no claim (every slot busy), by a read of
//! the queue's counts, so it keeps moving while the queue is saturated. The gauge counts from
//! `created_at` (a promoted delayed workflow still waiting counts from its enqueue), the
//! histogram from a delayed workflow's due time: the histogram reads each taken row anyway, the
//! gauge would have to read every waiting one. Both use this process's clock against the
//! enqueuer's `created_at`; a negative difference (clock skew) counts as 0.
//!
//! **Series from launch.** Every series is registered zero-valued where its label value becomes
//! known: the process's own and each lane's at launch, each registered workflow's at launch, a
//! queue's when its actor starts, an actor's when supervised, a schedule's when declared or armed.
//! A registration is a recorder lookup; the handles are dropped and the series stay. The Prometheus
//! tests scrape right after launch against the README's table.
//!
//! **Observation cost.** Metric handles of the hot path (per workflow name: started, outcomes,
//! steps, step duration, retries; per queue: claims, running, depth, lag, start delays) are
//! registered once (a workflow's at its first run, a queue's when its actor starts) and kept in the
//! registry entry and the queue actor: a labelled `metrics` macro allocates and hashes its key on
//! every call. Handles keep the recorder installed when they were made, so install a recorder
//! before launch. The workflow span is INFO; step spans are DEBUG and cover the attempts, not the
//! checkpoint write. Measured (W2, Prometheus recorder and an INFO `fmt` subscriber to a sink):
//! INFO step spans cost ~22 µs CPU per workflow (+22%), per-event labelled macros ~14 µs (+15%).
//! After both changes: metrics alone +2 µs, tracing alone +6 µs, of which ractor's own INFO `Actor`
//! spans (two per workflow actor) are ~4 µs (`ractor=warn` removes them).

#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::{
    install_prometheus, install_prometheus_recorder, PrometheusError, PrometheusHandle,
    SECONDS_BUCKETS, SIZE_BUCKETS, WAIT_BUCKETS,
};

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

/// Counter: workflows started in this process, by `workflow`.
pub const WORKFLOWS_STARTED: &str = "stead_workflows_started_total";
/// Counter: workflows finished in this process, by `workflow` and final `status`.
pub const WORKFLOWS_FINISHED: &str = "stead_workflows_finished_total";
/// Gauge: workflow actors running in this process.
pub const WORKFLOWS_RUNNING: &str = "stead_workflows_running";
/// Counter: workflows re-dispatched after a crash (a take-back, or a panic restart), by `workflow`.
pub const WORKFLOWS_RECOVERED: &str = "stead_workflow_recoveries_total";
/// Gauge: live stead executors of this application (sampled on the adoption timer).
pub const EXECUTORS_LIVE: &str = "stead_executors_live";
/// Counter: dead executors' workflows this process put back on their queues.
pub const ADOPTIONS: &str = "stead_adoptions_total";
/// Gauge: dead executors' `PENDING` workflows that no live executor can run.
pub const WORKFLOWS_STRANDED: &str = "stead_workflows_stranded";
/// Gauge: waiting workflows evicted from memory (a timer entry each, no actor).
pub const WORKFLOWS_EVICTED: &str = "stead_workflows_evicted";
/// Counter: times this executor fenced itself (suspended its runs: it could not prove it lived).
pub const FENCES: &str = "stead_fences_total";
/// Counter: unfinished workflows of this executor put back on their queues at launch.
pub const LAUNCH_RECOVERIES: &str = "stead_launch_recoveries_total";
/// Counter: step bodies run to an outcome, by `workflow` and `outcome` (`ok` or `error`).
pub const STEPS: &str = "stead_steps_total";
/// Histogram: seconds a step's body took (all attempts), by `workflow`.
pub const STEP_DURATION: &str = "stead_step_duration_seconds";
/// Counter: step attempts that failed and were retried, by `workflow`.
pub const STEP_RETRIES: &str = "stead_step_retries_total";
/// Counter: executions whose history passed 80% of a limit, by `workflow`.
pub const HISTORY_WARNINGS: &str = "stead_history_warnings_total";
/// Counter: durable calls refused at a history limit, by `workflow`.
pub const HISTORY_REFUSALS: &str = "stead_history_refusals_total";
/// Histogram: requests carried by one database flush, by `lane`.
pub const DB_FLUSH_SIZE: &str = "stead_db_flush_size";
/// Histogram: seconds one database flush took, by `lane`.
pub const DB_FLUSH_SECONDS: &str = "stead_db_flush_seconds";
/// Counter: failed database flushes, by `lane` and `kind` (`transient` or `query`).
pub const DB_ERRORS: &str = "stead_db_errors_total";
/// Gauge: `ENQUEUED` workflows of a queue (sampled on its polling timer), by `queue`.
pub const QUEUE_ENQUEUED: &str = "stead_queue_enqueued";
/// Gauge: seconds the oldest `ENQUEUED` workflow of a queue has waited (sampled with
/// [`QUEUE_ENQUEUED`]), by `queue`.
pub const QUEUE_LAG: &str = "stead_queue_lag_seconds";
/// Histogram: seconds from ready (enqueued, or due) to taken by this process, per workflow, by
/// `queue`.
pub const QUEUE_START_DELAY: &str = "stead_queue_start_delay_seconds";
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
/// Counter: firings this process's scheduler did not enqueue because an earlier run of the
/// schedule was unfinished (its overlap policy), by `schedule`.
pub const SCHEDULE_HELD: &str = "stead_schedule_held_total";
/// Counter: finished workflows deleted by garbage collection.
pub const WORKFLOWS_COLLECTED: &str = "stead_workflows_collected_total";

/// One workflow name's hot-path metrics, registered once (at launch, for every registered
/// workflow; for a name only a client enqueues, at its first use) instead of per event: a labelled macro call allocates and hashes its key every time. Registered handles
/// keep the recorder installed when they were made, so install a recorder before launching.
pub(crate) struct WorkflowMetrics {
    started: Counter,
    succeeded: Counter,
    failed: Counter,
    steps_ok: Counter,
    steps_failed: Counter,
    step_duration: Histogram,
    step_retries: Counter,
    history_warnings: Counter,
    history_refusals: Counter,
}

impl WorkflowMetrics {
    pub(crate) fn new(workflow: &str) -> Arc<WorkflowMetrics> {
        let name = || workflow.to_owned();
        let finished = |status: &'static str| metrics::counter!(WORKFLOWS_FINISHED, "workflow" => name(), "status" => status);
        let steps = |outcome: &'static str| metrics::counter!(STEPS, "workflow" => name(), "outcome" => outcome);
        // Series emitted through the macros below, registered now so they exist at zero.
        let _ = finished("CANCELLED");
        let _ = finished("MAX_RECOVERY_ATTEMPTS_EXCEEDED");
        let _ = metrics::counter!(WORKFLOWS_RECOVERED, "workflow" => name());
        Arc::new(WorkflowMetrics {
            started: metrics::counter!(WORKFLOWS_STARTED, "workflow" => name()),
            succeeded: finished("SUCCESS"),
            failed: finished("ERROR"),
            steps_ok: steps("ok"),
            steps_failed: steps("error"),
            step_duration: metrics::histogram!(STEP_DURATION, "workflow" => name()),
            step_retries: metrics::counter!(STEP_RETRIES, "workflow" => name()),
            history_warnings: metrics::counter!(HISTORY_WARNINGS, "workflow" => name()),
            history_refusals: metrics::counter!(HISTORY_REFUSALS, "workflow" => name()),
        })
    }

    pub(crate) fn started(&self) {
        self.started.increment(1);
    }

    pub(crate) fn finished(&self, workflow: &str, status: &'static str) {
        match status {
            "SUCCESS" => self.succeeded.increment(1),
            "ERROR" => self.failed.increment(1),
            other => workflow_finished(workflow, other),
        }
    }

    pub(crate) fn step_finished(&self, ok: bool, took: Duration) {
        if ok {
            &self.steps_ok
        } else {
            &self.steps_failed
        }
        .increment(1);
        self.step_duration.record(took);
    }

    pub(crate) fn step_retried(&self) {
        self.step_retries.increment(1);
    }

    pub(crate) fn history_warned(&self) {
        self.history_warnings.increment(1);
    }

    pub(crate) fn history_refused(&self) {
        self.history_refusals.increment(1);
    }
}

/// One queue's metrics, registered when its actor starts.
pub(crate) struct QueueMetrics {
    running: Gauge,
    claimed: Counter,
    claim_seconds: Histogram,
    enqueued: Gauge,
    lag: Gauge,
    start_delay: Histogram,
    rate_limited: Counter,
    workflows_running: Gauge,
}

impl QueueMetrics {
    pub(crate) fn new(queue: &str) -> QueueMetrics {
        let name = || queue.to_owned();
        QueueMetrics {
            running: metrics::gauge!(QUEUE_RUNNING, "queue" => name()),
            claimed: metrics::counter!(QUEUE_CLAIMED, "queue" => name()),
            claim_seconds: metrics::histogram!(QUEUE_CLAIM_SECONDS, "queue" => name()),
            enqueued: metrics::gauge!(QUEUE_ENQUEUED, "queue" => name()),
            lag: metrics::gauge!(QUEUE_LAG, "queue" => name()),
            start_delay: metrics::histogram!(QUEUE_START_DELAY, "queue" => name()),
            rate_limited: metrics::counter!(QUEUE_RATE_LIMITED, "queue" => name()),
            workflows_running: {
                // Emitted through the macro; registered now so it exists at zero.
                let _ = metrics::counter!(QUEUE_DEDUPLICATED, "queue" => name());
                metrics::gauge!(WORKFLOWS_RUNNING)
            },
        }
    }

    /// A claim statement's answer, at `now` (epoch ms): `ready_at`, when each workflow it took
    /// became ready to start.
    pub(crate) fn claimed(
        &self,
        took: Duration,
        rate_limited: bool,
        ready_at: impl Iterator<Item = i64>,
        now: i64,
    ) {
        for ready in ready_at {
            self.claimed.increment(1);
            self.start_delay.record(age(ready, now));
        }
        self.claim_seconds.record(took);
        if rate_limited {
            self.rate_limited.increment(1);
        }
    }

    /// A sample of the queue's `ENQUEUED` rows at `now` (epoch ms): how many, and the oldest's
    /// `created_at` (`None`: none waits).
    pub(crate) fn waiting(&self, depth: i64, oldest: Option<i64>, now: i64) {
        self.enqueued.set(depth as f64);
        self.lag.set(oldest.map_or(0.0, |t| age(t, now)));
    }

    /// A local enqueue took a slot this queue offered: claimed without a statement or a wait.
    pub(crate) fn claimed_locally(&self) {
        self.claimed.increment(1);
        self.start_delay.record(0.0);
    }

    pub(crate) fn running(&self, running: usize) {
        self.running.set(running as f64);
    }

    /// A workflow actor of this queue started (`1.0`) or exited (`-1.0`).
    pub(crate) fn workflows_running(&self, delta: f64) {
        self.workflows_running.increment(delta);
    }
}

/// Seconds from `since` to `now` (epoch ms); 0 when this process's clock is behind the writer's.
fn age(since: i64, now: i64) -> f64 {
    (now - since).max(0) as f64 / 1000.0
}

/// Registers the process's series that have no per-name label, and each lane's, zero-valued:
/// a scrape right after launch lists them, so alerts and `rate()` work before the first event.
/// Per-name series are registered where the name becomes known: workflows at launch (their
/// handles), queues when their actor starts, actors when supervised, schedules when armed.
///
/// Registering is asking the recorder for a handle; the handles are dropped, the series stay.
pub(crate) fn register_process(lanes: &[&'static str]) {
    let _ = metrics::gauge!(WORKFLOWS_RUNNING);
    let _ = metrics::counter!(LAUNCH_RECOVERIES);
    let _ = metrics::counter!(WORKFLOWS_COLLECTED);
    let _ = metrics::gauge!(EXECUTORS_LIVE);
    let _ = metrics::counter!(ADOPTIONS);
    let _ = metrics::gauge!(WORKFLOWS_STRANDED);
    let _ = metrics::counter!(FENCES);
    for &lane in lanes {
        let _ = metrics::histogram!(DB_FLUSH_SIZE, "lane" => lane);
        let _ = metrics::histogram!(DB_FLUSH_SECONDS, "lane" => lane);
        for kind in ["transient", "query"] {
            let _ = metrics::counter!(DB_ERRORS, "lane" => lane, "kind" => kind);
        }
    }
}

/// Registers actor `actor`'s restart counter at zero.
pub(crate) fn register_actor(actor: &str) {
    let _ = metrics::counter!(ACTOR_RESTARTS, "actor" => actor.to_owned());
}

/// Registers schedule `schedule`'s firing and held counters at zero.
pub(crate) fn register_schedule(schedule: &str) {
    let _ = metrics::counter!(SCHEDULE_FIRINGS, "schedule" => schedule.to_owned());
    let _ = metrics::counter!(SCHEDULE_HELD, "schedule" => schedule.to_owned());
}

pub(crate) fn workflow_started(workflow: &str) {
    metrics::counter!(WORKFLOWS_STARTED, "workflow" => workflow.to_owned()).increment(1);
}

pub(crate) fn workflow_finished(workflow: &str, status: &'static str) {
    metrics::counter!(WORKFLOWS_FINISHED, "workflow" => workflow.to_owned(), "status" => status)
        .increment(1);
}

pub(crate) fn workflow_recovered(workflow: &str) {
    metrics::counter!(WORKFLOWS_RECOVERED, "workflow" => workflow.to_owned()).increment(1);
}

pub(crate) fn launch_recovered(n: u64) {
    metrics::counter!(LAUNCH_RECOVERIES).increment(n);
}

pub(crate) fn fleet_sampled(live: usize, stranded: usize) {
    metrics::gauge!(EXECUTORS_LIVE).set(live as f64);
    metrics::gauge!(WORKFLOWS_STRANDED).set(stranded as f64);
}

pub(crate) fn adopted(n: u64) {
    metrics::counter!(ADOPTIONS).increment(n);
}

pub(crate) fn evicted(n: usize) {
    metrics::gauge!(WORKFLOWS_EVICTED).set(n as f64);
}

pub(crate) fn fenced() {
    metrics::counter!(FENCES).increment(1);
}

pub(crate) fn db_flushed(lane: &'static str, size: usize, took: Duration) {
    metrics::histogram!(DB_FLUSH_SIZE, "lane" => lane).record(size as f64);
    metrics::histogram!(DB_FLUSH_SECONDS, "lane" => lane).record(took);
}

pub(crate) fn db_failed(lane: &'static str, transient: bool) {
    let kind = if transient { "transient" } else { "query" };
    metrics::counter!(DB_ERRORS, "lane" => lane, "kind" => kind).increment(1);
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

pub(crate) fn schedule_held(schedule: &str, held: u64) {
    metrics::counter!(SCHEDULE_HELD, "schedule" => schedule.to_owned()).increment(held);
}

pub(crate) fn workflows_collected(n: u64) {
    metrics::counter!(WORKFLOWS_COLLECTED).increment(n);
}

/// Gives every metric its unit and description in the installed recorder (Prometheus shows
/// them as `# HELP`). Call it after installing a recorder of your own; `install_prometheus`
/// does.
pub fn describe() {
    use metrics::Unit;
    let counters = [
        (WORKFLOWS_STARTED, "Workflows created by this process"),
        (
            WORKFLOWS_FINISHED,
            "Workflow outcomes recorded by this process",
        ),
        (WORKFLOWS_RECOVERED, "Workflows re-dispatched after a crash"),
        (
            LAUNCH_RECOVERIES,
            "Unfinished workflows put back on their queues at launch",
        ),
        (STEPS, "Step bodies run to an outcome"),
        (STEP_RETRIES, "Failed step attempts that were retried"),
        (
            HISTORY_WARNINGS,
            "Workflow executions whose history passed 80% of a limit",
        ),
        (HISTORY_REFUSALS, "Durable calls refused at a history limit"),
        (
            QUEUE_CLAIMED,
            "Workflows taken from a queue by this process",
        ),
        (QUEUE_RATE_LIMITED, "Claims a queue's rate limit cut short"),
        (QUEUE_DEDUPLICATED, "Enqueues answered by deduplication"),
        (DB_ERRORS, "Failed database flushes"),
        (ACTOR_RESTARTS, "Actor restarts by the supervision tree"),
        (SCHEDULE_FIRINGS, "Scheduled runs this process enqueued"),
        (
            SCHEDULE_HELD,
            "Firings a schedule's overlap policy kept from being enqueued",
        ),
        (
            WORKFLOWS_COLLECTED,
            "Finished workflows deleted by garbage collection",
        ),
    ];
    for (name, help) in counters {
        metrics::describe_counter!(name, Unit::Count, help);
    }
    let gauges = [
        (WORKFLOWS_RUNNING, "Workflow actors alive"),
        (QUEUE_ENQUEUED, "ENQUEUED workflows of a queue"),
        (QUEUE_RUNNING, "A queue's workflows running in this process"),
    ];
    for (name, help) in gauges {
        metrics::describe_gauge!(name, Unit::Count, help);
    }
    metrics::describe_gauge!(
        QUEUE_LAG,
        Unit::Seconds,
        "Time the oldest ENQUEUED workflow of a queue has waited"
    );
    let seconds = [
        (
            STEP_DURATION,
            "Time one step's body took, attempts included",
        ),
        (QUEUE_CLAIM_SECONDS, "Time one claim took"),
        (
            QUEUE_START_DELAY,
            "Time a workflow taken from a queue here had waited to start",
        ),
        (DB_FLUSH_SECONDS, "Time one database flush took"),
    ];
    for (name, help) in seconds {
        metrics::describe_histogram!(name, Unit::Seconds, help);
    }
    metrics::describe_histogram!(
        DB_FLUSH_SIZE,
        Unit::Count,
        "Requests one database flush carried"
    );
}

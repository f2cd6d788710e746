//! The JSON shapes of the admin API, built from the library's types. Field names are stable:
//! the dashboard and operators' scripts read them. Times are epoch milliseconds.

use serde::Serialize;
use serde_json::Value;

use crate::base::clock::now_ms;
use crate::base::queue::QueueLimits;
use crate::base::queue::INTERNAL_QUEUE;
use crate::base::status::WorkflowStatus;
use crate::client::manage::WorkflowInfo;
use crate::client::observe::{AppQueueLoad, ThroughputBucket};
use crate::client::StepInfo;
use crate::error::PortableError;

/// A workflow's status record; with payloads when it is shown on its own.
#[derive(Debug, Serialize)]
pub(super) struct WorkflowView {
    id: String,
    name: String,
    status: &'static str,
    /// The stored text of a status no DBOS version defines (`status` is then `UNKNOWN`).
    #[serde(skip_serializing_if = "Option::is_none")]
    stored_status: Option<String>,
    /// Paused (`status` stays the stored one, DBOS's: `ENQUEUED`, or `PENDING` while its run
    /// stops).
    paused: bool,
    /// When it was paused (`null` unless paused).
    paused_at_ms: Option<i64>,
    queue: Option<String>,
    executor_id: Option<String>,
    app_version: Option<String>,
    app_name: Option<String>,
    recovery_attempts: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    started_at_ms: Option<i64>,
    completed_at_ms: Option<i64>,
    parent_workflow_id: Option<String>,
    forked_from: Option<String>,
    timeout_ms: Option<i64>,
    deadline_ms: Option<i64>,
    priority: i32,
    deduplication_id: Option<String>,
    partition_key: Option<String>,
    delay_until_ms: Option<i64>,
    attributes: Option<Value>,
    /// In a listing, the error of a failed workflow (the detail has it among its payloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<PortableError>,
    #[serde(flatten)]
    payloads: Option<Payloads>,
}

/// A workflow's input, output and error (`null` when absent or not in portable JSON).
#[derive(Debug, Serialize)]
struct Payloads {
    serialization: Option<String>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<PortableError>,
}

impl WorkflowView {
    /// The status record alone, for listings.
    pub(super) fn summary(info: WorkflowInfo) -> WorkflowView {
        let mut view = WorkflowView::from_status(info.status, None);
        view.error = info.error;
        view
    }

    /// The record with its payloads.
    pub(super) fn detail(info: WorkflowInfo) -> WorkflowView {
        let payloads = Payloads {
            serialization: info.serialization,
            input: info.input,
            output: info.output,
            error: info.error,
        };
        WorkflowView::from_status(info.status, Some(payloads))
    }

    fn from_status(s: WorkflowStatus, payloads: Option<Payloads>) -> WorkflowView {
        WorkflowView {
            status: s.status.as_str(),
            stored_status: s.stored_status,
            paused: s.paused_at_ms.is_some(),
            paused_at_ms: s.paused_at_ms,
            id: s.id,
            name: s.name,
            queue: s.queue_name,
            executor_id: s.executor_id,
            app_version: s.app_version,
            app_name: s.app_name,
            recovery_attempts: s.recovery_attempts,
            created_at_ms: s.created_at_ms,
            updated_at_ms: s.updated_at_ms,
            started_at_ms: s.started_at_ms,
            completed_at_ms: s.completed_at_ms,
            parent_workflow_id: s.parent_workflow_id,
            forked_from: s.forked_from,
            timeout_ms: s.timeout_ms,
            deadline_ms: s.deadline_ms,
            priority: s.priority,
            deduplication_id: s.deduplication_id,
            partition_key: s.partition_key,
            attributes: s.attributes,
            delay_until_ms: s.delay_until_ms,
            error: None,
            payloads,
        }
    }
}

/// One recorded durable call; its output and error only when they were loaded (their sizes
/// always: `null` when it has none).
#[derive(Debug, Serialize)]
pub(super) struct StepView {
    function_id: i32,
    name: String,
    output_bytes: Option<u64>,
    error_bytes: Option<u64>,
    child_workflow_id: Option<String>,
    started_at_ms: Option<i64>,
    completed_at_ms: Option<i64>,
    #[serde(flatten)]
    payloads: Option<StepPayloads>,
}

/// A call's output and error (`null` when absent or not in portable JSON).
#[derive(Debug, Serialize)]
struct StepPayloads {
    output: Option<Value>,
    error: Option<PortableError>,
}

impl StepView {
    /// The call, with its payloads when `outputs` says the listing loaded them.
    pub(super) fn new(s: StepInfo, outputs: bool) -> StepView {
        StepView {
            payloads: outputs.then_some(StepPayloads {
                output: s.output,
                error: s.error,
            }),
            function_id: s.function_id,
            name: s.name,
            output_bytes: s.output_bytes,
            error_bytes: s.error_bytes,
            child_workflow_id: s.child_workflow_id,
            started_at_ms: s.started_at_ms,
            completed_at_ms: s.completed_at_ms,
        }
    }
}

/// A queue's limits and load.
#[derive(Debug, Serialize)]
pub(super) struct QueueView {
    name: String,
    /// The application that defined it (`null`: shared by all).
    app: Option<String>,
    /// The internal queue (recovery, resume, fork, direct starts): defined by no row.
    internal: bool,
    #[serde(flatten)]
    limits: QueueLimits,
    /// Workflows waiting (`ENQUEUED`).
    depth: u64,
    /// How long the oldest waiting workflow has waited, in ms (0 when none waits).
    lag_ms: u64,
    /// Workflows running (`PENDING`).
    running: u64,
    /// Paused (no executor claims from it).
    paused: bool,
    /// When it was paused (epoch ms; `null` while it runs).
    paused_at_ms: Option<i64>,
}

impl From<AppQueueLoad> for QueueView {
    fn from(AppQueueLoad { app, load }: AppQueueLoad) -> QueueView {
        QueueView {
            app,
            internal: load.queue.name() == INTERNAL_QUEUE,
            name: load.queue.name().to_owned(),
            limits: load.queue.limits(),
            depth: load.enqueued,
            lag_ms: load
                .oldest_enqueued_ms
                .map_or(0, |t| (now_ms() - t).max(0) as u64),
            running: load.pending,
            paused: load.paused_at_ms.is_some(),
            paused_at_ms: load.paused_at_ms,
        }
    }
}

/// Completions over a window, per bucket.
#[derive(Debug, Serialize)]
pub(super) struct ThroughputView {
    bucket_ms: u64,
    buckets: Vec<BucketView>,
}

#[derive(Debug, Serialize)]
struct BucketView {
    start_ms: i64,
    succeeded: u64,
    failed: u64,
}

impl ThroughputView {
    pub(super) fn new(bucket_ms: u64, buckets: Vec<ThroughputBucket>) -> ThroughputView {
        ThroughputView {
            bucket_ms,
            buckets: buckets
                .into_iter()
                .map(|b| BucketView {
                    start_ms: b.start_ms,
                    succeeded: b.succeeded,
                    failed: b.failed,
                })
                .collect(),
        }
    }
}

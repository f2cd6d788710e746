//! A new workflow's row: the caller's options checked against the queue's definition and
//! turned into a `NewWorkflow` (id, queue, deadline, version, application, attributes). It writes
//! nothing, except that an unknown queue's name costs one read (`check_queue_defined`).

use std::time::Duration;

use super::Target;
use crate::base::attributes::{self, Attributes};
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::base::queue::INTERNAL_QUEUE;
use crate::engine::shared::SharedRef;
use crate::engine::start::WorkflowOptions;
use crate::error::{Error, Result};
use crate::sysdb::{self, NewWorkflow};

pub(super) fn new_row(
    shared: &SharedRef,
    target: Target<'_>,
    workflow: &str,
    input_json: &str,
    options: &WorkflowOptions,
    id: String,
) -> Result<NewWorkflow> {
    let queue = match target {
        Target::Direct if options.queue_only() => {
            return Err(Error::InvalidArgument(
                "priority, deduplication, delay and partition key apply to enqueues only".into(),
            ))
        }
        Target::Direct => None,
        Target::Queue(queue) => {
            check_queue_options(shared, queue, options)?;
            Some(queue.to_owned())
        }
    };
    let now = now_ms();
    let millis = |d: Duration| d.as_millis().min(i64::MAX as u128) as i64;
    let delay_until = options.delay.map(|d| now.saturating_add(millis(d)));
    let timeout_ms = options.timeout.map(millis);
    let inherited = options.parent.as_ref().and_then(|(_, deadline)| *deadline);
    // A direct start's clock starts now; an enqueue's when it is claimed.
    let own = match target {
        Target::Direct => timeout_ms.map(|t| now.saturating_add(t)),
        Target::Queue(_) => None,
    };
    let deadline = match (own, inherited) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(NewWorkflow {
        id,
        name: workflow.to_owned(),
        owner: matches!(target, Target::Direct).then(|| uuid::Uuid::new_v4().to_string()),
        inputs: codec::encode_inputs(input_json),
        queue,
        priority: options.priority.unwrap_or(0),
        dedup_id: options.dedup.as_ref().map(|(d, _)| d.clone()),
        partition_key: options.partition_key.clone(),
        delay_until,
        timeout_ms,
        deadline,
        parent: options.parent.as_ref().map(|(p, _)| p.clone()),
        executor_id: shared.config.executor_id.clone(),
        app_version: match shared.registry.get(workflow) {
            Some(_) => options
                .app_version
                .clone()
                .or_else(|| shared.config.own_version()),
            None => options.app_version.clone(),
        },
        // Unless told otherwise, a run on another application's queue is that application's:
        // only its executors claim it.
        app_name: options
            .app_name
            .clone()
            .or_else(|| foreign_owner(shared, target))
            .or_else(|| shared.config.app_name.clone()),
        attributes: stored_attributes(options.attributes.as_ref())?,
        created_at: sysdb::next_created_at(),
        shard_key: options.shard_key.clone(),
        message: None,
    })
}

/// The attributes a new workflow stores: the given ones, plus (feature `otel`) the current span's
/// trace context under `dbos.otelContext` unless they carry one already.
fn stored_attributes(given: Option<&Attributes>) -> Result<Option<String>> {
    #[cfg(feature = "otel")]
    if let Some(with_trace) = crate::base::otel::with_current_trace(given) {
        return attributes::encode(&with_trace).map(Some);
    }
    given.map(attributes::encode).transpose()
}

/// A generated workflow id: a UUIDv7, so ids grow with time and a new row's index entries land
/// at the right edge of the system tables' B-trees, not on a random page of a long history
/// that may no longer be cached. Forks, debounces and unkeyed messages use UUIDv7 too; DBOS
/// reads ids as opaque text.
pub(crate) fn new_workflow_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The application that defined `target`'s queue, when it is not this one.
fn foreign_owner(shared: &SharedRef, target: Target<'_>) -> Option<String> {
    match target {
        Target::Queue(queue) => shared
            .directory
            .foreign_queues
            .get(queue)
            .map(|owner| owner.clone()),
        Target::Direct => None,
    }
}

/// Refuses an enqueue to a queue no definition names (unless `allowed`):
/// known names answer at once, others are looked up in the database.
pub(crate) async fn check_queue_defined(
    shared: &SharedRef,
    queue: &str,
    allowed: bool,
) -> Result<()> {
    crate::names::validate_name(queue, "queue name")?;
    if allowed || queue == INTERNAL_QUEUE || shared.directory.queue_names.contains(queue) {
        return Ok(());
    }
    // Any application's definition counts: names are unique across applications, and a client
    // of no application (or another one) may feed an application's queue.
    let defs = shared
        .db
        .call(|db| async move { db.list_all_queues().await })
        .await?;
    let own = shared.config.app_name.as_deref();
    for (app, q) in &defs {
        shared.directory.queue_names.insert(q.name.clone());
        match app.as_deref() {
            Some(owner) if Some(owner) != own => {
                shared
                    .directory
                    .foreign_queues
                    .insert(q.name.clone(), owner.to_owned());
            }
            _ => {
                shared.directory.foreign_queues.remove(&q.name);
            }
        }
    }
    if shared.directory.queue_names.contains(queue) {
        Ok(())
    } else {
        Err(Error::UnknownQueue(queue.to_owned()))
    }
}

/// Checks queue options against the queue's definition, when this process knows it.
pub(super) fn check_queue_options(
    shared: &SharedRef,
    queue: &str,
    options: &WorkflowOptions,
) -> Result<()> {
    crate::names::validate_name(queue, "queue name")?;
    if let Some((dedup, _)) = &options.dedup {
        crate::names::validate_name(dedup, "deduplication id")?;
    }
    if let Some(key) = &options.partition_key {
        crate::names::validate_name(key, "partition key")?;
    }
    let Some(def) = shared.directory.queue_defs.get(queue) else {
        return Ok(());
    };
    let bad = |what: &str| Err(Error::InvalidArgument(format!("queue {queue:?}: {what}")));
    match (def.partitioned, options.partition_key.is_some()) {
        (true, false) => return bad("a partitioned queue needs a partition key"),
        (false, true) => return bad("a partition key needs a partitioned queue"),
        _ => {}
    }
    if options.priority.is_some_and(|p| p != 0) && !def.priority_enabled {
        return bad("priority is not enabled");
    }
    Ok(())
}

//! Load endpoints: every application's queues with their limits, depth and running counts, and how many
//! workflows completed per time bucket recently; pausing and resuming a queue.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::params::{self, pairs, QueryPairs};
use super::reply::ApiError;
use super::views::{QueueView, ThroughputView};
use super::AdminState;

/// `GET /api/queues?app=`: the internal queue first, then every application's queues (only
/// `app`'s and those shared by all, when given) by name, each with its application.
pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let app = params::queue_app(&pairs(query)?)?;
    let loads = state.client.all_queue_loads(app.as_deref()).await?;
    let views: Vec<QueueView> = loads.into_iter().map(QueueView::from).collect();
    Ok(Json(json!({ "queues": views })))
}

/// `GET /api/throughput?minutes=&bucket=`: completions per bucket, oldest first.
pub(super) async fn throughput(
    State(state): State<Arc<AdminState>>,
    query: QueryPairs,
) -> Result<Json<ThroughputView>, ApiError> {
    let (window, bucket) = params::throughput(&pairs(query)?)?;
    let buckets = state.client.throughput(window, bucket).await?;
    let bucket_ms = u64::try_from(bucket.as_millis()).unwrap_or(u64::MAX);
    Ok(Json(ThroughputView::new(bucket_ms, buckets)))
}

/// `POST /api/queues/{name}/pause`: no executor claims from it until resumed; answers whether
/// it was running before.
pub(super) async fn pause(
    State(state): State<Arc<AdminState>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let paused = state.client.pause_queue(&name).await?;
    Ok(Json(
        json!({ "queue": name, "paused": true, "changed": paused }),
    ))
}

/// `POST /api/queues/{name}/resume`: its waiting work is claimed again; answers whether it was
/// paused before.
pub(super) async fn resume(
    State(state): State<Arc<AdminState>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let resumed = state.client.resume_queue(&name).await?;
    Ok(Json(
        json!({ "queue": name, "paused": false, "changed": resumed }),
    ))
}

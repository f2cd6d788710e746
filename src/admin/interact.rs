//! Talking to a running workflow over HTTP: `POST /api/workflows/{id}/update` sends an update
//! and answers its output; `POST /api/workflows/{id}/signal-with-start` sends a message,
//! enqueueing the workflow under that id first if none has it. Thin over `Client::update_json`
//! and `Client::signal_with_start`; the errors are the library's (`reply.rs` maps them: a refused
//! update or a finished workflow is a 409, a failed handler a 422, a timeout a 504).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::reply::ApiError;
use super::AdminState;
use crate::base::queue::INTERNAL_QUEUE;
use crate::client::UpdateOptions;
use crate::engine::request::WorkflowOptions;

/// How long an update waits for its answer unless the body says (`timeout_ms`), and the most
/// it may say: a request holds its connection that long.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
const MAX_WAIT: Duration = Duration::from_secs(300);

/// `{"name": .., "input"?: any, "update_id"?: .., "timeout_ms"?: n}`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdateBody {
    name: String,
    #[serde(default)]
    input: Value,
    update_id: Option<String>,
    timeout_ms: Option<u64>,
}

/// `{"workflow": .., "input"?: any, "message": any, "topic"?: .., "queue"?: ..}`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignalBody {
    workflow: String,
    #[serde(default)]
    input: Value,
    message: Value,
    topic: Option<String>,
    queue: Option<String>,
}

/// `POST /api/workflows/{id}/update`: answers `{"id", "update_id", "output"}`.
pub(super) async fn update(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    body: Result<Json<UpdateBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_param("body", e.body_text()))?;
    let wait = body
        .timeout_ms
        .map_or(DEFAULT_WAIT, Duration::from_millis)
        .min(MAX_WAIT);
    let update_id = body
        .update_id
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let options = UpdateOptions::with_id(&update_id).timeout(wait);
    let output = state
        .client
        .update_json(&id, &body.name, &body.input, options)
        .await?;
    Ok(Json(
        json!({ "id": id, "update_id": update_id, "output": output }),
    ))
}

/// `POST /api/workflows/{id}/signal-with-start`: answers `{"id", "status"}`.
pub(super) async fn signal_with_start(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    body: Result<Json<SignalBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_param("body", e.body_text()))?;
    let queue = body.queue.as_deref().unwrap_or(INTERNAL_QUEUE);
    let handle = state
        .client
        .signal_with_start(
            queue,
            body.workflow.as_str(),
            body.input,
            WorkflowOptions::with_id(&id),
            &body.message,
            body.topic.as_deref(),
        )
        .await?;
    let status = handle.status().await?.status;
    Ok(Json(json!({ "id": id, "status": status.as_str() })))
}

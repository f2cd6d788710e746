//! Fleet endpoints: the executors (live or dead, with their `PENDING` counts), the stranded
//! workflows (a dead executor's work no live executor can run) and moving them onto a version.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::params::MoveBody;
use super::reply::ApiError;
use super::views::WorkflowView;
use super::AdminState;

/// `GET /api/executors`: live ones first.
pub(super) async fn executors(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<Value>, ApiError> {
    let executors = state.client.list_executors().await?;
    Ok(Json(json!({ "executors": executors })))
}

/// `GET /api/stranded`: the stranded workflows, oldest first, and the command that moves them.
pub(super) async fn stranded(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<Value>, ApiError> {
    let found = state.client.stranded_workflows().await?;
    let views: Vec<WorkflowView> = found.into_iter().map(WorkflowView::summary).collect();
    Ok(Json(json!({
        "workflows": views,
        "move_with": "POST /api/stranded/move {\"app_version\": \"<version>\"} \
                      (or: stead workflow stranded --move-to <version>)",
    })))
}

/// `POST /api/stranded/move` with `{"app_version": "<version>"}`: how many moved.
pub(super) async fn move_stranded(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<MoveBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_param("body", e.body_text()))?;
    if body.app_version.is_empty() {
        return Err(ApiError::bad_param("app_version", "must not be empty"));
    }
    let moved = state.client.move_stranded(&body.app_version).await?;
    Ok(Json(
        json!({ "moved": moved, "app_version": body.app_version }),
    ))
}

//! Workflow endpoints: list (filtered), one workflow with its payloads, its steps (in pages,
//! with or without outputs; one step's output on demand: see `client::steps`), and the
//! operator's actions (cancel, pause, resume, fork, change attributes) on one workflow or, by
//! filter, on many (`POST /api/batch`). Each answers JSON; an unknown id is a 404.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::params::{self, pairs, AttributesBody, BatchBody, ForkBody, QueryPairs};
use super::reply::ApiError;
use super::views::{StepView, WorkflowView};
use super::AdminState;
use crate::client::manage::{ListWorkflows, WorkflowInfo};

/// `GET /api/workflows?status=&name=&queue=&app=&attribute=&limit=&offset=&order=`
pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    // Payloads for each row's error (the list shows it); inputs and outputs are not sent.
    let filter = params::list_filter(&pairs(query)?)?.with_payloads();
    let found = state.client.list_workflows(filter).await?;
    let views: Vec<WorkflowView> = found.into_iter().map(WorkflowView::summary).collect();
    Ok(Json(json!({ "workflows": views })))
}

/// `GET /api/counts?status=&name=&queue=&app=&attribute=`: how many workflows match,
/// per status (statuses with none absent), and their total.
pub(super) async fn counts(
    State(state): State<Arc<AdminState>>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let filter = params::count_filter(&pairs(query)?)?;
    let counts = state.client.count_workflows(filter).await?;
    let total: u64 = counts.values().sum();
    Ok(Json(json!({ "counts": counts, "total": total })))
}

/// `GET /api/workflows/{id}`: the status record with input, output and error.
pub(super) async fn get(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<WorkflowView>, ApiError> {
    let info = find(&state, &id, true).await?;
    Ok(Json(WorkflowView::detail(info)))
}

/// `GET /api/workflows/{id}/steps?outputs=&after=&limit=`: a page of its recorded calls, in
/// order (1000 by default), and `next_after`, the `after` of the next page (`null` on the last).
pub(super) async fn steps(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let (listing, outputs) = params::step_listing(&pairs(query)?)?;
    find(&state, &id, false).await?;
    let page = state.client.list_steps(&id, listing).await?;
    let views: Vec<StepView> = page
        .steps
        .into_iter()
        .map(|s| StepView::new(s, outputs))
        .collect();
    Ok(Json(
        json!({ "workflow_id": id, "steps": views, "next_after": page.next }),
    ))
}

/// `GET /api/workflows/{id}/steps/{function_id}`: one recorded call with its output and error.
pub(super) async fn step(
    State(state): State<Arc<AdminState>>,
    Path((id, function_id)): Path<(String, String)>,
) -> Result<Json<StepView>, ApiError> {
    let function_id = params::function_id("function_id", &function_id)?;
    find(&state, &id, false).await?;
    match state.client.step(&id, function_id).await? {
        Some(step) => Ok(Json(StepView::new(step, true))),
        None => Err(ApiError::not_found(format!(
            "workflow {id:?} has no step {function_id}"
        ))),
    }
}

/// `POST /api/workflows/{id}/cancel`: answers the status after the cancel.
pub(super) async fn cancel(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.client.cancel(&id).await?;
    status_reply(&state, &id).await
}

/// `POST /api/workflows/{id}/pause`: it stops before its next durable call and runs no more
/// until resumed; answers the status after the pause (a finished workflow is a 409).
pub(super) async fn pause(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.client.pause_workflow(&id).await?;
    status_reply(&state, &id).await
}

/// `POST /api/workflows/{id}/resume`: a paused workflow continues where it stopped, another
/// resumes from its last checkpoint; answers the status after the resume.
pub(super) async fn resume(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.client.resume(&id).await?;
    status_reply(&state, &id).await
}

/// `POST /api/workflows/{id}/fork` with `{"step": N, "id"?, "queue"?, "app_version"?}`:
/// answers the copy's id.
pub(super) async fn fork(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    body: Result<Json<ForkBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_param("body", e.body_text()))?;
    let (step, options) = body.into_options()?;
    let copy = state.client.fork(&id, step, options).await?;
    Ok(Json(
        json!({ "id": copy.id(), "forked_from": id, "step": step }),
    ))
}

/// `POST /api/workflows/{id}/attributes` with `{"attributes": {..} | null, "merge"?: bool}`:
/// replaces, merges (top-level keys) or clears them; answers the attributes now.
pub(super) async fn attributes(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    body: Result<Json<AttributesBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_param("body", e.body_text()))?;
    match (body.attributes, body.merge) {
        (Some(given), true) => state.client.merge_workflow_attributes(&id, given).await?,
        (None, true) => {
            return Err(ApiError::bad_param(
                "attributes",
                "a merge needs an object, not null",
            ))
        }
        (given, false) => state.client.update_workflow_attributes(&id, given).await?,
    }
    let info = find(&state, &id, false).await?;
    Ok(Json(
        json!({ "id": id, "attributes": info.status.attributes }),
    ))
}

/// `POST /api/batch` with `{"action", "where"?, "all"?, "dry_run"?, "page_size"?,
/// "max_pages"?, "app_version"?}` (see `params::BatchBody`): runs the batch to its end (or
/// `max_pages`) before answering, and answers its totals (`done` false: run it again to go on).
pub(super) async fn batch(
    State(state): State<Arc<AdminState>>,
    body: Result<Json<BatchBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_param("body", e.body_text()))?;
    let batch = body.into_batch()?;
    let action = batch.action();
    let totals = state.client.run_batch(batch, |_| {}).await?;
    let mut value = serde_json::to_value(totals).unwrap_or_default();
    value["action"] = action.into();
    Ok(Json(value))
}

/// Workflow `id`, or a 404 naming it.
async fn find(state: &AdminState, id: &str, payloads: bool) -> Result<WorkflowInfo, ApiError> {
    let mut filter = ListWorkflows::new().ids([id]);
    if payloads {
        filter = filter.with_payloads();
    }
    let found = state.client.list_workflows(filter).await?;
    found
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::from(crate::error::Error::NotFound(id.to_owned())))
}

async fn status_reply(state: &AdminState, id: &str) -> Result<Json<Value>, ApiError> {
    let info = find(state, id, false).await?;
    let s = &info.status;
    Ok(Json(
        json!({ "id": id, "status": s.status.as_str(), "paused": s.is_paused() }),
    ))
}

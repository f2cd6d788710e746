//! Probes and metrics: `/healthz` (the server answers), `/readyz` (the system database
//! answers, within a few seconds) and `/metrics` (the Prometheus recorder given in the options).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::reply::ApiError;
use super::AdminState;

/// Longer than this without an answer from the database is "not ready".
const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET /healthz`: always 200 while the server runs.
pub(super) async fn live() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when the system database answers, else 503 with the reason.
pub(super) async fn ready(State(state): State<Arc<AdminState>>) -> Result<Json<Value>, ApiError> {
    match tokio::time::timeout(READY_TIMEOUT, state.client.ping()).await {
        Ok(Ok(())) => Ok(Json(json!({ "status": "ready" }))),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the system database is not reachable: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the system database did not answer within {READY_TIMEOUT:?}"),
        )),
    }
}

/// `GET /metrics`: the Prometheus text format, or 404 when no recorder was given.
pub(super) async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    match &state.prometheus {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => ApiError::not_found(
            "no Prometheus recorder was given to the admin server (AdminOptions::prometheus)",
        )
        .into_response(),
    }
}

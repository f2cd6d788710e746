//! Error replies: every failure is JSON `{"error": "<message>"}` with a status that says whose
//! fault it was (4xx: the request's, naming the bad parameter; 5xx: the server's).

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::{DbError, Error};

/// A failed request: its status and the message the caller sees.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// Parameter `name` was malformed.
    pub(super) fn bad_param(name: &str, problem: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("parameter {name:?}: {problem}"),
        )
    }

    pub(super) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        (self.status, Json(body)).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let status = match &e {
            Error::NotFound(_) | Error::UnknownSchedule(_) | Error::UnknownAppVersion(_) => {
                StatusCode::NOT_FOUND
            }
            Error::InvalidArgument(_) | Error::UnknownQueue(_) => StatusCode::BAD_REQUEST,
            Error::ValueTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::QueueNotEmpty { .. }
            | Error::WorkflowFinished { .. }
            | Error::WorkflowConflict { .. }
            | Error::UpdateRejected { .. } => StatusCode::CONFLICT,
            Error::UpdateFailed { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::UpdateTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Error::Shutdown | Error::Fatal(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Database(DbError::Transient(_) | DbError::Closed) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        // The database's own text (statements, values, server details) stays in the log.
        if let Error::Database(db) = &e {
            tracing::warn!(error = %db, "an admin request failed in the system database");
            return ApiError::new(status, "the system database failed; see the server's log");
        }
        ApiError::new(status, e.to_string())
    }
}

/// Any path no route matches.
pub(super) async fn no_route(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no endpoint at {}", uri.path()))
}

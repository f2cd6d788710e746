//! Request bodies arrive whole and in time: a body is read before any handler runs, within the
//! server's body timeout and up to [`MAX_BODY`] bytes. A `Content-Length` over the limit is
//! answered `413` at once, before any byte of the body is read; a slower body (a
//! `Content-Length` larger than what is sent) is answered `408`. Both close the connection, so
//! it holds nothing open.
//!
//! It never interprets a body; handlers parse the bytes it hands on.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::reply::ApiError;
use super::AdminState;

/// The largest body an admin request may carry (a fork's options are a few hundred bytes).
const MAX_BODY: usize = 64 * 1024;

/// Reads the whole body within the timeout, then runs the request with it.
pub(super) async fn in_time(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if let Some(declared) = declared_length(&parts.headers).filter(|n| *n > MAX_BODY as u64) {
        let message = format!("the request body is {declared} bytes; the limit is {MAX_BODY}");
        return closing(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message));
    }
    let read = axum::body::to_bytes(body, MAX_BODY);
    match tokio::time::timeout(state.body_timeout, read).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(_)) => {
            let message = format!("the request body is over {MAX_BODY} bytes or malformed");
            closing(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message))
        }
        Err(_) => closing(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time",
        )),
    }
}

/// The body's length as the client declared it, if it did in a form that parses.
fn declared_length(headers: &header::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The error, telling the client the connection closes (its unread body cannot be skipped).
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

//! The bearer token: when one is configured, a request passes only with
//! `Authorization: Bearer <token>` (or, for the dashboard page alone, `?token=<token>`, since a
//! browser cannot send a header when it navigates). It never logs or echoes the token.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

use super::reply::ApiError;
use super::{AdminError, AdminState};

/// A token must fit an HTTP header value unchanged.
pub(super) fn validate(token: &str) -> Result<(), AdminError> {
    let printable = token.bytes().all(|b| b.is_ascii_graphic());
    if token.is_empty() || !printable {
        return Err(AdminError::InvalidToken);
    }
    Ok(())
}

/// Lets the request through when no token is configured or it presents the right one.
pub(super) async fn require_token(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = state.token.as_deref() else {
        return next.run(request).await;
    };
    if presented(&request).is_some_and(|given| same(given.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    if is_page(&request) {
        return (StatusCode::UNAUTHORIZED, Html(TOKEN_FORM)).into_response();
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token: send `Authorization: Bearer <token>`",
    )
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

/// The token the request carries, if any.
fn presented(request: &Request) -> Option<String> {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned());
    if bearer.is_some() || !is_page(request) {
        return bearer;
    }
    Query::<HashMap<String, String>>::try_from_uri(request.uri())
        .ok()
        .and_then(|Query(mut q)| q.remove("token"))
}

fn is_page(request: &Request) -> bool {
    request.method() == Method::GET && request.uri().path() == "/"
}

/// Compares without stopping at the first difference, so timing tells nothing of the token.
fn same(given: &[u8], expected: &[u8]) -> bool {
    let differ = given
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    differ == 0 && given.len() == expected.len()
}

/// What a browser sees at `/` without the token: a form that reloads the page with it.
const TOKEN_FORM: &str = "<!doctype html><meta charset=utf-8><title>stead admin</title>\
<body style=\"font-family:sans-serif;margin:3em\"><h1>stead admin</h1>\
<p>This dashboard requires the admin token.</p>\
<form method=get action=\"\"><input type=password name=token autofocus \
placeholder=token> <button>Open</button></form></body>";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_must_fit_a_header() {
        assert!(validate("abc-123_XYZ").is_ok());
        for bad in ["", "with space", "new\nline", "caf\u{e9}"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn comparison_needs_every_byte_and_the_length() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secreT", b"secret"));
        assert!(!same(b"secret-more", b"secret"));
        assert!(!same(b"", b"secret"));
    }
}

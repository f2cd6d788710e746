//! Defences against other web pages open in the operator's browser: a loopback server answers
//! only requests addressed to a loopback host (a rebound DNS name is refused), and an action
//! (`POST`) must be JSON, which a page of another origin can send only after a CORS preflight
//! this server never grants (a plain cross-site form cannot).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::reply::ApiError;
use super::AdminState;

/// Refuses a request to a loopback server under another host name, and a non-JSON `POST`.
pub(super) async fn same_site_only(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    if state.loopback {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        if host.is_some_and(|h| !is_loopback_host(h)) {
            let message = "this admin server listens on loopback and answers only to a loopback \
                           host name (localhost, 127.0.0.1, [::1])";
            return ApiError::new(StatusCode::FORBIDDEN, message).into_response();
        }
    }
    if request.method() == Method::POST && !is_json(&request) {
        let message = "an action must be sent with `Content-Type: application/json`";
        return ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message).into_response();
    }
    next.run(request).await
}

/// `localhost` or a loopback address, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_json(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_host_names_pass() {
        for ok in [
            "localhost",
            "LOCALHOST:9870",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]:9870",
            "[::1]",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9870",
            "10.0.0.1:80",
            "[2001:db8::1]:1",
            "localhost.evil",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}

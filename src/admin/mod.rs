//! Admin HTTP endpoints and the live dashboard (feature `admin`): health, readiness, Prometheus
//! metrics, workflows and their steps, queues with their load, throughput, the fleet's
//! executors and stranded work, and cancel, resume, fork, updates, signal-with-start, moving
//! stranded work and batches by filter (`POST /api/batch`), as JSON; the dashboard page at `/`.
//!
//! [`serve`] runs it as a server of its own, bound to loopback unless told otherwise;
//! [`router`] gives the same routes as an [`axum::Router`] to nest in your own app under any
//! path (the dashboard finds its API relative to where it is served). Either can require a
//! bearer token. It is a thin layer over [`Client`]: it never builds SQL and never runs
//! workflow code.
//!
//! ```no_run
//! # async fn demo(runtime: stead::Runtime) -> Result<(), stead::admin::AdminError> {
//! use stead::admin::{self, AdminOptions};
//! let server = admin::serve(
//!     runtime.client(), // or a `stead::Client` of its own
//!     AdminOptions::new().bind(([127, 0, 0, 1], 9870)).token("s3cret"),
//! )
//! .await?;
//! println!("dashboard at {}/?token=s3cret", server.url());
//! // ...
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Mounted under `/admin` of an axum app (`examples/dashboard.rs` runs this):
//!
//! ```no_run
//! # async fn demo(runtime: stead::Runtime) -> Result<(), Box<dyn std::error::Error>> {
//! use stead::admin::{self, AdminOptions};
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "my service" }))
//!     .nest("/admin", admin::router(runtime.client(), AdminOptions::new())?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // Dashboard: http://127.0.0.1:3000/admin, a workflow at /admin#workflow/<id>
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! ## Design notes
//!
//! The endpoints are axum over a cloned `Client`: no state of their own, every answer read fresh.
//! Loopback by default; with a token every route but `/healthz` and `/readyz` checks
//! `Authorization: Bearer` (compared in constant time); the page at `/` also takes `?token=`
//! because a browser cannot send a header when it navigates, and carries its script and style
//! inline so one checked response is the whole page. Other pages in the operator's browser are kept
//! out without a token too: a loopback server refuses non-loopback `Host` names (DNS rebinding) and
//! non-JSON `POST`s (cross-site forms; JSON needs a CORS preflight, never granted). Throughput
//! counts rows by `completed_at` (the partial index on it), so cancelled workflows, which never
//! complete, are not counted; queue counts use the in-flight index.
//!
//! Mounted in your app, `router` returns the same routes `serve` runs (one `routes` function). The
//! page computes its base from its own path and calls `<base>/api/...`, so nothing server-side
//! knows the prefix; the token form submits to the page itself. A workflow's URL is the page plus
//! `#workflow/<id>` (a fragment: no server route, and the token in the query survives); selecting a
//! row pushes it to history. `AdminOptions::bind` tells a mounted router whether to apply the
//! loopback host check (the default address is loopback).
//!
//! The browser test drives Debian's Chromium through chromedriver's W3C JSON API with the tests'
//! own small HTTP client (`tests/common/`). Tests get the feature through a dev-dependency of the
//! crate on itself, so plain `cargo test` runs them.

mod auth;
mod body;
mod dashboard;
mod fleet;
mod health;
mod interact;
mod origin;
mod params;
mod queues;
mod reply;
mod views;
mod workflows;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::{middleware, Router};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::client::Client;

pub use metrics_exporter_prometheus::PrometheusHandle;

/// How long [`AdminServer::shutdown`] waits for requests in flight before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Errors of starting the admin server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The address could not be bound (in use, not local, not permitted).
    #[error("cannot bind the admin server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The bearer token is empty or not printable ASCII (it must fit an HTTP header).
    #[error("the admin token must be non-empty printable ASCII without spaces")]
    InvalidToken,
}

/// Settings of the admin server: where it listens, the token it requires, the metrics it
/// serves.
#[derive(Clone)]
pub struct AdminOptions {
    bind: SocketAddr,
    token: Option<String>,
    prometheus: Option<PrometheusHandle>,
    body_timeout: Duration,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            prometheus: None,
            body_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for AdminOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminOptions")
            .field("bind", &self.bind)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("prometheus", &self.prometheus.is_some())
            .field("body_timeout", &self.body_timeout)
            .finish()
    }
}

impl AdminOptions {
    /// Loopback on a port the system picks (see [`AdminServer::local_addr`]), no token, no
    /// metrics.
    pub fn new() -> Self {
        AdminOptions::default()
    }

    /// Listens on `addr`. Anything but loopback exposes workflow data and controls to the
    /// network: set a [`token`](AdminOptions::token) then. For [`router`], the address your app
    /// serves on: a loopback one (the default) makes the routes answer only loopback host names.
    pub fn bind(mut self, addr: impl Into<SocketAddr>) -> Self {
        self.bind = addr.into();
        self
    }

    /// Every endpoint but `/healthz` and `/readyz` requires `Authorization: Bearer <token>`
    /// (the dashboard page also takes it once as `/?token=<token>`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How long a request's body may take to arrive (default 10 s); a slower one (say, a
    /// `Content-Length` larger than what is sent) is answered `408` and its connection closed.
    /// A `Content-Length` over the 64 KiB body limit is answered `413` at once.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Serves this recorder's metrics at `/metrics` (without one, `/metrics` answers 404).
    pub fn prometheus(mut self, handle: PrometheusHandle) -> Self {
        self.prometheus = Some(handle);
        self
    }
}

/// What every handler reads.
pub(crate) struct AdminState {
    client: Client,
    token: Option<String>,
    prometheus: Option<PrometheusHandle>,
    /// Bound to a loopback address: only loopback host names are answered.
    loopback: bool,
    /// How long a request body may take to arrive.
    body_timeout: Duration,
}

/// A running admin server. Dropping it stops the server, as [`AdminServer::shutdown`] does
/// without waiting.
pub struct AdminServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl AdminServer {
    /// The address it listens on (with the port the system picked, if it was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<address>`, the dashboard's URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections and waits (a few seconds at most) for requests in flight.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = &mut self.task;
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut *task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The admin routes and the dashboard for `client` (a runtime's: `runtime.client()`), to serve
/// in your own axum app, nested under any path (`.nest("/admin", router)`): the page calls its
/// API relative to its own address, and a workflow's deep link is `<page>#workflow/<id>`. The
/// router keeps a clone of the client. `options.bind` is not bound: it tells the router the
/// address your app serves on (see [`AdminOptions::bind`]).
pub fn router(client: &Client, options: AdminOptions) -> Result<Router, AdminError> {
    Ok(routes(state(client, options)?))
}

fn state(client: &Client, options: AdminOptions) -> Result<Arc<AdminState>, AdminError> {
    if let Some(token) = &options.token {
        auth::validate(token)?;
    }
    Ok(Arc::new(AdminState {
        client: client.clone(),
        token: options.token,
        prometheus: options.prometheus,
        loopback: options.bind.ip().is_loopback(),
        body_timeout: options.body_timeout,
    }))
}

/// Starts the admin server for `client` (a runtime's: `runtime.client()`) on a task of the
/// current Tokio runtime. The server keeps a clone of the client.
pub async fn serve(client: &Client, options: AdminOptions) -> Result<AdminServer, AdminError> {
    let bind = options.bind;
    let state = state(client, options)?;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|source| AdminError::Bind { addr: bind, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| AdminError::Bind { addr: bind, source })?;
    let (stop, stopped) = oneshot::channel::<()>();
    let app = routes(state);
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the admin server stopped");
        }
    });
    tracing::info!(%addr, "admin server listening");
    Ok(AdminServer {
        addr,
        stop: Some(stop),
        task,
    })
}

/// Every route: the health probes are open, the rest behind the token (when one is set); all
/// of them refuse cross-site requests.
fn routes(state: Arc<AdminState>) -> Router {
    let guarded = Router::new()
        .route("/", get(dashboard::page))
        .route("/metrics", get(health::metrics))
        .route("/api/workflows", get(workflows::list))
        .route("/api/workflows/{id}", get(workflows::get))
        .route("/api/workflows/{id}/steps", get(workflows::steps))
        .route(
            "/api/workflows/{id}/steps/{function_id}",
            get(workflows::step),
        )
        .route("/api/workflows/{id}/cancel", post(workflows::cancel))
        .route("/api/workflows/{id}/pause", post(workflows::pause))
        .route("/api/workflows/{id}/resume", post(workflows::resume))
        .route("/api/workflows/{id}/fork", post(workflows::fork))
        .route("/api/workflows/{id}/update", post(interact::update))
        .route(
            "/api/workflows/{id}/signal-with-start",
            post(interact::signal_with_start),
        )
        .route(
            "/api/workflows/{id}/attributes",
            post(workflows::attributes),
        )
        // Not under /api/workflows/: that would shadow a workflow whose id is "counts".
        .route("/api/counts", get(workflows::counts))
        .route("/api/batch", post(workflows::batch))
        .route("/api/queues", get(queues::list))
        .route("/api/queues/{name}/pause", post(queues::pause))
        .route("/api/queues/{name}/resume", post(queues::resume))
        .route("/api/throughput", get(queues::throughput))
        .route("/api/executors", get(fleet::executors))
        .route("/api/stranded", get(fleet::stranded))
        .route("/api/stranded/move", post(fleet::move_stranded))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .route("/healthz", get(health::live))
        .route("/readyz", get(health::ready))
        .merge(guarded)
        .fallback(reply::no_route)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            origin::same_site_only,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), body::in_time))
        .with_state(state)
}

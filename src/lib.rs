//! # stead
//!
//! Durable workflows for Rust, on Postgres (or an embedded SQLite file), built as an actor
//! runtime.
//!
//! A workflow is an ordinary `async fn(Context, I) -> Result<O, E>`. Each step it takes through
//! [`Context::step`] is checkpointed in a system database that uses the DBOS Transact schema; if
//! the process dies, the next launch resumes every unfinished workflow from its last checkpoint,
//! and no finished step runs twice.
//!
//! ```
//! use stead::{Context, Runtime, Workflow, WorkflowOptions};
//!
//! // What the workflow is called, takes and returns, checked wherever it is used.
//! const GREET: Workflow<String, String> = Workflow::new("greet");
//!
//! async fn greet(ctx: Context, name: String) -> stead::Result<String> {
//!     let greeting = ctx.step("compose", || async { Ok(format!("hi {name}")) }).await?;
//!     Ok(greeting)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> stead::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("stead-doc-lib-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("greet.sqlite").display());
//! // A Postgres URL, or a SQLite file (the default without one: `<app>.sqlite`).
//! let runtime = Runtime::builder()
//!     .database_url(url)
//!     .register(GREET, greet)
//!     .launch()
//!     .await?;
//! let options = WorkflowOptions::with_id("greet-ada");
//! let handle = runtime.start(GREET, "ada".to_string(), options).await?;
//! assert_eq!(handle.result().await?, "hi ada");
//! runtime.shutdown(std::time::Duration::from_secs(5)).await?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! ```
//!
//! The [`Runtime`] starts and enqueues workflows; its [`client`](Runtime::client) does the rest
//! (messages, events, streams, cancel, list, resume, fork, queues, schedules), as a standalone
//! [`Client`] does in a process that runs no workflows. Inside a workflow, every durable call is
//! on the [`Context`]: steps (a builder, for `.retry`), and `sleep`, `now`, `random`, `uuid`,
//! `send`, `recv`, events, streams, child workflows, `select2` and forks (each an
//! `impl Future`, numbered when created).
//!
//! ## The system database
//!
//! **SQLite is the default**: with no URL given ([`RuntimeBuilder::database_url`], else
//! `STEAD_DATABASE_URL`, else `DATABASE_URL`), a runtime keeps its state in the file
//! `<app name or "stead">.sqlite` in the working directory, created on first launch; one
//! executor process per file. For a fleet of executors, give a `postgres://` URL (or an existing
//! `sqlx` pool, [`RuntimeBuilder::pool`]). Both use DBOS Transact 3.4's schema, so DBOS tools
//! and clients read stead's workflows.
//!
//! ## Cargo features
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `cli` | yes | the `stead` command-line binary (and its `clap` dependency); library users may drop it with `default-features = false` |
//! | `admin` | no | `stead::admin`: the admin HTTP API and the live dashboard, as a server (`admin::serve`) or a router for your axum app (`admin::router`) |
//! | `prometheus` | no | a Prometheus exporter: `metrics::install_prometheus` and `metrics::install_prometheus_recorder` |
//! | `otel` | no | `stead::otel`: workflow and step spans continue the trace their starter recorded in the `dbos.otelContext` attribute (as DBOS 3.4 does), and starts record it |
//! | `otlp` | no | `otel` plus an OTLP/HTTP exporter: `otel::otlp_tracer_provider` |
//! | `tls` | no | TLS (rustls) for Postgres connections |
//!
//! Items that need a feature say so in these docs.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod admin;
mod base;
pub mod client;
pub mod durable;
mod engine;
pub mod error;
mod names;
pub mod runtime;
mod sysdb;
pub mod testing;

pub use base::metrics;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use base::otel;

// What nearly every user names; the rest is grouped in the modules below and above.
pub use base::limits::{HistoryLimit, HistoryLimits};
pub use base::queue::Queue;
pub use base::status::Status;
pub use base::workflow::Workflow;
pub use client::Client;
pub use durable::{BoxError, Context, RetryPolicy};
pub use engine::handle::WorkflowHandle;
pub use engine::request::WorkflowOptions;
pub use error::{Error, Result};
pub use runtime::{Runtime, RuntimeBuilder};

#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use engine::faults::Fault;

/// Defining, naming and starting workflows: typed references, registration, options, handles,
/// statuses and attributes.
pub mod workflow {
    pub use crate::base::args::Args;
    pub use crate::base::attributes::{parse_attribute, Attributes, OTEL_CONTEXT_KEY};
    pub use crate::base::limits::{
        HistoryLimit, HistoryLimits, DEFAULT_MAX_HISTORY_BYTES, DEFAULT_MAX_HISTORY_CALLS,
        DEFAULT_MAX_VALUE_BYTES,
    };
    pub use crate::base::status::{Status, WorkflowStatus};
    pub use crate::base::workflow::{ReadAs, Untyped, Workflow, WorkflowRef};
    pub use crate::engine::handle::WorkflowHandle;
    pub use crate::engine::registry::{WorkflowConfig, WorkflowFn};
    pub use crate::engine::request::WorkflowOptions;
    pub use crate::names::MAX_NAME_BYTES;
}

/// Queues: definitions and limits, their load, and enqueueing from your own actors
/// ([`QueueRef`](queues::QueueRef)).
pub mod queues {
    pub use crate::base::queue::{Dedup, Queue, QueueLimits, RateLimit, WaitingWork};
    pub use crate::client::observe::{AppQueueLoad, QueueLoad, ThroughputBucket};
    pub use crate::client::pause::PausedQueue;
    pub use crate::engine::start::{EnqueueRequest, Enqueued, QueueRef};
}

/// Cron schedules: definitions, their state, backfills.
pub mod schedules {
    pub use crate::engine::schedule::{
        Backfilled, Overlap, Schedule, ScheduleInfo, ScheduleStatus, ScheduledTime,
    };
}

/// Brings the schema of the database at `url` to the DBOS 3.4 layout, without starting a runtime
/// (a runtime's launch does the same). Safe to run concurrently with other migrators. See
/// [`Client::migrate`] for other settings (connect timeout).
pub async fn migrate(url: &str, schema: &str) -> Result<client::MigrationReport> {
    let options = client::ClientOptions {
        schema: schema.to_owned(),
        ..client::ClientOptions::default()
    };
    Client::migrate(url, &options).await
}

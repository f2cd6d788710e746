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
//! | `admin` | no | [`admin`]: the admin HTTP API and the live dashboard, as a server ([`admin::serve`]) or a router for your axum app ([`admin::router`]) |
//! | `prometheus` | no | a Prometheus exporter: [`metrics::install_prometheus`] and [`metrics::install_prometheus_recorder`] |
//! | `tls` | no | TLS (rustls) for Postgres connections |
//!
//! Items that need a feature say so in these docs.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod admin;
mod admission;
mod args;
mod attributes;
mod backoff;
mod builder;
mod calls;
mod client;
mod clock;
mod codec;
mod completion;
mod config;
mod context;
mod cron;
mod datasource;
mod db;
mod directory;
mod dispatch;
mod error;
mod evict;
mod fleet;
mod handle;
mod hash;
mod launch;
pub mod metrics;
mod nonfinite;
#[cfg(feature = "otel")]
pub mod otel;
mod queue;
mod registry;
mod replay;
mod retention;
mod runtime;
mod schedule;
mod shared;
mod signals;
mod start;
mod status;
mod step;
mod sysdb;
mod user_error;
mod verify;
mod workflow;

/// Checks for a deploy: [`verify`](testing::verify) replays recorded histories against the code
/// registered in a builder, without running a step or writing anything.
pub mod testing {
    pub use crate::verify::{verify, Divergence, Verdict};
}

pub use args::Args;
pub use attributes::{parse_attribute, Attributes, OTEL_CONTEXT_KEY};
pub use builder::RuntimeBuilder;
pub use calls::{ChildHandle, Selected, StreamValue};
pub use client::debounce::DebounceOptions;
pub use client::manage::{ForkOptions, ListWorkflows, StepInfo, WorkflowInfo};
pub use client::observe::{AppQueueLoad, QueueLoad, ThroughputBucket};
pub use client::outbox::Message;
pub use client::{Client, ClientOptions, RuntimeStats};
pub use config::{RestartPolicy, DEFAULT_APP_NAME};
pub use context::Context;
pub use datasource::{AppDatabase, Datasource};
pub use error::{DbError, Error, PortableError, Result, StepError, StepTimeout};
pub use handle::WorkflowHandle;
pub use queue::{Dedup, Queue, QueueLimits, RateLimit, WaitingWork};
pub use registry::{WorkflowConfig, WorkflowFn};
pub use retention::Retention;
#[doc(hidden)]
pub use runtime::Fault;
pub use runtime::Runtime;
pub use schedule::{Backfilled, Schedule, ScheduleInfo, ScheduleStatus, ScheduledTime};
pub use start::{EnqueueRequest, QueueMessage, WorkflowOptions};
pub use status::{Status, WorkflowStatus};
pub use step::{BoxError, RetryPolicy, Step, StepFn};
pub use sysdb::AppVersion;
pub use sysdb::DatabasePool;
pub use sysdb::ExecutorInfo;
pub use sysdb::Isolation;
pub use sysdb::MigrationReport;
pub use workflow::{ReadAs, Untyped, Workflow, WorkflowRef};

/// Brings the schema of the database at `url` to the DBOS 3.4 layout, without starting a runtime
/// (a runtime's launch does the same). Safe to run concurrently with other migrators. See
/// [`Client::migrate`] for other settings (connect timeout).
pub async fn migrate(url: &str, schema: &str) -> Result<MigrationReport> {
    let options = ClientOptions {
        schema: schema.to_owned(),
        ..ClientOptions::default()
    };
    Client::migrate(url, &options).await
}

/// The longest name, id, key or topic stead writes, in bytes. Each is a text column, often
/// part of an index (a Postgres index row holds at most ~2,700 bytes) or of a NOTIFY payload
/// (at most 8,000 bytes, two such values joined): at this length any two fit both.
pub const MAX_NAME_BYTES: usize = 1024;

/// Names and ids become text columns: they must be non-empty, free of NUL bytes and at most
/// [`MAX_NAME_BYTES`] long.
pub(crate) fn validate_name(value: &str, what: &str) -> Result<()> {
    if value.is_empty() {
        Err(Error::InvalidArgument(format!("{what} must not be empty")))
    } else {
        validate_text(value, what)
    }
}

/// Keys, topics and step names may be empty, but are otherwise held to [`validate_name`]'s
/// rules; the error shows at most the start of an over-long value.
pub(crate) fn validate_text(value: &str, what: &str) -> Result<()> {
    if value.len() > MAX_NAME_BYTES {
        let start: String = value.chars().take(40).collect();
        Err(Error::InvalidArgument(format!(
            "{what} {start:?}... is {} bytes long; the limit is {MAX_NAME_BYTES}",
            value.len()
        )))
    } else if value.contains('\0') {
        Err(Error::InvalidArgument(format!(
            "{what} {value:?} contains a NUL byte"
        )))
    } else {
        Ok(())
    }
}

//! # stead
//!
//! Durable workflows for Rust, on Postgres, built as an actor runtime.
//!
//! A workflow is an ordinary `async fn(Context, I) -> Result<O, E>`. Each step it takes through
//! [`Context::step`] is checkpointed in a system database that uses the DBOS Transact schema; if
//! the process dies, the next launch resumes every unfinished workflow from its last checkpoint,
//! and no finished step runs twice.
//!
//! ```no_run
//! use stead::{Context, Runtime, WorkflowOptions};
//!
//! async fn greet(ctx: Context, name: String) -> stead::Result<String> {
//!     let greeting = ctx.step("compose", || async { Ok::<_, std::io::Error>(format!("hi {name}")) }).await?;
//!     Ok(greeting)
//! }
//!
//! # async fn demo() -> stead::Result<()> {
//! let runtime = Runtime::builder()
//!     .database_url("postgres://postgres@127.0.0.1:5432/postgres")
//!     .workflow("greet", greet)
//!     .launch()
//!     .await?;
//! let handle = runtime.start("greet", "ada", WorkflowOptions::with_id("greet-ada")).await?;
//! let text: String = handle.result().await?;
//! runtime.shutdown(std::time::Duration::from_secs(5)).await?;
//! # Ok(()) }
//! ```

#[path = "../actors/mod.rs"]
mod actors;
#[cfg(feature = "admin")]
pub mod admin;
mod admission;
mod backoff;
mod builder;
mod calls;
mod client;
mod codec;
mod completion;
mod context;
mod cron;
mod db;
mod debounce;
mod dispatch;
mod error;
mod handle;
mod launch;
mod manage;
pub mod metrics;
mod observe;
mod queue;
mod registry;
mod retention;
mod runtime;
mod schedule;
mod shared;
mod signals;
mod start;
mod status;
mod step;
mod sysdb;

pub use actors::restart::RestartPolicy;
pub use backoff::Backoff;
pub use builder::RuntimeBuilder;
pub use calls::{ChildHandle, Either, StreamValue};
pub use client::{Client, ClientOptions, RuntimeStats};
pub use context::Context;
pub use debounce::DebounceOptions;
pub use error::{DbError, Error, PortableError, Result, StepError};
pub use handle::WorkflowHandle;
pub use manage::{ForkOptions, ListWorkflows, StepInfo, WorkflowInfo};
pub use observe::{QueueLoad, ThroughputBucket};
pub use queue::{Dedup, EnqueueRequest, Queue, QueueLimits, QueueMessage, RateLimit};
pub use registry::WorkflowConfig;
pub use retention::Retention;
#[doc(hidden)]
pub use runtime::Fault;
pub use runtime::Runtime;
pub use schedule::{Backfilled, Schedule, ScheduleInfo, ScheduleStatus, ScheduledTime};
pub use start::WorkflowOptions;
pub use status::{Status, WorkflowStatus};
pub use step::{BoxError, RetryPolicy, Step};
pub use sysdb::AppVersion;
pub use sysdb::MigrationReport;

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

/// Names and ids become text columns: they must be non-empty and free of NUL bytes.
pub(crate) fn validate_name(value: &str, what: &str) -> Result<()> {
    if value.is_empty() {
        Err(Error::InvalidArgument(format!("{what} must not be empty")))
    } else if value.contains('\0') {
        Err(Error::InvalidArgument(format!(
            "{what} {value:?} contains a NUL byte"
        )))
    } else {
        Ok(())
    }
}

//! The durable core: what a workflow body sees. Public as `stead::durable`: the types its calls
//! take and return (steps and their retry policy, child handles, `select2`'s outcome, stream
//! items, transactional datasources).
//!
//! Inside the crate: Its `Context` (numbering, replay, held step
//! records), steps and their retries, every other durable call (`calls/`), transactional steps
//! on an application database, and the replay-only log verification reads.
//!
//! It uses the engine (to start children, wait for signals, reach the database actor) and
//! below; it never names an actor, a face (client, runtime handle) or a backend.

pub(crate) mod calls;
pub(crate) mod context;
pub(crate) mod datasource;
pub(crate) mod replay;
pub(crate) mod step;

pub use crate::sysdb::Isolation;
pub use calls::{ChildHandle, Selected, StreamValue, Update};
pub use context::Context;
pub use datasource::{AppDatabase, Datasource};
pub use step::{BoxError, RetryPolicy, Step, StepFn};

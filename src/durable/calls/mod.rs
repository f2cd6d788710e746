//! Durable calls beyond steps: time, messages, events, streams, child workflows, and `select`.
//!
//! Each call takes its number when it is created, records what it did (as DBOS names it:
//! `DBOS.sleep`, `DBOS.send`, `DBOS.recv`, ...) and, on a replay, returns the recorded value
//! instead of acting again. Waiting calls never pin a thread or a connection: they wait on an
//! in-process wake-up (NOTIFY or a local write), poll as a fallback, and stop when the workflow
//! is cancelled.

mod children;
mod events;
mod messages;
mod patch;
mod select;
mod streams;
mod time;
mod wait;

pub use children::ChildHandle;
pub(crate) use events::read_event;
pub use select::Selected;
pub(crate) use streams::read_stream;
pub use streams::StreamValue;
pub(crate) use wait::until_found;

use serde::de::DeserializeOwned;

use crate::base::codec;
use crate::error::Result;
use crate::sysdb::StepRow;

/// DBOS's topic for messages sent without one.
pub(crate) const NULL_TOPIC: &str = "__null__topic__";

/// Decodes a recorded call's output, refusing formats other than portable JSON.
pub(crate) fn replayed<T: DeserializeOwned>(row: &StepRow, what: &str) -> Result<T> {
    codec::check_format(row.serialization.as_deref(), what)?;
    codec::decode(row.output.as_deref(), what)
}

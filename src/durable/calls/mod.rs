//! Durable calls beyond steps: time, messages, events, streams, child workflows, `select`, patches,
//! updates, waiting (`wait`), and continue-as-new (`continuation`, which ends the run).
//!
//! Each call takes its number when it is created, records what it did (as DBOS names it:
//! `DBOS.sleep`, `DBOS.send`, `DBOS.recv`, ...) and, on a replay, returns the recorded value
//! instead of acting again. Waiting calls never pin a thread or a connection: they wait on an
//! in-process wake-up (NOTIFY or a local write), poll as a fallback, and stop when the workflow is
//! cancelled.
//!
//! **Numbered when created**, not when first polled, so concurrent calls (`select2`, `select_all`,
//! `try_join_all`) replay with the same numbers. The rule: a call with options is a builder
//! implementing `IntoFuture` (only `step`, for `.retry`; numbered in `into_future`, i.e. when
//! awaited or handed to a join); every other durable call is a plain method returning `impl Future
//! + Send` (no box) that takes its number when called and does its work in an `async move` block.
//! `select_all` takes any iterator of calls (collected, and so numbered, before the select's own
//! number) and boxes each for `futures::select_all`.
//!
//! **DBOS's names.** Calls record as `DBOS.sleep` (the wake-up time in epoch seconds), `DBOS.send`,
//! `DBOS.recv`, `DBOS.setEvent`, `DBOS.getEvent`, `DBOS.writeStream`, `DBOS.closeStream`,
//! `DBOS.getResult`, a child start under the child's workflow name with `child_workflow_id`;
//! stead's own calls are `stead.now`, `stead.random`, `stead.uuid`, `stead.select`, `stead.fork`,
//! `stead.update`.
//! `recv` and `get_event` take a second number for their timeout's `DBOS.sleep`, as DBOS does.
//! Effects that must not repeat (send, receive, event, stream write) commit in the same statement
//! as their record, on the "ops" lane; a send from a workflow has the message id
//! `<workflow>-<call>`.

mod children;
mod continuation;
mod events;
mod messages;
mod patch;
mod select;
mod streams;
mod time;
pub(crate) mod updates;
mod wait;

pub use children::ChildHandle;
pub(crate) use events::read_event;
pub use select::Selected;
pub(crate) use streams::read_stream;
pub use streams::StreamValue;
pub use updates::Update;
pub(crate) use wait::until_found;

use serde::de::DeserializeOwned;

use crate::base::codec;
use crate::error::Result;
use crate::sysdb::StepRow;

/// DBOS's topic for messages sent without one.
pub(crate) const NULL_TOPIC: &str = "__null__topic__";

/// Decodes a recorded call's output in the format its row names.
pub(crate) fn replayed<T: DeserializeOwned>(row: &StepRow, what: &str) -> Result<T> {
    codec::read(row.serialization.as_deref(), row.output.as_deref(), what)
}

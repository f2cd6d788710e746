//! The vocabulary every ring shares: workflow statuses and typed references, queue definitions,
//! the payload codec (portable JSON, and DBOS's pickle and SuperJSON read), clocks, backoff,
//! cron timetables, attributes, metric names and the OpenTelemetry carrier. Plain values and pure functions; nothing here touches the database,
//! an actor or a running workflow (the one stateful exception, `vclock`, is a test's virtual
//! clock, feature `testing`).

pub(crate) mod args;
pub(crate) mod attributes;
pub(crate) mod backoff;
pub(crate) mod clock;
pub(crate) mod codec;
pub(crate) mod continuation;
pub(crate) mod cron;
pub(crate) mod hash;
pub(crate) mod limits;
pub mod metrics;
pub(crate) mod nonfinite;
#[cfg(feature = "otel")]
pub mod otel;
pub(crate) mod overlap;
#[cfg(test)]
mod payload_vectors;
pub(crate) mod pickle;
pub(crate) mod queue;
pub(crate) mod status;
pub(crate) mod superjson;
pub(crate) mod user_error;
#[cfg(feature = "testing")]
pub(crate) mod vclock;
pub(crate) mod workflow;

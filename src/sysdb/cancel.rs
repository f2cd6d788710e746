//! Cancellation: marks a workflow (and, when asked, its descendants) `CANCELLED`, so the
//! executor running it stops before its next durable call. Postgres announces each cancel on
//! [`CANCEL_CHANNEL`]; on SQLite the caller stops the runs of this process itself.

use async_trait::async_trait;

use crate::error::DbError;

/// The channel a cancel is announced on; the payload is the workflow id (`<id>::<owner>` after a
/// takeover, which stops that run only).
pub(crate) const CANCEL_CHANNEL: &str = "stead_cancel_channel";

/// What a cancel found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cancelled {
    /// Whether the workflow exists at all.
    pub exists: bool,
    /// The workflows this cancel moved to `CANCELLED` (already final ones are left alone).
    pub ids: Vec<String>,
}

#[async_trait]
pub(crate) trait Cancels: Send + Sync {
    /// Cancels `id`, and every descendant when `cascade`: each that is not final becomes
    /// `CANCELLED` and leaves its queue, owner and deduplication id.
    async fn cancel(&self, id: &str, cascade: bool) -> Result<Cancelled, DbError>;
}

//! Rewinding a finished workflow under its own id (DBOS 3.4's `rewind_workflow`): its
//! recorded calls from a step on are dropped (with the events they published, restored to
//! their earlier values, the messages they consumed and any unread ones, and the streams'
//! close marker) and it is enqueued again, so a replay runs everything from that step.

use async_trait::async_trait;

use crate::error::DbError;

/// A rewind to make.
#[derive(Debug, Clone)]
pub(crate) struct Rewind {
    pub id: String,
    /// The first call (1-based) that runs again.
    pub from_step: u32,
    /// The queue it is enqueued on.
    pub queue: String,
    /// The version that runs it; its own when `None`.
    pub app_version: Option<String>,
}

/// What a rewind found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rewound {
    /// Enqueued again from `from_step`.
    Requeued,
    NotFound,
    /// Still running (`PENDING`, `ENQUEUED` or `DELAYED`): only a finished workflow rewinds.
    Active {
        status: String,
    },
}

#[async_trait]
pub(crate) trait Rewinds: Send + Sync {
    /// Rewinds `r.id` in one transaction (see the module docs); changes nothing unless it is
    /// in a terminal state.
    async fn rewind(&self, r: &Rewind) -> Result<Rewound, DbError>;
}

/// DBOS's closing sentinel of a stream, as stored (portable JSON of the string).
pub(crate) const STREAM_CLOSED: &str = "\"__DBOS_STREAM_CLOSED__\"";

/// The states a rewind refuses.
pub(crate) fn is_active(status: &str) -> bool {
    matches!(status, "PENDING" | "ENQUEUED" | "DELAYED")
}

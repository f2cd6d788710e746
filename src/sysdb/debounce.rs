//! Debouncing: push back the `DELAYED` debounced workflow that holds the key (its new delay
//! capped at its debounce deadline) and replace its input, or, when none holds it, create one.
//! The key is the workflow's deduplication id on its queue, so the unique index on
//! `(queue_name, deduplication_id)` makes concurrent callers in any process agree on one row.
//!
//! The key is released when the row leaves `DELAYED` (the claim clears the deduplication id of
//! debounced rows as it promotes them), so a call after that starts a new workflow.

use async_trait::async_trait;

use crate::error::DbError;

/// One debounce call.
#[derive(Debug, Clone)]
pub(crate) struct Bounce {
    /// The id a new workflow gets (ignored when an existing one is pushed back).
    pub id: String,
    pub workflow: String,
    pub queue: String,
    /// The key as stored: `<workflow>-<key>`, as DBOS forms it.
    pub dedup_id: String,
    /// When the workflow may run if no other call comes (epoch ms).
    pub run_at: i64,
    /// The latest it may run, for a new workflow (epoch ms); `None`: no bound.
    pub deadline: Option<i64>,
    /// The input envelope.
    pub inputs: String,
    pub timeout_ms: Option<i64>,
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    pub now: i64,
}

/// What a debounce call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bounced {
    /// An existing debounced workflow was pushed back and got the new input.
    Extended(String),
    /// A new debounced workflow was created.
    Created(String),
    /// The key is held by a row the update skipped: one that is not debounced, of another
    /// name or application, or one leaving `DELAYED` right now (the caller retries that one).
    Conflict {
        holder: String,
        debounced: bool,
        name: Option<String>,
    },
    /// The key is free but the chosen id names another workflow (of this name).
    Existing { name: Option<String> },
    /// The row this call raced with is not visible yet: try again.
    Retry,
}

#[async_trait]
pub(crate) trait Debounce: Send + Sync {
    /// Runs one debounce call.
    async fn bounce(&self, b: &Bounce) -> Result<Bounced, DbError>;
}

//! Cancellation: marks a workflow (and, when asked, its descendants) `CANCELLED`, so the
//! executor running it stops before its next durable call. Postgres announces each cancel on
//! [`CANCEL_CHANNEL`]; on SQLite the caller stops the runs of this process itself.
//!
//! **The announcement** is a JSON array, `["<id>"]`, or `["<id>", "<owner>"]` after a takeover (a
//! resume), so an id containing `::` or any other separator arrives whole. The executor running the
//! workflow tells its workflow actor, which stops the body before its next durable call and
//! interrupts its waits. A step body already running finishes, but its checkpoint is refused.

use async_trait::async_trait;

use crate::error::DbError;

/// The channel a cancel is announced on; the payload is a JSON array, `["<id>"]` after a cancel
/// or `["<id>", "<owner>"]` after a takeover (which stops that run only). JSON, not a
/// separator: any id the API accepts (`a::b` included) comes back out whole.
pub(crate) const CANCEL_CHANNEL: &str = "stead_cancel_channel";

/// What a [`CANCEL_CHANNEL`] payload announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CancelNote {
    /// The workflow to stop.
    pub id: String,
    /// Only the run under this owner token (a takeover); every run when `None`.
    pub owner: Option<String>,
}

impl CancelNote {
    /// Reads a payload; `None` when it is not one of ours.
    pub(crate) fn parse(payload: &str) -> Option<CancelNote> {
        let (id, owner): (String, Option<String>) = match serde_json::from_str(payload) {
            Ok(serde_json::Value::Array(parts)) => {
                let mut parts = parts.into_iter();
                let id = parts.next()?.as_str()?.to_owned();
                let owner = parts.next().and_then(|o| o.as_str().map(str::to_owned));
                (id, owner)
            }
            _ => return None,
        };
        Some(CancelNote { id, owner })
    }
}

/// What a cancel found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cancelled {
    /// Whether the workflow exists at all.
    pub exists: bool,
    /// The workflows this cancel marked `CANCELLED` (succeeded and failed ones are left alone;
    /// an already cancelled one is marked again, as DBOS does).
    pub ids: Vec<String>,
}

/// A run this process holds: workflow `id` under owner token `owner`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldRun {
    pub id: String,
    pub owner: String,
}

/// A held run whose row moved on without it (another writer cancelled, resumed or finished it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LostRun {
    pub id: String,
    /// The owner token the run holds (not the row's).
    pub owner: String,
    /// The row's status now (`CANCELLED` after a cancel by any writer), or `PAUSED`
    /// ([`crate::sysdb::pauses::PAUSED_RUN`]) for a paused workflow whose row is still the run's.
    pub status: String,
}

#[async_trait]
pub(crate) trait Cancels: Send + Sync {
    /// Cancels `id`, and every descendant when `cascade`, as DBOS's `cancel_workflows` does:
    /// each that has not succeeded or failed becomes `CANCELLED`, leaves its queue, owner and
    /// deduplication id, loses `started_at_epoch_ms` and gets `completed_at`.
    async fn cancel(&self, id: &str, cascade: bool) -> Result<Cancelled, DbError>;

    /// Of `runs`, those whose row is no longer `PENDING` under the run's owner token, or whose
    /// workflow is paused. Rows that do not exist (yet) are left out. Reads only.
    async fn lost_runs(&self, runs: &[HeldRun]) -> Result<Vec<LostRun>, DbError>;
}

#[cfg(test)]
mod tests {
    use super::CancelNote;

    #[test]
    fn a_cancel_note_keeps_ids_with_separators_whole() {
        let note = |id: &str, owner: Option<&str>| CancelNote {
            id: id.into(),
            owner: owner.map(Into::into),
        };
        assert_eq!(CancelNote::parse(r#"["x::y"]"#), Some(note("x::y", None)));
        assert_eq!(
            CancelNote::parse(r#"["a::b::c", "o::1"]"#),
            Some(note("a::b::c", Some("o::1")))
        );
        assert_eq!(CancelNote::parse(r#"["a\"b"]"#), Some(note("a\"b", None)));
        assert_eq!(CancelNote::parse("plain"), None);
        assert_eq!(CancelNote::parse("[1]"), None);
    }
}

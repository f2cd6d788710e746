//! Workflow status values and the status record, as stored in `workflow_status`.

use std::fmt;

use serde::Serialize;

/// A workflow's status. These are the only values DBOS tools accept. Serializes as the stored
/// text (`"SUCCESS"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Running (or about to be recovered) under an executor.
    Pending,
    /// Finished with an output.
    Success,
    /// Finished with an error.
    Error,
    /// Crashed more often than its recovery budget allows; parked until resumed.
    MaxRecoveryAttemptsExceeded,
    /// Cancelled.
    Cancelled,
    /// Waiting on a queue.
    Enqueued,
    /// Waiting for its delay to pass before it is enqueued.
    Delayed,
    /// A status no DBOS version defines, written by another writer; the stored text is in
    /// [`WorkflowStatus::stored_status`]. Never written by stead, never final.
    Unknown,
}

impl Status {
    /// The text stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Success => "SUCCESS",
            Status::Error => "ERROR",
            Status::MaxRecoveryAttemptsExceeded => "MAX_RECOVERY_ATTEMPTS_EXCEEDED",
            Status::Cancelled => "CANCELLED",
            Status::Enqueued => "ENQUEUED",
            Status::Delayed => "DELAYED",
            Status::Unknown => "UNKNOWN",
        }
    }

    /// Parses a stored status; `None` for anything DBOS does not define.
    pub fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "PENDING" => Status::Pending,
            "SUCCESS" => Status::Success,
            "ERROR" => Status::Error,
            "MAX_RECOVERY_ATTEMPTS_EXCEEDED" => Status::MaxRecoveryAttemptsExceeded,
            "CANCELLED" => Status::Cancelled,
            "ENQUEUED" => Status::Enqueued,
            "DELAYED" => Status::Delayed,
            _ => return None,
        })
    }

    /// True once the workflow will not run again unless resumed.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Status::Success
                | Status::Error
                | Status::Cancelled
                | Status::MaxRecoveryAttemptsExceeded
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A workflow's status record. Timestamps are epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkflowStatus {
    pub id: String,
    pub name: String,
    pub status: Status,
    pub executor_id: Option<String>,
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    pub queue_name: Option<String>,
    /// How many times the workflow was dispatched (started, recovered or restarted).
    pub recovery_attempts: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub completed_at_ms: Option<i64>,
    pub parent_workflow_id: Option<String>,
    /// The workflow this one was forked from.
    pub forked_from: Option<String>,
    pub timeout_ms: Option<i64>,
    /// When its time runs out (epoch ms).
    pub deadline_ms: Option<i64>,
    pub priority: i32,
    pub deduplication_id: Option<String>,
    pub partition_key: Option<String>,
    /// When a `DELAYED` workflow becomes due (epoch ms).
    pub delay_until_ms: Option<i64>,
    /// Custom attributes (DBOS's `attributes` column): a JSON object as written at start or by
    /// an update; any JSON another writer stored is shown as it is.
    pub attributes: Option<serde_json::Value>,
    /// The run this one continued from
    /// ([`Context::continue_as_new`](crate::Context::continue_as_new)), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<String>,
    /// The run this one continued as, if it did: its handle's result is that chain's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
    /// The text stored in the `status` column when it is none DBOS defines (then `status` is
    /// [`Status::Unknown`]); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_status: Option<String>,
    /// When the workflow was paused (epoch ms), while it is paused and not finished. The
    /// stored `status` stays DBOS's (`ENQUEUED`, or `PENDING` while its run stops): a pause
    /// lives in stead's own table (`Client::pause_workflow`).
    pub paused_at_ms: Option<i64>,
}

impl WorkflowStatus {
    /// The status for people: `PAUSED` while paused, else its stored text, marked when stead
    /// does not know it (`BOGUS (unknown)`).
    pub fn status_label(&self) -> String {
        match &self.stored_status {
            _ if self.is_paused() => "PAUSED".to_owned(),
            Some(text) => format!("{text} (unknown)"),
            None => self.status.as_str().to_owned(),
        }
    }

    /// Paused (and not finished): it runs no further durable call until resumed.
    pub fn is_paused(&self) -> bool {
        self.paused_at_ms.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_and_nothing_else_parses() {
        for s in [
            Status::Pending,
            Status::Success,
            Status::Error,
            Status::MaxRecoveryAttemptsExceeded,
            Status::Cancelled,
            Status::Enqueued,
            Status::Delayed,
        ] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("RUNNING"), None);
        assert_eq!(Status::parse("pending"), None);
    }
}

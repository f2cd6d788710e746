//! Reads of one workflow: its status row with its outcome, its recorded steps, its events and
//! its stream values.

use async_trait::async_trait;

use super::text::Text;
use crate::base::status::WorkflowStatus;
use crate::error::DbError;

/// One recorded durable call of a workflow (whose id its reader knows: a page's rows carry none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepRow {
    pub function_id: u32,
    pub name: String,
    pub output: Option<Text>,
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub serialization: Option<String>,
}

impl StepRow {
    /// The bytes of its output and error, as read.
    pub(crate) fn payload_len(&self) -> usize {
        self.output.as_deref().map_or(0, str::len) + self.error.as_deref().map_or(0, str::len)
    }
}

/// A workflow's status row with its outcome payloads.
#[derive(Debug, Clone)]
pub(crate) struct StatusRow {
    pub status: WorkflowStatus,
    pub output: Option<String>,
    pub error: Option<String>,
    pub serialization: Option<String>,
}

/// One value of a stream.
#[derive(Debug, Clone)]
pub(crate) struct StreamRow {
    pub offset: i32,
    pub value: String,
    pub serialization: Option<String>,
}

#[async_trait]
pub(crate) trait Reads: Send + Sync {
    /// The status row of `id` with its outcome (the payload table first, the legacy columns as
    /// a fallback, as in DBOS), or `None` when no such workflow exists.
    async fn status(&self, id: &str) -> Result<Option<StatusRow>, DbError>;

    /// The latest value of event `key` of workflow `id`, with its serialization.
    async fn get_event(
        &self,
        id: &str,
        key: &str,
    ) -> Result<Option<(String, Option<String>)>, DbError>;

    /// The owner token (`owner_xid`) of workflow `id`: `None` when it has none or does not
    /// exist. A transactional step checks it while holding its row, as DBOS does.
    async fn workflow_owner(&self, id: &str) -> Result<Option<String>, DbError>;

    /// Up to `limit` values of stream `key` of workflow `id`, from `offset` on, in order.
    async fn read_stream(
        &self,
        id: &str,
        key: &str,
        offset: i32,
        limit: i64,
    ) -> Result<Vec<StreamRow>, DbError>;
}

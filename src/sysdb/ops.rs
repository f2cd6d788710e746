//! Durable calls with a side effect that must commit together with their record: sending a
//! message, receiving one, setting an event, writing to a stream. The effect is written only
//! when the call's row in `operation_outputs` is (and only while the workflow is `PENDING` under
//! the caller's owner token), so a retry or a replay never repeats it. They run on the database
//! actor's "ops" lane; a message sent from outside any workflow goes through [`Messages`].
//!
//! Updates (`durable::calls::updates`) add two: answering a request message (consume it, record
//! `stead.update`, set the answer event) and rejecting one (consume it, set the answer event,
//! record nothing), each in one statement.

use async_trait::async_trait;

use super::steps::StepOutcome;
use crate::error::DbError;

/// The durable call an op records.
#[derive(Debug, Clone)]
pub(crate) struct OpStep {
    pub workflow_id: String,
    pub owner: String,
    pub function_id: u32,
    pub started_at: i64,
    pub app_name: Option<String>,
}

/// A durable call with an effect.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// `DBOS.send`: a message to `destination`, with a message id fixed by the call.
    Send {
        step: OpStep,
        destination: String,
        topic: String,
        message: String,
    },
    /// `DBOS.recv`: consume the oldest unconsumed message of `topic`; with `give_up`, record
    /// `null` when there is none (the wait timed out).
    Recv {
        step: OpStep,
        topic: String,
        give_up: bool,
    },
    /// `DBOS.setEvent`: the latest value of `key`, plus a history row.
    SetEvent {
        step: OpStep,
        key: String,
        value: String,
    },
    /// `DBOS.writeStream` / `DBOS.closeStream`: the next value of stream `key`.
    WriteStream {
        step: OpStep,
        key: String,
        value: String,
        close: bool,
    },
    /// `stead.update`, accepted: consumes request message `message_id`, records `output` at
    /// the call's number and sets event `key` to `value` (with a history row), together.
    AcceptUpdate {
        step: OpStep,
        message_id: String,
        output: String,
        key: String,
        value: String,
    },
    /// A validator's rejection: consumes request message `message_id` and sets event `key` to
    /// `value`, recording no call (the step's number stays free for the next request).
    RejectUpdate {
        step: OpStep,
        message_id: String,
        key: String,
        value: String,
    },
}

/// The oldest unconsumed message of a topic, read without consuming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeekedMessage {
    /// Its `message_uuid`.
    pub id: String,
    pub message: String,
    pub serialization: Option<String>,
}

/// The name an accepted update is recorded under.
pub(crate) const UPDATE_CALL: &str = "stead.update";

/// What an op found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpOutcome {
    /// Done now; `output` is what was recorded (for a receive: the message, or `null`).
    Done {
        output: Option<String>,
        serialization: Option<String>,
    },
    /// A receive found no message (and was not told to give up): nothing was written.
    Nothing,
    /// Recorded before, by an earlier attempt or execution: its values stand.
    AlreadyRecorded {
        output: Option<String>,
        error: Option<String>,
        /// The row's format (a received message keeps its sender's).
        serialization: Option<String>,
    },
    Cancelled,
    NotOwner,
}

impl Op {
    pub(crate) fn step(&self) -> &OpStep {
        match self {
            Op::Send { step, .. }
            | Op::Recv { step, .. }
            | Op::SetEvent { step, .. }
            | Op::WriteStream { step, .. }
            | Op::AcceptUpdate { step, .. }
            | Op::RejectUpdate { step, .. } => step,
        }
    }

    /// The name the call is recorded under.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Send { .. } => "DBOS.send",
            Op::Recv { .. } => "DBOS.recv",
            Op::SetEvent { .. } => "DBOS.setEvent",
            Op::WriteStream { close: false, .. } => "DBOS.writeStream",
            Op::WriteStream { close: true, .. } => "DBOS.closeStream",
            Op::AcceptUpdate { .. } | Op::RejectUpdate { .. } => UPDATE_CALL,
        }
    }

    /// The message id of a send from a workflow: fixed by the call, so a retry is a no-op.
    pub(crate) fn message_id(step: &OpStep) -> String {
        format!("{}-{}", step.workflow_id, step.function_id)
    }
}

/// An op whose record was not written, as its step row's classification found it.
impl From<StepOutcome> for OpOutcome {
    fn from(found: StepOutcome) -> OpOutcome {
        match found {
            StepOutcome::AlreadyRecorded {
                output,
                error,
                serialization,
            } => OpOutcome::AlreadyRecorded {
                output,
                error,
                serialization,
            },
            StepOutcome::Cancelled => OpOutcome::Cancelled,
            StepOutcome::Recorded | StepOutcome::NotOwner => OpOutcome::NotOwner,
        }
    }
}

/// A message sent from outside any workflow.
#[derive(Debug, Clone)]
pub(crate) struct OutgoingMessage {
    /// Its `message_uuid`: a resend under the same id is a no-op.
    pub id: String,
    pub destination: String,
    pub topic: String,
    /// Portable JSON.
    pub message: String,
    /// Its `created_at_epoch_ms`, stamped by the sender so receives keep the sending order.
    pub created_at: i64,
}

/// Messages from outside any workflow.
#[async_trait]
pub(crate) trait Messages: Send + Sync {
    /// Sends every message in one statement (one transaction on SQLite); a message whose id
    /// exists is skipped. A missing destination fails them all with
    /// `DbError::MissingReference`.
    async fn send_bulk(&self, messages: &[OutgoingMessage]) -> Result<(), DbError>;

    /// The oldest unconsumed message of `topic` for workflow `destination`, left unconsumed.
    async fn peek_message(
        &self,
        destination: &str,
        topic: &str,
    ) -> Result<Option<PeekedMessage>, DbError>;
}

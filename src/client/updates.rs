//! `impl Client`: talking to a running workflow. [`Client::update`] sends a named request and
//! waits for the workflow's answer; [`Client::signal_with_start`] sends a message to a workflow
//! id, starting the workflow first if it does not exist. Never SQL, never inside a workflow.
//!
//! **Updates, the caller's side.** The request is a keyed message and the answer an event (the
//! format and why: `durable::calls::updates`). A call first reads the answer (a retry after the
//! answer, even once the workflow finished, gets the same one), then checks the workflow is there
//! and not finished ([`Error::NotFound`], [`Error::WorkflowFinished`]), sends the request (a
//! resend with the same update id delivers nothing) and waits on the answer's event as
//! `get_event` does (NOTIFY on Postgres, polling on SQLite), checking the workflow's status at
//! each look so a workflow that ends without answering ends the wait. A caller's timeout leaves
//! the request delivered: the same update id later waits for the same answer.
//!
//! **Signal-with-start** creates the workflow by id (as `start`/`enqueue` with
//! [`WorkflowOptions::with_id`] do: an id that exists is a no-op, so two concurrent callers start
//! it once) and sends the message in the same transaction (`sysdb::NewWorkflow::message`): a
//! workflow it starts never lacks its message, and each call's message arrives. An id held by
//! another workflow is a conflict and sends nothing.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::base::clock::{millis, now_ms};
use crate::base::codec;
use crate::base::workflow::WorkflowRef;
use crate::client::{Client, Message};
use crate::durable::calls::updates::{self, answer_key, update_topic, Answer, Request};
use crate::durable::calls::{read_event, until_found};
use crate::engine::handle::WorkflowHandle;
use crate::engine::signals::event_key;
use crate::engine::start::{self, Target, WorkflowOptions};
use crate::error::{Error, Result};

/// Options of an update ([`Client::update`]).
///
/// ```
/// use std::time::Duration;
/// let options = stead::client::UpdateOptions::with_id("add-17").timeout(Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Default)]
pub struct UpdateOptions {
    id: Option<String>,
    timeout: Option<Duration>,
}

impl UpdateOptions {
    /// Under update id `id`: calling again with it (a retry, after a crash of either side)
    /// returns the same answer, and the workflow handles it once. Default: a fresh UUID.
    pub fn with_id(id: impl Into<String>) -> Self {
        UpdateOptions {
            id: Some(id.into()),
            timeout: None,
        }
    }

    /// Gives up after `timeout` with [`Error::UpdateTimeout`] (default: wait until the workflow
    /// answers or finishes).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// What a look for an update's answer found.
enum Look {
    Answer(String),
    Finished(String),
}

impl Client {
    /// Sends update `name` with `input` to workflow `workflow_id` and waits for its answer: the
    /// output of the handler of a `Context::accept_update` for `name`. Fails with
    /// [`Error::UpdateRejected`] (its validator refused), [`Error::UpdateFailed`] (its handler
    /// failed), [`Error::NotFound`], [`Error::WorkflowFinished`] (it finished before answering),
    /// or [`Error::UpdateTimeout`].
    pub async fn update<I: Serialize, O: DeserializeOwned>(
        &self,
        workflow_id: &str,
        name: &str,
        input: &I,
        options: UpdateOptions,
    ) -> Result<O> {
        let value = self.update_json(workflow_id, name, input, options).await?;
        updates::decode(value, "an update's output")
    }

    /// [`Client::update`], answering the output as JSON (for callers without its type: the CLI,
    /// the admin API).
    pub async fn update_json<I: Serialize>(
        &self,
        workflow_id: &str,
        name: &str,
        input: &I,
        options: UpdateOptions,
    ) -> Result<serde_json::Value> {
        let shared = self.shared();
        start::check_running(shared)?;
        crate::names::validate_name(workflow_id, "workflow id")?;
        crate::names::validate_text(name, "update name")?;
        let id = options.id.unwrap_or_else(start::new_workflow_id);
        crate::names::validate_name(&id, "update id")?;
        let key = answer_key(&id);
        let answer = match self.look(workflow_id, &key).await? {
            Some(Look::Answer(answer)) => answer,
            Some(Look::Finished(status)) => return Err(finished(workflow_id, status)),
            None => {
                let request = Request {
                    id: id.clone(),
                    input: codec::decode(
                        Some(&codec::encode(input, "an update's input")?),
                        "an update's input",
                    )?,
                };
                let message = Message::new(workflow_id, &request)?
                    .topic(update_topic(name))
                    .idempotency_key(&key);
                self.send_bulk([message]).await?;
                let until = options.timeout.map(|t| now_ms().saturating_add(millis(t)));
                let check = || self.look(workflow_id, &key);
                let signal = event_key(workflow_id, &key);
                match until_found(shared, signal, until, None, check).await? {
                    Some(Look::Answer(answer)) => answer,
                    Some(Look::Finished(status)) => return Err(finished(workflow_id, status)),
                    None => {
                        return Err(Error::UpdateTimeout {
                            workflow_id: workflow_id.to_owned(),
                            update_id: id,
                        })
                    }
                }
            }
        };
        let answer: Answer = codec::decode(Some(&answer), "an update's answer")?;
        match answer {
            Answer::Output(value) => Ok(value),
            Answer::Error(error) => Err(Error::UpdateFailed {
                workflow_id: workflow_id.to_owned(),
                update_id: id,
                error,
            }),
            Answer::Rejected(reason) => Err(Error::UpdateRejected {
                workflow_id: workflow_id.to_owned(),
                update_id: id,
                reason,
            }),
        }
    }

    /// The answer at `key`, else whether workflow `id` finished (an error when it does not
    /// exist); `None` while neither. An answer is written before the workflow finishes, so the
    /// answer is read again after a final status.
    async fn look(&self, id: &str, key: &str) -> Result<Option<Look>> {
        let shared = self.shared();
        if let Some(answer) = read_event(shared, id, key).await? {
            return Ok(Some(Look::Answer(answer)));
        }
        let target = id.to_owned();
        let row = shared
            .db
            .call_with(target, |db, id| async move { db.status(&id).await })
            .await?
            .ok_or_else(|| Error::NotFound(id.to_owned()))?;
        if !row.status.status.is_final() {
            return Ok(None);
        }
        match read_event(shared, id, key).await? {
            Some(answer) => Ok(Some(Look::Answer(answer))),
            None => Ok(Some(Look::Finished(row.status.status.to_string()))),
        }
    }

    /// Sends `message` (on `topic`) to workflow `options.id`, first enqueueing `workflow` with
    /// `input` on `queue` under that id unless a workflow with it exists. Two concurrent calls
    /// start it once and both messages arrive. Returns a handle on the workflow.
    ///
    /// [`Error::InvalidArgument`] without an id; [`Error::WorkflowConflict`] when the id
    /// belongs to another workflow.
    pub async fn signal_with_start<W, I, T>(
        &self,
        queue: &str,
        workflow: W,
        input: I,
        options: WorkflowOptions,
        message: &T,
        topic: Option<&str>,
    ) -> Result<WorkflowHandle<W::Output>>
    where
        W: WorkflowRef<I>,
        I: Serialize,
        T: Serialize + ?Sized,
    {
        self.signal_with_start_in(
            Target::Queue(queue),
            workflow,
            input,
            options,
            message,
            topic,
        )
        .await
    }

    /// Signal-with-start to `target` (a runtime starts directly).
    pub(crate) async fn signal_with_start_in<W, I, T>(
        &self,
        target: Target<'_>,
        workflow: W,
        input: I,
        options: WorkflowOptions,
        message: &T,
        topic: Option<&str>,
    ) -> Result<WorkflowHandle<W::Output>>
    where
        W: WorkflowRef<I>,
        I: Serialize,
        T: Serialize + ?Sized,
    {
        let name = workflow.name();
        let input_json = codec::encode_input(name, &input)?;
        let Some(id) = options.id.clone() else {
            return Err(Error::InvalidArgument(
                "signal-with-start needs a workflow id (WorkflowOptions::with_id)".into(),
            ));
        };
        let mut message = Message::new(id, message)?;
        if let Some(topic) = topic {
            message = message.topic(topic);
        }
        // Refused before anything is written, so a bad topic starts nothing.
        message.validate()?;
        let outgoing = Some(message.outgoing());
        let handle =
            start::submit_with(self.shared(), target, name, &input_json, options, outgoing).await?;
        Ok(handle.typed())
    }
}

fn finished(id: &str, status: String) -> Error {
    Error::WorkflowFinished {
        id: id.to_owned(),
        status,
    }
}

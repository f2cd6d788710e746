//! Updates: a caller sends a named request with an input to a running workflow and waits for its
//! answer; the workflow accepts requests where it chooses (`Context::accept_update`), may refuse
//! one through a validator, and records each accepted one's answer once. This module owns the
//! workflow's side and the wire format the client shares (`crate::client::updates`); it never
//! waits for an answer itself.
//!
//! **Storage, all inside DBOS's schema.** A request is an ordinary message (`notifications`) to
//! the workflow on the reserved topic `stead.update::<name>`, with message id
//! `stead.update::<update id>::<workflow id>` (DBOS's idempotency-key scheme, so a resend is a
//! no-op) and body `{"id": <update id>, "input": ..}`. The answer is an ordinary event
//! (`workflow_events`) keyed `stead.update::<update id>`: `{"output": ..}`, `{"error": ".."}`
//! (the handler failed) or `{"rejected": ".."}` (the validator refused). An accepted update is
//! one durable call, `stead.update`, whose row in `operation_outputs` holds
//! `{"id", "input", "answer"}`; consuming the request, that row and the answer event (with its
//! history row) commit in one statement, so a replay returns the recorded answer and never runs
//! the handler again. A rejection consumes the request and sets the answer event in one
//! statement but records no call: the workflow's history is as if the request never came. DBOS
//! readers see a consumed message, an event and a step named `stead.update`; nothing else.
//!
//! **Ordering.** Requests of one name are taken oldest first, as `recv` takes messages; the
//! validator runs on the oldest before anything is written. The handler is a step's body: it
//! runs once per accepted update (again only after a crash before its answer committed), and must
//! not make durable calls (their numbers would be skipped on replay). A workflow that waits past
//! `timeout` records that nothing came (`null`), durably, as `recv` does.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{replayed, until_found};
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::durable::context::{Begun, Call, Context};
use crate::engine::shared::Shared;
use crate::engine::signals::{event_key, message_key};
use crate::error::{Error, Result};
use crate::sysdb::{Op, OpOutcome, PeekedMessage, UPDATE_CALL};

/// What every reserved topic and answer key begins with.
const PREFIX: &str = "stead.update::";

/// The topic requests named `name` travel on.
pub(crate) fn update_topic(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The event key of update `update_id`'s answer; also the idempotency key of its request.
pub(crate) fn answer_key(update_id: &str) -> String {
    format!("{PREFIX}{update_id}")
}

/// A request's message body.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub id: String,
    pub input: serde_json::Value,
}

/// An update's answer, as its event holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Answer {
    Output(serde_json::Value),
    Error(String),
    Rejected(String),
}

/// The `stead.update` call's recorded output.
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    id: String,
    input: serde_json::Value,
    answer: Answer,
}

/// An update the workflow accepted and answered ([`Context::accept_update`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Update<I, O> {
    /// The update id the caller sent (its retries carry the same one).
    pub id: String,
    /// The request's input.
    pub input: I,
    /// The handler's answer, as recorded: its output, or its error's message.
    pub output: std::result::Result<O, String>,
}

impl Context {
    /// Accepts the next update named `name`, waiting up to `timeout` (durably, as
    /// [`recv`](Context::recv) waits): runs `handler` on its input and records the answer, which
    /// the caller receives ([`Client::update`](crate::Client::update)). `None` when no request
    /// came in time. A replay returns the recorded update without running `handler`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn cart(ctx: stead::Context, _: ()) -> stead::Result<u64> {
    /// let mut total = 0u64;
    /// while let Some(update) = ctx
    ///     .accept_update("add", Duration::from_secs(3600), |price: u64| async move {
    ///         Ok::<_, String>(total + price)
    ///     })
    ///     .await?
    /// {
    ///     total = update.output.unwrap_or(total);
    /// }
    /// # Ok(total) }
    /// ```
    pub fn accept_update<'c, I, O, E, H, Fut>(
        &'c self,
        name: &'c str,
        timeout: Duration,
        handler: H,
    ) -> impl Future<Output = Result<Option<Update<I, O>>>> + Send + 'c
    where
        I: DeserializeOwned + Send + 'c,
        O: Serialize + DeserializeOwned + Send + 'c,
        E: Display,
        H: FnOnce(I) -> Fut + Send + 'c,
        Fut: Future<Output = std::result::Result<O, E>> + Send + 'c,
    {
        self.accept_update_validated(name, timeout, |_: &I| Ok(()), handler)
    }

    /// [`Context::accept_update`] with a validator: a request it refuses (`Err(reason)`) is
    /// answered [`Error::UpdateRejected`](crate::Error::UpdateRejected) and consumed without
    /// recording anything in the workflow's history, and the wait goes on for the next one. A
    /// request whose input does not fit `I` is refused the same way.
    pub fn accept_update_validated<'c, I, O, E, V, H, Fut>(
        &'c self,
        name: &'c str,
        timeout: Duration,
        validator: V,
        handler: H,
    ) -> impl Future<Output = Result<Option<Update<I, O>>>> + Send + 'c
    where
        I: DeserializeOwned + Send + 'c,
        O: Serialize + DeserializeOwned + Send + 'c,
        E: Display,
        V: Fn(&I) -> std::result::Result<(), String> + Send + 'c,
        H: FnOnce(I) -> Fut + Send + 'c,
        Fut: Future<Output = std::result::Result<O, E>> + Send + 'c,
    {
        let function_id = self.next_function_id();
        let timeout_id = self.next_function_id();
        async move {
            if let Begun::Recorded(row) = self.begin(function_id, UPDATE_CALL).await? {
                let recorded: Option<Recorded> = replayed(&row, "a recorded update")?;
                return recorded.map(answered).transpose();
            }
            crate::names::validate_text(name, "update name")?;
            let topic = update_topic(name);
            let started = now_ms();
            let mut until: Option<i64> = None;
            let accepted = loop {
                let shared = self.shared();
                let wf = self.workflow_id();
                let mut found = peek(shared, wf, &topic).await?;
                if found.is_none() {
                    let until = match until {
                        Some(until) => until,
                        None => *until.insert(self.sleep_until(timeout_id, timeout).await?),
                    };
                    let check = || peek(shared, wf, &topic);
                    let key = message_key(wf, &topic);
                    found = until_found(shared, key, Some(until), Some(self), check).await?;
                }
                let Some(message) = found else {
                    let call = Call::new(function_id, UPDATE_CALL, started).output("null".into());
                    return match self.record(call).await? {
                        None => Ok(None),
                        Some((output, _)) => replay_text(output),
                    };
                };
                let format = message.serialization.as_deref();
                let request = codec::read::<Request>(format, Some(&message.message), "an update");
                let request = match request {
                    Ok(request) => request,
                    // Not ours to answer (no update id): consumed, so it blocks no other.
                    Err(e) => {
                        self.reject(started, function_id, &message, &message.id, e.to_string())
                            .await?;
                        continue;
                    }
                };
                let verdict = serde_json::from_value::<I>(request.input.clone())
                    .map_err(|e| format!("the input does not fit the update {name:?}: {e}"))
                    .and_then(|input| validator(&input).map(|()| input));
                match verdict {
                    Ok(input) => break (message, request, input),
                    Err(reason) => {
                        self.reject(started, function_id, &message, &request.id, reason)
                            .await?
                    }
                }
            };
            let (message, request, input) = accepted;
            let answer = {
                let _busy = self.busy();
                match handler(input).await {
                    Ok(output) => {
                        let text = codec::encode(&output, "an update's output")?;
                        Answer::Output(codec::decode(Some(&text), "an update's output")?)
                    }
                    Err(e) => Answer::Error(codec::describe(&e)),
                }
            };
            let key = answer_key(&request.id);
            let recorded = Recorded {
                id: request.id,
                input: request.input,
                answer,
            };
            let op = Op::AcceptUpdate {
                step: self.op_step(function_id, started),
                message_id: message.id,
                output: codec::encode(&recorded, "an update")?,
                key: key.clone(),
                value: codec::encode(&recorded.answer, "an update's answer")?,
            };
            match self.op(op).await? {
                OpOutcome::AlreadyRecorded { output, .. } => return replay_text(output),
                OpOutcome::Done { .. } => {}
                other => {
                    return Err(Error::Fatal(format!(
                        "an update's answer was not recorded: {other:?}"
                    )))
                }
            }
            self.shared()
                .signals
                .notify(&event_key(self.workflow_id(), &key));
            answered(recorded).map(Some)
        }
    }

    /// Refuses request `message` (update `update_id`) for `reason`: consumed and answered, with
    /// nothing recorded at `function_id`.
    async fn reject(
        &self,
        started: i64,
        function_id: u32,
        message: &PeekedMessage,
        update_id: &str,
        reason: String,
    ) -> Result<()> {
        let key = answer_key(update_id);
        let op = Op::RejectUpdate {
            step: self.op_step(function_id, started),
            message_id: message.id.clone(),
            key: key.clone(),
            value: codec::encode(&Answer::Rejected(reason), "an update's answer")?,
        };
        self.op(op).await?;
        self.shared()
            .signals
            .notify(&event_key(self.workflow_id(), &key));
        Ok(())
    }
}

/// The oldest request on `topic` for workflow `id`, left unconsumed.
async fn peek(shared: &Shared, id: &str, topic: &str) -> Result<Option<PeekedMessage>> {
    let (id, topic) = (id.to_owned(), topic.to_owned());
    let found = shared
        .db
        .call_with((id, topic), move |db, (id, topic)| async move {
            db.peek_message(&id, &topic).await
        })
        .await?;
    Ok(found)
}

/// The update a competing execution recorded first.
fn replay_text<I: DeserializeOwned, O: DeserializeOwned>(
    output: Option<String>,
) -> Result<Option<Update<I, O>>> {
    let recorded: Option<Recorded> = codec::decode(output.as_deref(), "a recorded update")?;
    recorded.map(answered).transpose()
}

fn answered<I: DeserializeOwned, O: DeserializeOwned>(recorded: Recorded) -> Result<Update<I, O>> {
    let output = match recorded.answer {
        Answer::Output(v) => Ok(decode(v, "an update's output")?),
        Answer::Error(e) | Answer::Rejected(e) => Err(e),
    };
    Ok(Update {
        id: recorded.id,
        input: decode(recorded.input, "an update's input")?,
        output,
    })
}

/// Reads a JSON value as `T`.
pub(crate) fn decode<T: DeserializeOwned>(value: serde_json::Value, what: &str) -> Result<T> {
    serde_json::from_value(value).map_err(|e| Error::Decode {
        what: what.to_owned(),
        reason: e.to_string(),
    })
}

//! `impl Client`: messages sent from outside any workflow, one or many at once, optionally
//! under an idempotency key so a retried sender (an HTTP handler) does not deliver twice.
//!
//! Keys follow DBOS's scheme (`_sys_db.py`, `send_bulk`): a keyed message's id is
//! `<key>::<destination>`, so DBOS's client and stead deduplicate each other's resends; an
//! unkeyed one gets a fresh UUID. It never builds SQL and never runs inside a workflow
//! (`Context::send` is recorded instead).
//!
//! **Sends with keys.** A keyed message is inserted `ON CONFLICT (message_uuid) DO NOTHING`, so a
//! resend from stead or DBOS delivers nothing. `send_bulk` is one `UNNEST` insert (one transaction
//! on SQLite) stamped with increasing `created_at_epoch_ms`, so receives keep the batch's order; a
//! batch repeating a key is refused before the write (DBOS's rule), a missing destination fails the
//! whole batch.

use std::collections::HashSet;

use serde::Serialize;

use crate::base::codec;
use crate::client::Client;
use crate::durable::calls;
use crate::engine::signals;
use crate::error::{DbError, Error, Result};
use crate::sysdb::{next_created_at, OutgoingMessage};

/// One message for [`Client::send_bulk`]: a destination, a value, and optionally a topic and an
/// idempotency key.
///
/// ```
/// # fn demo() -> stead::Result<()> {
/// let m = stead::client::Message::new("order-17", &"paid")?
///     .topic("payments")
///     .idempotency_key("charge-8842");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Message {
    destination: String,
    topic: Option<String>,
    key: Option<String>,
    body: String,
}

impl Message {
    /// A message carrying `value` (as portable JSON) to workflow `destination`.
    pub fn new<T: Serialize + ?Sized>(
        destination: impl Into<String>,
        value: &T,
    ) -> Result<Message> {
        Ok(Message {
            destination: destination.into(),
            topic: None,
            key: None,
            body: codec::encode(value, "a message")?,
        })
    }

    /// The topic it is received on (default: none, DBOS's null topic).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Its idempotency key: sending it again with the same key and destination is a no-op,
    /// from stead or from DBOS's client.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Refuses, before any write, what the database would always refuse.
    pub(crate) fn validate(&self) -> Result<()> {
        crate::names::validate_name(&self.destination, "workflow id")?;
        if let Some(topic) = &self.topic {
            crate::names::validate_text(topic, "topic")?;
        }
        if let Some(key) = &self.key {
            crate::names::validate_name(key, "idempotency key")?;
            crate::names::validate_text(&format!("{key}::{}", self.destination), "message id")?;
        }
        Ok(())
    }

    pub(super) fn outgoing(self) -> OutgoingMessage {
        let id = match &self.key {
            Some(key) => format!("{key}::{}", self.destination),
            // Time-ordered, like workflow ids: the notifications index grows at its right edge.
            None => uuid::Uuid::now_v7().to_string(),
        };
        OutgoingMessage {
            id,
            destination: self.destination,
            topic: self.topic.unwrap_or_else(|| calls::NULL_TOPIC.to_owned()),
            message: self.body,
            created_at: next_created_at(),
        }
    }
}

impl Client {
    /// Sends `message` to workflow `destination` on `topic`, from outside any workflow.
    pub async fn send<T: Serialize>(
        &self,
        destination: &str,
        message: &T,
        topic: Option<&str>,
    ) -> Result<()> {
        self.send_bulk([with_topic(Message::new(destination, message)?, topic)])
            .await
    }

    /// Like [`Client::send`], under an idempotency key: another send with the same key to the
    /// same destination (a retried request, or DBOS's client with that key) delivers nothing.
    pub async fn send_with_key<T: Serialize>(
        &self,
        destination: &str,
        message: &T,
        topic: Option<&str>,
        key: &str,
    ) -> Result<()> {
        let message = with_topic(Message::new(destination, message)?, topic).idempotency_key(key);
        self.send_bulk([message]).await
    }

    /// Sends every message in one statement: all are delivered or none (a missing destination
    /// fails them all with [`Error::NotFound`]). Two messages with the same idempotency key are
    /// refused ([`Error::InvalidArgument`]), as DBOS's `send_bulk` refuses them.
    pub async fn send_bulk(&self, messages: impl IntoIterator<Item = Message>) -> Result<()> {
        let messages: Vec<Message> = messages.into_iter().collect();
        messages.iter().try_for_each(Message::validate)?;
        refuse_repeated_keys(&messages)?;
        let outgoing: Vec<OutgoingMessage> = messages.into_iter().map(Message::outgoing).collect();
        if outgoing.is_empty() {
            return Ok(());
        }
        let shared = self.shared();
        let sent = shared
            .db
            .call_with(outgoing.clone(), |db, all| async move {
                db.send_bulk(&all).await
            })
            .await;
        if let Err(DbError::MissingReference { .. }) = sent {
            let mut missing: Vec<&str> = outgoing.iter().map(|m| m.destination.as_str()).collect();
            missing.sort_unstable();
            missing.dedup();
            return Err(Error::NotFound(missing.join(", ")));
        }
        sent?;
        for m in &outgoing {
            shared
                .signals
                .notify(&signals::message_key(&m.destination, &m.topic));
        }
        Ok(())
    }
}

fn with_topic(message: Message, topic: Option<&str>) -> Message {
    match topic {
        Some(topic) => message.topic(topic),
        None => message,
    }
}

fn refuse_repeated_keys(messages: &[Message]) -> Result<()> {
    let mut seen = HashSet::new();
    let mut repeated: Vec<&str> = messages
        .iter()
        .filter_map(|m| m.key.as_deref())
        .filter(|k| !seen.insert(*k))
        .collect();
    if repeated.is_empty() {
        return Ok(());
    }
    repeated.sort_unstable();
    repeated.dedup();
    Err(Error::InvalidArgument(format!(
        "send_bulk received duplicate idempotency keys: {}",
        repeated.join(", ")
    )))
}

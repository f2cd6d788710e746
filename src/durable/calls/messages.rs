//! Messages: `send` to any workflow (exactly once from inside a workflow), and `recv`, which
//! consumes the oldest unconsumed message of a topic exactly once, or gives up after a durable
//! timeout.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{replayed, NULL_TOPIC};
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::durable::context::{Begun, Context};
use crate::engine::signals::message_key;
use crate::error::{DbError, Error, Result};
use crate::sysdb::{Op, OpOutcome};

const POLL_MAX: Duration = Duration::from_secs(1);
/// Polls while other processes' sends are heard: every insert into `notifications` announces
/// itself (DBOS's trigger), so a poll only covers a listener's reconnect (which wakes every
/// waiter anyway); many waiting workflows must not poll the database many times a second.
const HEARD_POLL_FIRST: Duration = Duration::from_secs(2);
const HEARD_POLL_MAX: Duration = Duration::from_secs(30);

impl Context {
    /// Sends `message` to workflow `destination` on `topic`. Recorded: a replay does not send
    /// again.
    pub fn send<'c, T: Serialize>(
        &'c self,
        destination: &'c str,
        message: &T,
        topic: Option<&'c str>,
    ) -> impl Future<Output = Result<()>> + Send + 'c {
        let function_id = self.next_function_id();
        let message = codec::encode(message, "a message");
        async move {
            if let Begun::Recorded(_) = self.begin(function_id, "DBOS.send").await? {
                return Ok(());
            }
            let topic = topic.unwrap_or(NULL_TOPIC);
            crate::names::validate_name(destination, "workflow id")?;
            crate::names::validate_text(topic, "topic")?;
            let message = message?;
            self.check_value(&message, || {
                format!("the message sent to {destination:?} (DBOS.send, call #{function_id})")
            })?;
            let op = Op::Send {
                step: self.op_step(function_id, now_ms()),
                destination: destination.to_owned(),
                topic: topic.to_owned(),
                message,
            };
            match self.op(op).await {
                Err(Error::Database(DbError::MissingReference { .. })) => {
                    return Err(Error::NotFound(destination.to_owned()))
                }
                other => other?,
            };
            self.shared()
                .signals
                .notify(&message_key(destination, topic));
            Ok(())
        }
    }

    /// Receives the oldest unconsumed message on `topic`, waiting up to `timeout` (durably: a
    /// recovered workflow waits only what is left). `None` when none came. Each message is
    /// received once, and a replay returns what the first run received.
    pub fn recv<'c, T: DeserializeOwned + Send + 'c>(
        &'c self,
        topic: Option<&'c str>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<T>>> + Send + 'c {
        let function_id = self.next_function_id();
        let timeout_id = self.next_function_id();
        async move {
            if let Begun::Recorded(row) = self.begin(function_id, "DBOS.recv").await? {
                return replayed(&row, "a received message");
            }
            let topic = topic.unwrap_or(NULL_TOPIC).to_owned();
            crate::names::validate_text(&topic, "topic")?;
            let subscription = self
                .shared()
                .signals
                .subscribe(message_key(self.workflow_id(), &topic));
            let started = now_ms();
            let _waiting = self.waiting();
            let mut until: Option<i64> = None;
            let mut parked = false;
            let heard = || self.shared().signals.heard();
            let mut poll = if heard() {
                HEARD_POLL_FIRST
            } else {
                Duration::from_millis(50)
            };
            loop {
                let woken = subscription.notify().notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                let give_up = until.is_some_and(|u| now_ms() >= u);
                let op = Op::Recv {
                    step: self.op_step(function_id, started),
                    topic: topic.clone(),
                    give_up,
                };
                let outcome = self.op(op).await?;
                if parked {
                    if let OpOutcome::Nothing = outcome {
                        return self.evict().await;
                    }
                    self.unpark();
                }
                match outcome {
                    // The message is recorded in its own format, as DBOS records it.
                    OpOutcome::Done {
                        output,
                        serialization,
                    }
                    | OpOutcome::AlreadyRecorded {
                        output,
                        serialization,
                        ..
                    } => {
                        let format = serialization.as_deref();
                        return codec::read(format, output.as_deref(), "a received message");
                    }
                    _ => {}
                }
                let until = match until {
                    Some(until) => until,
                    None => *until.insert(self.sleep_until(timeout_id, timeout).await?),
                };
                tokio::select! {
                    _ = &mut woken => {}
                    _ = crate::base::clock::nap(poll, Some(until)) => {
                        poll = (poll * 2).min(if heard() { HEARD_POLL_MAX } else { POLL_MAX });
                    }
                    _ = self.aborted() => {}
                    _ = self.evictable(started, Some(until), Some(subscription.key())) => {
                        // Heard, every send since the last look woke `woken` (enabled before
                        // it), and any later one wakes the registry entry: no look is needed.
                        if heard() && woken.as_mut().now_or_never().is_none() {
                            return self.evict().await;
                        }
                        parked = true;
                    }
                }
                self.check_abort()?;
            }
        }
    }
}

//! Events: a workflow publishes the latest value of a key (with history); anyone reads it, and a
//! workflow's read is recorded so a replay sees what the first run saw.

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{replayed, until_found};
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::durable::context::{Begun, Call, Context};
use crate::engine::shared::Shared;
use crate::engine::signals::event_key;
use crate::error::Result;
use crate::sysdb::Op;

impl Context {
    /// Sets event `key` of this workflow to `value` (readers see the latest value).
    pub fn set_event<'c, T: Serialize>(
        &'c self,
        key: &'c str,
        value: &T,
    ) -> impl Future<Output = Result<()>> + Send + 'c {
        let function_id = self.next_function_id();
        let value = codec::encode(value, "an event value");
        async move {
            if let Begun::Recorded(_) = self.begin(function_id, "DBOS.setEvent").await? {
                return Ok(());
            }
            crate::names::validate_text(key, "event key")?;
            let value = value?;
            self.check_value(&value, || {
                format!("the value of event {key:?} (DBOS.setEvent, call #{function_id})")
            })?;
            let op = Op::SetEvent {
                step: self.op_step(function_id, now_ms()),
                key: key.to_owned(),
                value,
            };
            self.op(op).await?;
            self.shared()
                .signals
                .notify(&event_key(self.workflow_id(), key));
            Ok(())
        }
    }

    /// Reads event `key` of workflow `workflow_id`, waiting up to `timeout` for it to be set.
    /// Recorded: a replay returns the value the first run read, even if the event changed.
    pub fn get_event<'c, T: DeserializeOwned + Send + 'c>(
        &'c self,
        workflow_id: &'c str,
        key: &'c str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<T>>> + Send + 'c {
        let function_id = self.next_function_id();
        let timeout_id = self.next_function_id();
        async move {
            if let Begun::Recorded(row) = self.begin(function_id, "DBOS.getEvent").await? {
                return replayed(&row, "a recorded event value");
            }
            crate::names::validate_name(workflow_id, "workflow id")?;
            crate::names::validate_text(key, "event key")?;
            let started = now_ms();
            let shared = self.shared();
            let mut found = read_event(shared, workflow_id, key).await?;
            if found.is_none() {
                let until = self.sleep_until(timeout_id, timeout).await?;
                let check = || read_event(shared, workflow_id, key);
                found = until_found(
                    shared,
                    event_key(workflow_id, key),
                    Some(until),
                    Some(self),
                    check,
                )
                .await?;
            }
            let output = found.unwrap_or_else(|| "null".to_owned());
            let call = Call::new(function_id, "DBOS.getEvent", started).output(output.clone());
            let output = match self.record(call).await? {
                None => Some(output),
                Some((recorded, _)) => recorded,
            };
            codec::decode(output.as_deref(), "an event value")
        }
    }
}

/// The latest value of event `key` of workflow `id`, as portable JSON text (converted when
/// its writer stored another format, so a call records it as portable JSON).
pub(crate) async fn read_event(shared: &Shared, id: &str, key: &str) -> Result<Option<String>> {
    let (id, key) = (id.to_owned(), key.to_owned());
    let found = shared
        .db
        .call_with((id, key), move |db, (id, key)| async move {
            db.get_event(&id, &key).await
        })
        .await?;
    match found {
        Some((value, serialization)) => {
            codec::read_text(serialization.as_deref(), value, "an event value").map(Some)
        }
        None => Ok(None),
    }
}

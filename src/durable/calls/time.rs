//! Durable time: sleeps that survive restarts (the wake-up time is recorded before waiting, so a
//! recovered workflow sleeps only what is left), and recorded `now`, random and uuid values.

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::replayed;
use crate::base::clock::{millis, now_ms};
use crate::base::codec;
use crate::durable::context::{Begun, Call, Context};
use crate::error::Result;

impl Context {
    /// Sleeps for `duration`, durably: a workflow recovered mid-sleep sleeps only what is left.
    /// A cancel interrupts it.
    pub fn sleep(&self, duration: Duration) -> impl Future<Output = Result<()>> + Send + '_ {
        let function_id = self.next_function_id();
        async move {
            let until = self.sleep_until(function_id, duration).await?;
            self.wait_until(until).await
        }
    }

    /// The wake-up time (epoch ms) of sleep `function_id`, recorded now or replayed.
    pub(crate) async fn sleep_until(&self, function_id: u32, duration: Duration) -> Result<i64> {
        if let Begun::Recorded(row) = self.begin(function_id, "DBOS.sleep").await? {
            let secs: f64 = replayed(&row, "a recorded sleep's wake-up time")?;
            return Ok((secs * 1000.0).round() as i64);
        }
        let started = now_ms();
        let until = started.saturating_add(millis(duration));
        // DBOS records the wake-up time in epoch seconds, and as the call's completion time.
        let output = codec::encode(&(until as f64 / 1000.0), "a sleep's wake-up time")?;
        let call = Call {
            completed_at: Some(until),
            ..Call::new(function_id, "DBOS.sleep", started).output(output)
        };
        match self.record(call).await? {
            None => Ok(until),
            Some((output, _)) => {
                let secs: f64 =
                    codec::decode(output.as_deref(), "a recorded sleep's wake-up time")?;
                Ok((secs * 1000.0).round() as i64)
            }
        }
    }

    /// Waits until `until` (epoch ms), or until the run is cancelled. A wait that ran its
    /// course re-reads the row once: a cancel by a writer that does not announce it (DBOS's
    /// tools) then stops the run here, before the next step's body.
    pub(crate) async fn wait_until(&self, until: i64) -> Result<()> {
        // A replay-only run (verification) checks the calls, not the time between them.
        if self.is_replay_only() {
            return self.check_abort();
        }
        let _waiting = self.waiting();
        let since = now_ms();
        let mut waited = false;
        loop {
            let left = until - now_ms();
            if left <= 0 {
                self.check_abort()?;
                return if waited { self.recheck().await } else { Ok(()) };
            }
            waited = true;
            tokio::select! {
                _ = crate::base::clock::sleep_until_ms(until) => {}
                _ = self.aborted() => return self.check_abort(),
                // Nothing to look at again: its timer is all that wakes it.
                _ = self.evictable(since, Some(until), None) => return self.evict().await,
            }
        }
    }

    /// The current time (epoch milliseconds), recorded: a replay sees the first run's value.
    pub fn now(&self) -> impl Future<Output = Result<i64>> + Send + '_ {
        self.recorded_value("stead.now", now_ms)
    }

    /// A random number, recorded: a replay sees the first run's value.
    pub fn random(&self) -> impl Future<Output = Result<u64>> + Send + '_ {
        self.recorded_value("stead.random", || uuid::Uuid::new_v4().as_u64_pair().0)
    }

    /// A fresh UUID, recorded: a replay sees the first run's value.
    pub fn uuid(&self) -> impl Future<Output = Result<String>> + Send + '_ {
        self.recorded_value("stead.uuid", || uuid::Uuid::new_v4().to_string())
    }

    fn recorded_value<T>(
        &self,
        name: &'static str,
        produce: fn() -> T,
    ) -> impl Future<Output = Result<T>> + Send + '_
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let function_id = self.next_function_id();
        async move {
            if let Begun::Recorded(row) = self.begin(function_id, name).await? {
                return replayed(&row, name);
            }
            let started = now_ms();
            let value = produce();
            let output = codec::encode(&value, name)?;
            match self
                .record(Call::new(function_id, name, started).output(output))
                .await?
            {
                None => Ok(value),
                Some((output, _)) => codec::decode(output.as_deref(), name),
            }
        }
    }
}

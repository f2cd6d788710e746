//! Durable `select`: the first of two durable calls to finish wins, and the winner is recorded,
//! so a replay takes the same branch without waiting again.

use std::future::Future;
use std::pin::pin;

use futures::future;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::base::clock::now_ms;
use crate::base::codec;
use crate::durable::context::{Begun, Call, Context};
use crate::error::{Error, Result};

/// Which call of [`Context::select2`] finished first, with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selected<A, B> {
    /// The first call won.
    First(A),
    /// The second call won.
    Second(B),
}

impl Context {
    /// Runs two durable calls at once (a child's result and a sleep, two receives, ...) and
    /// returns the first to finish. The winner and its value are recorded: a replay returns
    /// them at once. Create both calls before `select2` so they are numbered in code order.
    ///
    /// ```no_run
    /// # async fn demo(ctx: stead::Context) -> stead::Result<()> {
    /// use std::time::Duration;
    /// let child = ctx.start_child("slow", (), Default::default()).await?;
    /// match ctx.select2(child.result::<u32>(), ctx.sleep(Duration::from_secs(5))).await? {
    ///     stead::durable::Selected::First(value) => println!("child finished: {value}"),
    ///     stead::durable::Selected::Second(()) => println!("gave up waiting"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn select2<'c, A, B, FA, FB>(
        &'c self,
        a: FA,
        b: FB,
    ) -> impl Future<Output = Result<Selected<A, B>>> + Send + 'c
    where
        FA: Future<Output = Result<A>> + Send + 'c,
        FB: Future<Output = Result<B>> + Send + 'c,
        A: Serialize + DeserializeOwned + Send + 'c,
        B: Serialize + DeserializeOwned + Send + 'c,
    {
        let function_id = self.next_function_id();
        async move {
            if let Begun::Recorded(row) = self.begin(function_id, "stead.select").await? {
                let recorded: Value = super::replayed(&row, "a recorded select")?;
                return decode(recorded);
            }
            let started = now_ms();
            let winner = match future::select(pin!(a), pin!(b)).await {
                future::Either::Left((a, _)) => Selected::First(a?),
                future::Either::Right((b, _)) => Selected::Second(b?),
            };
            let recorded = match &winner {
                Selected::First(a) => json!({"index": 0, "value": a}),
                Selected::Second(b) => json!({"index": 1, "value": b}),
            };
            let output = codec::encode(&recorded, "a select's winner")?;
            match self
                .record(Call::new(function_id, "stead.select", started).output(output))
                .await?
            {
                None => Ok(winner),
                Some((output, _)) => decode(codec::decode(output.as_deref(), "a recorded select")?),
            }
        }
    }
}

impl Context {
    /// Like [`Context::select2`] over any number of durable calls of one type: the index and
    /// value of the first to finish, recorded. (To wait for all of them instead, `join` them
    /// with `futures::future::try_join_all`: each call records itself, so that is durable too.)
    /// Calls of different kinds (a receive, a sleep) differ in type: box them
    /// (`futures::FutureExt::boxed`).
    pub fn select_all<'c, C, F, T>(
        &'c self,
        calls: C,
    ) -> impl Future<Output = Result<(usize, T)>> + Send + 'c
    where
        C: IntoIterator<Item = F>,
        F: Future<Output = Result<T>> + Send + 'c,
        T: Serialize + DeserializeOwned + Send + 'c,
    {
        // Collected first, so calls an iterator creates lazily are numbered before this one.
        let calls: Vec<_> = calls.into_iter().map(Box::pin).collect();
        let function_id = self.next_function_id();
        async move {
            if let Begun::Recorded(row) = self.begin(function_id, "stead.select").await? {
                let recorded: Value = super::replayed(&row, "a recorded select")?;
                return decode_indexed(recorded);
            }
            if calls.is_empty() {
                return Err(Error::InvalidArgument(
                    "select_all needs at least one call".into(),
                ));
            }
            let started = now_ms();
            let (value, index, _) = future::select_all(calls).await;
            let value = value?;
            let output = codec::encode(
                &json!({"index": index, "value": value}),
                "a select's winner",
            )?;
            match self
                .record(Call::new(function_id, "stead.select", started).output(output))
                .await?
            {
                None => Ok((index, value)),
                Some((output, _)) => {
                    decode_indexed(codec::decode(output.as_deref(), "a recorded select")?)
                }
            }
        }
    }
}

fn decode_indexed<T: DeserializeOwned>(recorded: Value) -> Result<(usize, T)> {
    let bad = |reason: String| Error::Decode {
        what: "a recorded select".into(),
        reason,
    };
    let index = recorded
        .get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no branch index".into()))?;
    let value = recorded.get("value").cloned().unwrap_or(Value::Null);
    let value = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
    Ok((index as usize, value))
}

fn decode<A: DeserializeOwned, B: DeserializeOwned>(recorded: Value) -> Result<Selected<A, B>> {
    let bad = |reason: String| Error::Decode {
        what: "a recorded select".into(),
        reason,
    };
    let value = recorded.get("value").cloned().unwrap_or(Value::Null);
    match recorded.get("index").and_then(Value::as_u64) {
        Some(0) => serde_json::from_value(value)
            .map(Selected::First)
            .map_err(|e| bad(e.to_string())),
        Some(1) => serde_json::from_value(value)
            .map(Selected::Second)
            .map_err(|e| bad(e.to_string())),
        other => Err(bad(format!("no branch {other:?}"))),
    }
}

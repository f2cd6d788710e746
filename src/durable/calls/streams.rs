//! Streams: a workflow appends values to a keyed stream and closes it; readers outside the
//! workflow follow it as an async `Stream` that ends at the close (DBOS's closing sentinel).

use std::collections::VecDeque;
use std::future::Future;

use futures::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::until_found;
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::durable::context::{Begun, Context};
use crate::engine::shared::SharedRef;
use crate::engine::signals::stream_key;
use crate::error::{Error, Result};
use crate::sysdb::{Op, StreamRow};

/// DBOS's closing sentinel, as stored (portable JSON of the string).
const CLOSED: &str = crate::sysdb::STREAM_CLOSED;
const PAGE: i64 = 256;

/// One value of a stream and its position.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamValue<T> {
    /// 0-based position in the stream.
    pub offset: u32,
    pub value: T,
}

impl Context {
    /// Appends `value` to this workflow's stream `key`.
    pub fn write_stream<'c, T: Serialize>(
        &'c self,
        key: &'c str,
        value: &T,
    ) -> impl Future<Output = Result<()>> + Send + 'c {
        let value = codec::encode(value, "a stream value");
        self.stream_op(key, value, false)
    }

    /// Closes stream `key`: readers end after its last value.
    pub fn close_stream<'c>(
        &'c self,
        key: &'c str,
    ) -> impl Future<Output = Result<()>> + Send + 'c {
        self.stream_op(key, Ok(CLOSED.to_owned()), true)
    }

    fn stream_op<'c>(
        &'c self,
        key: &'c str,
        value: Result<String>,
        close: bool,
    ) -> impl Future<Output = Result<()>> + Send + 'c {
        let function_id = self.next_function_id();
        let name = if close {
            "DBOS.closeStream"
        } else {
            "DBOS.writeStream"
        };
        async move {
            if let Begun::Recorded(_) = self.begin(function_id, name).await? {
                return Ok(());
            }
            crate::names::validate_text(key, "stream key")?;
            let value = value?;
            self.check_value(&value, || {
                format!("the value written to stream {key:?} ({name}, call #{function_id})")
            })?;
            let op = Op::WriteStream {
                step: self.op_step(function_id, now_ms()),
                key: key.to_owned(),
                value,
                close,
            };
            self.op(op).await?;
            self.shared()
                .signals
                .notify(&stream_key(self.workflow_id(), key));
            Ok(())
        }
    }
}

struct Reader {
    shared: SharedRef,
    id: String,
    key: String,
    next: i32,
    buffer: VecDeque<StreamRow>,
    done: bool,
}

/// Follows stream `key` of workflow `id` from `offset`: values as they are written, ending at
/// the close (or when the workflow has finished and no value is left).
pub(crate) fn read_stream<T: DeserializeOwned>(
    shared: SharedRef,
    id: &str,
    key: &str,
    offset: u32,
) -> impl Stream<Item = Result<StreamValue<T>>> {
    let reader = Reader {
        shared,
        id: id.to_owned(),
        key: key.to_owned(),
        next: offset.min(i32::MAX as u32) as i32,
        buffer: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(reader, |mut r| async move {
        if r.done {
            return None;
        }
        let row = match r.next_row().await {
            Ok(Some(row)) => row,
            Ok(None) => return None,
            Err(e) => {
                r.done = true;
                return Some((Err(e), r));
            }
        };
        let format = row.serialization.as_deref();
        let item =
            codec::read(format, Some(&row.value), "a stream value").map(|value| StreamValue {
                offset: row.offset.max(0) as u32,
                value,
            });
        Some((item, r))
    })
}

impl Reader {
    /// The next value, waiting for it; `None` at the end of the stream.
    async fn next_row(&mut self) -> Result<Option<StreamRow>> {
        if self.buffer.is_empty() {
            crate::names::validate_name(&self.id, "workflow id")?;
            crate::names::validate_text(&self.key, "stream key")?;
            let shared = self.shared.clone();
            let (id, key, from) = (self.id.clone(), self.key.clone(), self.next);
            let page = || fetch(&shared, &id, &key, from);
            match until_found(
                &self.shared,
                stream_key(&self.id, &self.key),
                None,
                None,
                page,
            )
            .await?
            {
                Some(rows) => self.buffer.extend(rows),
                None => return Ok(None),
            }
        }
        let Some(row) = self.buffer.pop_front() else {
            return Ok(None);
        };
        self.next = row.offset + 1;
        if row.value == CLOSED {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(row))
    }
}

/// The next page of values from `from`; `Some(empty)` when the workflow has finished without
/// closing the stream (nothing more will come), `None` to keep waiting.
async fn fetch(
    shared: &SharedRef,
    id: &str,
    key: &str,
    from: i32,
) -> Result<Option<Vec<StreamRow>>> {
    let rows = page(shared, id, key, from).await?;
    if !rows.is_empty() {
        return Ok(Some(rows));
    }
    let i = id.to_owned();
    let status = shared
        .db
        .call_with(i, move |db, i| async move { db.status(&i).await })
        .await?;
    match status {
        None => Err(Error::NotFound(id.to_owned())),
        // Values written between the empty read and the finish are read now: every value is
        // committed before the workflow's outcome, so this read is the last word.
        Some(row) if row.status.status.is_final() => Ok(Some(page(shared, id, key, from).await?)),
        Some(_) => Ok(None),
    }
}

async fn page(shared: &SharedRef, id: &str, key: &str, from: i32) -> Result<Vec<StreamRow>> {
    let (i, k) = (id.to_owned(), key.to_owned());
    Ok(shared
        .db
        .call_with((i, k), move |db, (i, k)| async move {
            db.read_stream(&i, &k, from, PAGE).await
        })
        .await?)
}

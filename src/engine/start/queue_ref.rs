//! [`QueueRef`]: how code outside stead, a ractor actor above all, enqueues into one of this
//! runtime's queues without awaiting each write. A stead type, so a ractor release never
//! changes stead's API; it never writes itself (the queue actor begins each enqueue in the order
//! the requests arrive).
//!
//! **Enqueues by actor message keep their order.** A queue actor begins each request in its handler
//! (checks, id, `created_at`, slot), then lets the write complete apart, so a user actor may send
//! many without waiting: the database actor commits them together, and the queue order is the order
//! they were sent (`created_at` is stamped when a submission begins, not when its batch is
//! written). Sent this way, W3's producer makes 4,537 wf/s against 1,177 awaiting each enqueue, at
//! 0.30 commits per workflow (`benches/README.md`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::engine::dispatch::QueueRequest;
use crate::engine::request::EnqueueRequest;
use crate::engine::shared::SharedRef;
use crate::error::{Error, Result};

/// One queue of a running [`Runtime`](crate::Runtime), for enqueueing from your own actors
/// (from [`Runtime::queue_ref`](crate::Runtime::queue_ref)).
///
/// [`enqueue`](QueueRef::enqueue) hands the request to the queue's actor at once and returns
/// without waiting for the write, so an actor can go on with its next message. Requests sent
/// through any `QueueRef` of a queue are queued in the order they were sent, and those sent
/// while a write is in flight are committed together. The returned [`Enqueued`] resolves to the
/// workflow's id once its row is committed. A queue actor restarted after a crash is found
/// again on the next call: the ref stays valid for the runtime's life.
///
/// ```no_run
/// # async fn demo(runtime: stead::Runtime) -> stead::Result<()> {
/// use stead::queues::EnqueueRequest;
///
/// let queue = runtime.queue_ref("orders")?;
/// // Inside an actor's handler: send now, await the answers elsewhere.
/// let first = queue.enqueue(EnqueueRequest::new("checkout", &17u64)?)?;
/// let second = queue.enqueue(EnqueueRequest::new("checkout", &18u64)?)?;
/// let (a, b) = (first.await?, second.await?);
/// let receipt: String = runtime.client().handle(a).result().await?;
/// # let _ = (b, receipt); Ok(()) }
/// ```
#[derive(Clone)]
pub struct QueueRef {
    shared: SharedRef,
    queue: String,
}

impl std::fmt::Debug for QueueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueRef")
            .field("queue", &self.queue)
            .finish()
    }
}

impl QueueRef {
    /// The queue `queue` of this runtime, if it has an actor here.
    pub(crate) fn new(shared: &SharedRef, queue: &str) -> Result<QueueRef> {
        match shared.directory.queues.contains_key(queue) {
            true => Ok(QueueRef {
                shared: shared.clone(),
                queue: queue.to_owned(),
            }),
            false => Err(Error::UnknownQueue(queue.to_owned())),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.queue
    }

    /// Sends `request` to the queue's actor now; the returned [`Enqueued`] answers with the
    /// workflow's id once its row is committed (or with why it was refused). Fails at once with
    /// [`Error::UnknownQueue`] when the queue was deleted, [`Error::Shutdown`] when the runtime
    /// stopped.
    pub fn enqueue(&self, request: EnqueueRequest) -> Result<Enqueued> {
        let actor = self
            .shared
            .directory
            .queues
            .get(&self.queue)
            .map(|q| q.clone())
            .ok_or_else(|| Error::UnknownQueue(self.queue.clone()))?;
        let (answer, answered) = oneshot::channel();
        actor
            .send_message(QueueRequest::Enqueue(request, answer))
            .map_err(|_| Error::Shutdown)?;
        Ok(Enqueued { answered })
    }
}

/// The answer to one [`QueueRef::enqueue`]: the workflow's id once its row is committed.
#[must_use = "an enqueue is sent at once; await this only to learn its id or why it failed"]
#[derive(Debug)]
pub struct Enqueued {
    answered: oneshot::Receiver<Result<String>>,
}

impl Future for Enqueued {
    type Output = Result<String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<String>> {
        Pin::new(&mut self.answered)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(Error::Shutdown)))
    }
}

//! The port of the database actor: the cloneable handle [`Db`] the engine, the durable calls and
//! the faces use, the requests it sends ([`Request`]), and the one place that retries a call after
//! a transient failure.
//!
//! Every lane request and every pool call goes through it. Not through it: the listener's LISTEN
//! connection (`Store::listen`, held by the listener actor), the executor's liveness lock (a
//! `Lease` on a connection of its own, taken by `launch`, which also writes the roster row on it,
//! and kept by the fleet actor, whose pings stamp `last_seen` there), `launch`'s SQLite file lock
//! and the store's final `close`, and `Client::migrate` (a store of its own, no actor).
//!
//! It never names the actor's type: it holds a `DerivedActorRef<Request>` that the supervisor swaps
//! when it restarts the actor.
//!
//! **Transient failures.** I/O errors and the classes `sysdb/classify.rs` names transient (SQLSTATE
//! 08*, 57P0*, 40001, 40P01, 53300; SQLite BUSY, LOCKED, ...) are `DbError::Transient`; the lane
//! drops its connection and answers the batch with it, and `Db` retries with backoff for
//! `db_retry_timeout` (30 s), then the workflow crashes and is restarted from its checkpoints. A
//! non-transient error in a batch is isolated by resending its rows one by one. Claims are one per
//! flush and never retried blindly: after a lost answer the queue actor takes back its `PENDING`
//! rows that no local actor runs.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use ractor::DerivedActorRef;
use tokio::sync::oneshot;

use crate::base::backoff::Backoff;
use crate::error::DbError;
use crate::sysdb::{
    ClaimOutcome, ClaimRequest, FinishOutcome, FinishWrite, LoadSteps, NewWorkflow, Op, OpOutcome,
    StartOutcome, StepOutcome, StepPage, StepRow, StepWrite, Store,
};

/// Counters the database actor keeps and a test or operator can read: how much work went
/// through how few statements.
#[derive(Debug, Default)]
pub(crate) struct DbStats {
    pub flushes: AtomicU64,
    pub batched_requests: AtomicU64,
    pub calls: AtomicU64,
    pub connections_opened: AtomicU64,
    /// Lane connections that failed to open since one last opened: the first failure of a
    /// streak is logged, and the recovery, not every retry.
    pub connect_failures: AtomicU64,
    /// Injected store faults (feature `test-hooks`): the same as the `Db` handle's.
    #[cfg(feature = "test-hooks")]
    pub faults: Arc<crate::engine::faults::StoreFaults>,
}

/// Where the actor answers a request.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, DbError>>;

/// A one-off call on the store's pool; it answers through the reply it captured.
pub(crate) type Call = Box<dyn FnOnce(Arc<dyn Store>) -> BoxFuture<'static, ()> + Send>;

/// What the database actor does for the core. A request of a lane is shared (`Arc`), so a
/// retry resends it without copying it.
pub(crate) enum Request {
    /// On the start lane: create a workflow row.
    Start(Arc<NewWorkflow>, Reply<StartOutcome>),
    /// On the checkpoint lane: record a step, if the workflow is still ours.
    Checkpoint(Arc<StepWrite>, Reply<StepOutcome>),
    /// On the finish lane: record a workflow's outcome, if it is still ours.
    Finish(Arc<FinishWrite>, Reply<FinishOutcome>),
    /// On the step-load lane: read a page of a workflow's recorded steps.
    LoadSteps(Arc<LoadSteps>, Reply<StepPage>),
    /// On the ops lane: a durable call whose effect commits with its record (send, receive,
    /// event, stream write).
    Op(Arc<Op>, Reply<OpOutcome>),
    /// On the claim lane: claim a queue's workflows (one claim after another, never batched).
    Claim(Arc<ClaimRequest>, Reply<ClaimOutcome>),
    /// A call on the pool, not on a lane (reads, management, recovery, migrations).
    Call(Call),
    /// Answers once everything received before it is written.
    Flush(oneshot::Sender<()>),
    /// Fault injection for tests: the actor panics, as if its state were poisoned.
    #[cfg(feature = "test-hooks")]
    Panic,
}

/// A cloneable handle on whichever database actor is current.
#[derive(Clone)]
pub(crate) struct Db {
    current: Arc<RwLock<Option<DerivedActorRef<Request>>>>,
    closed: Arc<AtomicBool>,
    retry: Backoff,
    give_up_after: Duration,
    /// Injected store faults (feature `test-hooks`), shared with the database actor's lanes.
    #[cfg(feature = "test-hooks")]
    faults: Arc<crate::engine::faults::StoreFaults>,
}

impl Db {
    /// A handle with no actor yet; calls wait (as for a restart) until one is set.
    pub(crate) fn new(give_up_after: Duration) -> Db {
        Db {
            current: Arc::new(RwLock::new(None)),
            closed: Arc::new(AtomicBool::new(false)),
            retry: Backoff::exponential(Duration::from_millis(5), Duration::from_secs(1)),
            give_up_after,
            #[cfg(feature = "test-hooks")]
            faults: Arc::default(),
        }
    }

    /// Points the handle at a (re)started actor, or at none while it restarts.
    pub(crate) fn set(&self, actor: Option<DerivedActorRef<Request>>) {
        if let Ok(mut current) = self.current.write() {
            *current = actor;
        }
    }

    /// Refuses every later call: the runtime is gone.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.set(None);
    }

    fn send(&self, request: Request) -> bool {
        let actor = self.current.read().ok().and_then(|a| a.clone());
        actor.is_some_and(|a| a.send_message(request).is_ok())
    }

    /// Sends a request built by `make`, retrying transient failures (including the actor being
    /// restarted) with backoff until `give_up_after` has passed.
    async fn request<T>(&self, make: impl Fn(Reply<T>) -> Request) -> Result<T, DbError> {
        let began = Instant::now();
        let mut retry = 0;
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(DbError::Closed);
            }
            let (tx, rx) = oneshot::channel();
            // A virtual clock (feature `testing`) never skips while a call is in flight.
            #[cfg(feature = "testing")]
            let _in_flight = crate::base::vclock::db_call();
            let result = if self.send(make(tx)) {
                rx.await.unwrap_or_else(|_| {
                    Err(DbError::Transient("the database actor stopped".into()))
                })
            } else {
                Err(DbError::Transient(
                    "the database actor is not running".into(),
                ))
            };
            match result {
                Err(e) if e.is_transient() && began.elapsed() < self.give_up_after => {
                    tracing::debug!(error = %e, retry, "retrying a system-database call");
                    tokio::time::sleep(self.retry.delay(retry)).await;
                    retry += 1;
                }
                other => return other,
            }
        }
    }

    pub(crate) async fn start(&self, w: NewWorkflow) -> Result<StartOutcome, DbError> {
        let w = Arc::new(w);
        self.request(|r| Request::Start(w.clone(), r)).await
    }

    pub(crate) async fn checkpoint(&self, s: StepWrite) -> Result<StepOutcome, DbError> {
        let s = Arc::new(s);
        self.request(|r| Request::Checkpoint(s.clone(), r)).await
    }

    pub(crate) async fn finish(&self, f: FinishWrite) -> Result<FinishOutcome, DbError> {
        let f = Arc::new(f);
        self.request(|r| Request::Finish(f.clone(), r)).await
    }

    pub(crate) async fn op(&self, op: Op) -> Result<OpOutcome, DbError> {
        let op = Arc::new(op);
        self.request(|r| Request::Op(op.clone(), r)).await
    }

    /// One page of a workflow's recorded steps.
    pub(crate) async fn load_page(&self, page: LoadSteps) -> Result<StepPage, DbError> {
        let load = Arc::new(page);
        self.request(|r| Request::LoadSteps(load.clone(), r)).await
    }

    /// A workflow's whole recorded history, read page by page (a replay-only verification
    /// holds it; a run's replay reads pages as it goes instead).
    pub(crate) async fn load_steps(&self, id: &str) -> Result<Vec<StepRow>, DbError> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .load_page(LoadSteps {
                    workflow_id: id.to_owned(),
                    after,
                    rows: 1000,
                    bytes: u64::MAX,
                    sized: false,
                })
                .await?;
            after = page.rows.last().map_or(after, |r| r.function_id);
            all.extend(page.rows);
            if !page.more {
                return Ok(all);
            }
        }
    }

    /// Claims enqueued workflows. Not retried here: a claim that may have committed must be
    /// answered by a take-back, not a second claim, so the queue actor decides.
    pub(crate) async fn claim(&self, c: ClaimRequest) -> Result<ClaimOutcome, DbError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(DbError::Closed);
        }
        let (tx, rx) = oneshot::channel();
        if !self.send(Request::Claim(Arc::new(c), tx)) {
            return Err(DbError::Transient(
                "the database actor is not running".into(),
            ));
        }
        rx.await
            .unwrap_or_else(|_| Err(DbError::Transient("the database actor stopped".into())))
    }

    /// Runs `f` on the store through the actor; `f` must be safe to run again after a
    /// transient failure.
    pub(crate) async fn call<T, F, Fut>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: Fn(Arc<dyn Store>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, DbError>> + Send + 'static,
    {
        self.request(|reply: Reply<T>| {
            let f = f.clone();
            #[cfg(feature = "test-hooks")]
            let faults = self.faults.clone();
            Request::Call(Box::new(move |store| {
                Box::pin(async move {
                    #[cfg(feature = "test-hooks")]
                    let result = faults.around(f(store)).await;
                    #[cfg(not(feature = "test-hooks"))]
                    let result = f(store).await;
                    let _ = reply.send(result);
                })
            }))
        })
        .await
    }

    /// The store faults this handle and the database actor's lanes inject.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn faults(&self) -> Arc<crate::engine::faults::StoreFaults> {
        self.faults.clone()
    }

    /// [`Db::call`] with `args` handed to each attempt, so callers need not clone their
    /// captures by hand inside the closure.
    pub(crate) async fn call_with<A, T, F, Fut>(&self, args: A, f: F) -> Result<T, DbError>
    where
        A: Clone + Send + Sync + 'static,
        T: Send + 'static,
        F: Fn(Arc<dyn Store>, A) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, DbError>> + Send + 'static,
    {
        self.call(move |store| f(store, args.clone())).await
    }

    /// Makes the current actor panic (fault injection for tests).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn inject_panic(&self) -> bool {
        self.send(Request::Panic)
    }

    /// Waits until everything sent so far is written (used by shutdown).
    pub(crate) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.send(Request::Flush(tx)) {
            let _ = rx.await;
        }
    }
}

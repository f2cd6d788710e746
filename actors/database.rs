//! The database actor: runs every request made of the system database through its port
//! (`engine::db`, `db::Request`). It owns the lanes' sessions (one connection per lane on Postgres,
//! a turn on the one writer on SQLite), which it opens, drops on failure and reopens, and
//! group-commits lane requests; pool calls (`Request::Call`) run on the store's pool beside the
//! lanes. Not every connection goes through it: the listener actor holds its own LISTEN connection
//! (`Store::listen`), the executor's liveness lock and roster row live on a connection of their own
//! (a `Lease`, taken by `launch`'s `hold` and kept by the fleet actor's pings), `launch` locks the
//! SQLite file and closes the store itself, and `Client::migrate` opens a store of its own.
//!
//! A lane (starts, checkpoints, finishes, step loads, ops, claims) keeps one [`Session`] and at
//! most one flush in flight. Requests that arrive meanwhile wait in the lane and go out together in
//! the next flush: one statement, one commit, however many rows. No timer delays a flush, so a lone
//! request goes out at once. A failed session is dropped and reopened on the next flush; the
//! callers of the failed batch get a transient error and retry.
//!
//! **Lanes, not one statement.** One combined statement for all kinds of request was measured and
//! dropped: a start queued behind a big checkpoint batch, and the bigger statement was slower (W1
//! 300 µs/step against 230). Holding finishes back so they share a commit with the next start
//! (within one statement or one transaction) halved the commits and bought no throughput
//! (`benches/README.md`, "The awaited producer"): an outcome that waits holds its slot and its
//! caller meanwhile. On Postgres, how a lane's statements are planned is
//! `sysdb/postgres/session.rs`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::base::metrics;
use crate::engine::db::{DbStats, Reply, Request};
use crate::error::DbError;
use crate::sysdb::{
    ClaimOutcome, ClaimRequest, FinishOutcome, FinishWrite, LoadSteps, NewWorkflow, Op, OpOutcome,
    Session, StartOutcome, StepOutcome, StepPage, StepWrite, Store,
};

/// Every lane's name, for the metric series registered at launch.
pub(crate) const LANE_NAMES: [&str; 6] = [
    NewWorkflow::NAME,
    StepWrite::NAME,
    FinishWrite::NAME,
    LoadSteps::NAME,
    Op::NAME,
    ClaimRequest::NAME,
];

/// A kind of request the actor batches: the lane's name (for metrics and logs), the most
/// requests one flush carries, how a batch runs on a [`Session`], and where its pending requests
/// wait in the actor's state.
trait Lane: Send + Sync + Sized + 'static {
    /// What each caller gets back.
    type Out: Send + 'static;
    const NAME: &'static str;
    const MAX_BATCH: usize = usize::MAX;

    /// Runs the batch; the result has one entry per request, in order.
    fn run(
        session: &mut dyn Session,
        batch: &[&Self],
    ) -> impl Future<Output = Result<Vec<Self::Out>, DbError>> + Send;

    /// The lane's queue in the actor's state.
    fn pending(lanes: &mut Lanes) -> &mut Pending<Self>;
}

impl Lane for NewWorkflow {
    type Out = StartOutcome;
    const NAME: &'static str = "start";

    async fn run(s: &mut dyn Session, batch: &[&Self]) -> Result<Vec<StartOutcome>, DbError> {
        s.start(batch).await
    }

    fn pending(lanes: &mut Lanes) -> &mut Pending<Self> {
        &mut lanes.start
    }
}

impl Lane for StepWrite {
    type Out = StepOutcome;
    const NAME: &'static str = "checkpoint";

    async fn run(s: &mut dyn Session, batch: &[&Self]) -> Result<Vec<StepOutcome>, DbError> {
        s.checkpoint(batch).await
    }

    fn pending(lanes: &mut Lanes) -> &mut Pending<Self> {
        &mut lanes.checkpoint
    }
}

impl Lane for FinishWrite {
    type Out = FinishOutcome;
    const NAME: &'static str = "finish";

    async fn run(s: &mut dyn Session, batch: &[&Self]) -> Result<Vec<FinishOutcome>, DbError> {
        s.finish(batch).await
    }

    fn pending(lanes: &mut Lanes) -> &mut Pending<Self> {
        &mut lanes.finish
    }
}

impl Lane for LoadSteps {
    type Out = StepPage;
    const NAME: &'static str = "load_steps";

    async fn run(s: &mut dyn Session, batch: &[&Self]) -> Result<Vec<StepPage>, DbError> {
        s.load_steps(batch).await
    }

    fn pending(lanes: &mut Lanes) -> &mut Pending<Self> {
        &mut lanes.load
    }
}

impl Lane for Op {
    type Out = OpOutcome;
    const NAME: &'static str = "ops";

    async fn run(s: &mut dyn Session, batch: &[&Self]) -> Result<Vec<OpOutcome>, DbError> {
        s.ops(batch).await
    }

    fn pending(lanes: &mut Lanes) -> &mut Pending<Self> {
        &mut lanes.ops
    }
}

impl Lane for ClaimRequest {
    type Out = ClaimOutcome;
    const NAME: &'static str = "claim";
    /// One claim per flush: a claim commits on its own, so a failure must not be retried as
    /// part of a batch (its neighbours' rows would be claimed twice).
    const MAX_BATCH: usize = 1;

    async fn run(s: &mut dyn Session, batch: &[&Self]) -> Result<Vec<ClaimOutcome>, DbError> {
        let mut outs = Vec::with_capacity(batch.len());
        for request in batch {
            outs.push(s.claim(request).await?);
        }
        Ok(outs)
    }

    fn pending(lanes: &mut Lanes) -> &mut Pending<Self> {
        &mut lanes.claim
    }
}

/// A lane's requests waiting for the next flush, and its session between flushes.
struct Pending<L: Lane> {
    requests: Vec<(Arc<L>, Reply<L::Out>)>,
    session: Option<Box<dyn Session>>,
    busy: bool,
}

impl<L: Lane> Default for Pending<L> {
    fn default() -> Self {
        Pending {
            requests: Vec::new(),
            session: None,
            busy: false,
        }
    }
}

impl<L: Lane> Pending<L> {
    fn idle(&self) -> bool {
        !self.busy && self.requests.is_empty()
    }
}

#[derive(Default)]
pub(crate) struct Lanes {
    start: Pending<NewWorkflow>,
    checkpoint: Pending<StepWrite>,
    finish: Pending<FinishWrite>,
    load: Pending<LoadSteps>,
    ops: Pending<Op>,
    claim: Pending<ClaimRequest>,
}

impl Lanes {
    fn idle(&self) -> bool {
        self.start.idle()
            && self.checkpoint.idle()
            && self.finish.idle()
            && self.load.idle()
            && self.ops.idle()
            && self.claim.idle()
    }
}

/// A lane's flush finished: `lane` puts the session back (when it is still healthy) into the
/// lane it came from, and starts the lane's next flush.
pub(crate) struct Flushed {
    lane: fn(&mut DatabaseState, Option<Box<dyn Session>>),
    session: Option<Box<dyn Session>>,
}

pub(crate) enum DatabaseMsg {
    Request(Request),
    Flushed(Flushed),
}

impl From<Request> for DatabaseMsg {
    fn from(r: Request) -> Self {
        DatabaseMsg::Request(r)
    }
}

impl TryFrom<DatabaseMsg> for Request {
    type Error = ();
    fn try_from(m: DatabaseMsg) -> Result<Self, ()> {
        match m {
            DatabaseMsg::Request(r) => Ok(r),
            DatabaseMsg::Flushed(..) => Err(()),
        }
    }
}

/// What a flush needs besides its lane. Dropping it (with the actor's state, also when the actor
/// is killed) aborts the flushes and calls still in flight.
struct Ctx {
    myself: ActorRef<DatabaseMsg>,
    store: Arc<dyn Store>,
    stats: Arc<DbStats>,
    tasks: JoinSet<()>,
}

pub(crate) struct DatabaseState {
    ctx: Ctx,
    lanes: Lanes,
    flush_waiters: Vec<oneshot::Sender<()>>,
}

pub(crate) struct Database;

impl Actor for Database {
    type Msg = DatabaseMsg;
    type State = DatabaseState;
    type Arguments = (Arc<dyn Store>, Arc<DbStats>);

    async fn pre_start(
        &self,
        myself: ActorRef<DatabaseMsg>,
        (store, stats): (Arc<dyn Store>, Arc<DbStats>),
    ) -> Result<DatabaseState, ActorProcessingErr> {
        Ok(DatabaseState {
            ctx: Ctx {
                myself,
                store,
                stats,
                tasks: JoinSet::new(),
            },
            lanes: Lanes::default(),
            flush_waiters: Vec::new(),
        })
    }

    async fn handle(
        &self,
        _: ActorRef<DatabaseMsg>,
        msg: DatabaseMsg,
        state: &mut DatabaseState,
    ) -> Result<(), ActorProcessingErr> {
        // A flush that panicked left its lane busy forever: poisoned state, so fail and let the
        // supervisor start a fresh actor (its callers retry against it).
        while let Some(done) = state.ctx.tasks.try_join_next() {
            if let Err(e) = done {
                if e.is_panic() {
                    return Err(format!("a database flush panicked: {e}").into());
                }
            }
        }
        match msg {
            DatabaseMsg::Request(request) => match request {
                Request::Start(w, reply) => enqueue(state, w, reply),
                Request::Checkpoint(w, reply) => enqueue(state, w, reply),
                Request::Finish(w, reply) => enqueue(state, w, reply),
                Request::LoadSteps(w, reply) => enqueue(state, w, reply),
                Request::Op(w, reply) => enqueue(state, w, reply),
                Request::Claim(w, reply) => enqueue(state, w, reply),
                Request::Call(call) => {
                    let ctx = &mut state.ctx;
                    ctx.stats.calls.fetch_add(1, Ordering::Relaxed);
                    ctx.tasks.spawn(call(ctx.store.clone()));
                }
                Request::Flush(done) => state.flush_waiters.push(done),
                #[cfg(feature = "test-hooks")]
                Request::Panic => panic!("injected fault: database actor"),
            },
            DatabaseMsg::Flushed(Flushed { lane, session }) => lane(state, session),
        }
        if state.lanes.idle() {
            for done in state.flush_waiters.drain(..) {
                let _ = done.send(());
            }
        }
        Ok(())
    }
}

fn enqueue<L: Lane>(state: &mut DatabaseState, item: Arc<L>, reply: Reply<L::Out>) {
    L::pending(&mut state.lanes).requests.push((item, reply));
    kick::<L>(state);
}

fn flushed<L: Lane>(state: &mut DatabaseState, session: Option<Box<dyn Session>>) {
    let pending = L::pending(&mut state.lanes);
    pending.busy = false;
    pending.session = session;
    kick::<L>(state);
}

/// Starts a flush of everything pending in lane `L`, unless one is already in flight.
fn kick<L: Lane>(state: &mut DatabaseState) {
    let pending = L::pending(&mut state.lanes);
    if pending.busy || pending.requests.is_empty() {
        return;
    }
    pending.busy = true;
    let batch = if pending.requests.len() <= L::MAX_BATCH {
        std::mem::take(&mut pending.requests)
    } else {
        pending.requests.drain(..L::MAX_BATCH).collect()
    };
    let session = pending.session.take();
    let ctx = &mut state.ctx;
    let (myself, store, stats) = (ctx.myself.clone(), ctx.store.clone(), ctx.stats.clone());
    ctx.tasks.spawn(async move {
        let session = flush(batch, session, &*store, &stats).await;
        let done = Flushed {
            lane: flushed::<L>,
            session,
        };
        let _ = myself.send_message(DatabaseMsg::Flushed(done));
    });
}

/// What a failed connect most likely means, when the error says: the server's connection slots
/// are all taken (53300) by this and other clients.
fn connect_hint(e: &DbError) -> &'static str {
    if e.to_string().contains("53300") {
        " (its max_connections are all in use: other clients hold them)"
    } else {
        ""
    }
}

/// Writes one batch and answers its callers; returns the session if it is still usable.
async fn flush<L: Lane>(
    batch: Vec<(Arc<L>, Reply<L::Out>)>,
    session: Option<Box<dyn Session>>,
    store: &dyn Store,
    stats: &DbStats,
) -> Option<Box<dyn Session>> {
    let (items, replies): (Vec<Arc<L>>, Vec<Reply<L::Out>>) = batch.into_iter().unzip();
    let mut session = match session {
        Some(session) => session,
        None => match store.open_session().await {
            Ok(session) => {
                stats.connections_opened.fetch_add(1, Ordering::Relaxed);
                let failed = stats.connect_failures.swap(0, Ordering::Relaxed);
                if failed > 0 {
                    tracing::info!(failed, "the system database takes connections again");
                }
                session
            }
            Err(e) => {
                metrics::db_failed(L::NAME, e.is_transient());
                if stats.connect_failures.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        lane = L::NAME,
                        error = %e,
                        "cannot open a connection to the system database{}; calls wait and \
                         retry with backoff",
                        connect_hint(&e)
                    );
                }
                answer_all(replies, &e);
                return None;
            }
        },
    };
    let refs: Vec<&L> = items.iter().map(|item| &**item).collect();
    let began = Instant::now();
    #[cfg(feature = "test-hooks")]
    let result = stats.faults.around(L::run(&mut *session, &refs)).await;
    #[cfg(not(feature = "test-hooks"))]
    let result = L::run(&mut *session, &refs).await;
    metrics::db_flushed(L::NAME, items.len(), began.elapsed());
    stats.flushes.fetch_add(1, Ordering::Relaxed);
    stats
        .batched_requests
        .fetch_add(items.len() as u64, Ordering::Relaxed);
    match result {
        Ok(outs) => {
            for (reply, out) in replies.into_iter().zip(outs) {
                let _ = reply.send(Ok(out));
            }
            Some(session)
        }
        Err(e) => {
            metrics::db_failed(L::NAME, e.is_transient());
            if e.is_transient() {
                tracing::warn!(lane = L::NAME, error = %e, "flush failed; reconnecting");
                answer_all(replies, &e);
                return None;
            }
            if items.len() == 1 {
                answer_all(replies, &e);
                return Some(session);
            }
            // One bad row must not fail its neighbours: write them one by one.
            isolate(&refs, replies, session).await
        }
    }
}

async fn isolate<L: Lane>(
    items: &[&L],
    replies: Vec<Reply<L::Out>>,
    mut session: Box<dyn Session>,
) -> Option<Box<dyn Session>> {
    let mut healthy = true;
    for (item, reply) in items.iter().zip(replies) {
        let result = if healthy {
            L::run(&mut *session, std::slice::from_ref(item))
                .await
                .and_then(|mut outs| {
                    outs.pop()
                        .ok_or_else(|| DbError::Query("no result for the request".into()))
                })
        } else {
            Err(DbError::Transient(
                "connection lost during the batch".into(),
            ))
        };
        healthy &= !matches!(&result, Err(e) if e.is_transient());
        let _ = reply.send(result);
    }
    healthy.then_some(session)
}

fn answer_all<T>(replies: Vec<Reply<T>>, e: &DbError) {
    for reply in replies {
        let _ = reply.send(Err(e.clone()));
    }
}

//! The database actor: the one owner of the system database's connections. Every call from the
//! runtime passes through it; writes are group-committed per lane.
//!
//! A lane (starts, checkpoints, finishes, step loads, ops, claims) keeps one dedicated connection
//! and at most one flush in flight. Requests that arrive meanwhile wait in the lane and go out together in
//! the next flush: one statement, one commit, however many rows. No timer delays a flush, so a
//! lone request goes out at once. A failed connection is dropped and reopened on the next flush;
//! the callers of the failed batch get a transient error and retry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::db::{DbRequest, Reply};
use crate::error::DbError;
use crate::metrics;
use crate::sysdb::{
    run_batch, BatchWrite, ClaimRequest, FinishWrite, LaneConn, LoadSteps, NewWorkflow, Op,
    StepWrite, SysDb,
};

/// Counters a test or operator can read: how much work went through how few statements.
#[derive(Debug, Default)]
pub(crate) struct DbStats {
    pub flushes: AtomicU64,
    pub batched_requests: AtomicU64,
    pub calls: AtomicU64,
    pub connections_opened: AtomicU64,
}

// ractor boxes every message on send, so a large variant costs no extra copies.
#[allow(clippy::large_enum_variant)]
pub(crate) enum DatabaseMsg {
    Request(DbRequest),
    /// A lane's flush finished; its connection comes back if it is still healthy.
    Flushed(Lane, Option<LaneConn>),
}

impl From<DbRequest> for DatabaseMsg {
    fn from(r: DbRequest) -> Self {
        DatabaseMsg::Request(r)
    }
}

impl TryFrom<DatabaseMsg> for DbRequest {
    type Error = ();
    fn try_from(m: DatabaseMsg) -> Result<Self, ()> {
        match m {
            DatabaseMsg::Request(r) => Ok(r),
            DatabaseMsg::Flushed(..) => Err(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    Start,
    Checkpoint,
    Finish,
    LoadSteps,
    Ops,
    Claim,
}

/// Requests of one kind waiting for the next flush.
struct Queue<W: BatchWrite> {
    pending: Vec<(W, Reply<W::Out>)>,
    conn: Option<LaneConn>,
    busy: bool,
}

impl<W: BatchWrite> Default for Queue<W> {
    fn default() -> Self {
        Queue {
            pending: Vec::new(),
            conn: None,
            busy: false,
        }
    }
}

/// What a flush needs besides its lane. Dropping it (with the actor's state, also when the actor
/// is killed) aborts the flushes and calls still in flight.
struct Ctx {
    myself: ActorRef<DatabaseMsg>,
    db: SysDb,
    stats: Arc<DbStats>,
    tasks: JoinSet<()>,
}

pub(crate) struct DatabaseState {
    ctx: Ctx,
    start: Queue<NewWorkflow>,
    checkpoint: Queue<StepWrite>,
    finish: Queue<FinishWrite>,
    load: Queue<LoadSteps>,
    ops: Queue<Op>,
    claim: Queue<ClaimRequest>,
    flush_waiters: Vec<oneshot::Sender<()>>,
}

impl DatabaseState {
    fn idle(&self) -> bool {
        fn idle<W: BatchWrite>(q: &Queue<W>) -> bool {
            !q.busy && q.pending.is_empty()
        }
        idle(&self.start)
            && idle(&self.checkpoint)
            && idle(&self.finish)
            && idle(&self.load)
            && idle(&self.ops)
            && idle(&self.claim)
    }
}

pub(crate) struct DatabaseActor;

impl Actor for DatabaseActor {
    type Msg = DatabaseMsg;
    type State = DatabaseState;
    type Arguments = (SysDb, Arc<DbStats>);

    async fn pre_start(
        &self,
        myself: ActorRef<DatabaseMsg>,
        (db, stats): (SysDb, Arc<DbStats>),
    ) -> Result<DatabaseState, ActorProcessingErr> {
        Ok(DatabaseState {
            ctx: Ctx {
                myself,
                db,
                stats,
                tasks: JoinSet::new(),
            },
            start: Queue::default(),
            checkpoint: Queue::default(),
            finish: Queue::default(),
            load: Queue::default(),
            ops: Queue::default(),
            claim: Queue::default(),
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
        let ctx = &mut state.ctx;
        match msg {
            DatabaseMsg::Request(request) => match request {
                DbRequest::Start(w, reply) => enqueue(&mut state.start, Lane::Start, w, reply, ctx),
                DbRequest::Checkpoint(w, reply) => {
                    enqueue(&mut state.checkpoint, Lane::Checkpoint, w, reply, ctx)
                }
                DbRequest::Finish(w, reply) => {
                    enqueue(&mut state.finish, Lane::Finish, w, reply, ctx)
                }
                DbRequest::LoadSteps(w, reply) => {
                    enqueue(&mut state.load, Lane::LoadSteps, w, reply, ctx)
                }
                DbRequest::Op(w, reply) => enqueue(&mut state.ops, Lane::Ops, w, reply, ctx),
                DbRequest::Claim(w, reply) => {
                    enqueue(&mut state.claim, Lane::Claim, *w, reply, ctx)
                }
                DbRequest::Call(call) => {
                    ctx.stats.calls.fetch_add(1, Ordering::Relaxed);
                    ctx.tasks.spawn(call(ctx.db.clone()));
                }
                DbRequest::Flush(done) => state.flush_waiters.push(done),
                DbRequest::Panic => panic!("injected fault: database actor"),
            },
            DatabaseMsg::Flushed(lane, conn) => match lane {
                Lane::Start => flushed(&mut state.start, lane, conn, ctx),
                Lane::Checkpoint => flushed(&mut state.checkpoint, lane, conn, ctx),
                Lane::Finish => flushed(&mut state.finish, lane, conn, ctx),
                Lane::LoadSteps => flushed(&mut state.load, lane, conn, ctx),
                Lane::Ops => flushed(&mut state.ops, lane, conn, ctx),
                Lane::Claim => flushed(&mut state.claim, lane, conn, ctx),
            },
        }
        if state.idle() {
            for done in state.flush_waiters.drain(..) {
                let _ = done.send(());
            }
        }
        Ok(())
    }
}

fn enqueue<W: BatchWrite>(
    queue: &mut Queue<W>,
    lane: Lane,
    item: W,
    reply: Reply<W::Out>,
    ctx: &mut Ctx,
) {
    queue.pending.push((item, reply));
    kick(queue, lane, ctx);
}

fn flushed<W: BatchWrite>(queue: &mut Queue<W>, lane: Lane, conn: Option<LaneConn>, ctx: &mut Ctx) {
    queue.busy = false;
    queue.conn = conn;
    kick(queue, lane, ctx);
}

/// Starts a flush of everything pending, unless one is already in flight.
fn kick<W: BatchWrite>(queue: &mut Queue<W>, lane: Lane, ctx: &mut Ctx) {
    if queue.busy || queue.pending.is_empty() {
        return;
    }
    queue.busy = true;
    let batch = if queue.pending.len() <= W::MAX_BATCH {
        std::mem::take(&mut queue.pending)
    } else {
        queue.pending.drain(..W::MAX_BATCH).collect()
    };
    let conn = queue.conn.take();
    let (myself, db, stats) = (ctx.myself.clone(), ctx.db.clone(), ctx.stats.clone());
    ctx.tasks.spawn(async move {
        let conn = flush(batch, conn, &db, &stats).await;
        let _ = myself.send_message(DatabaseMsg::Flushed(lane, conn));
    });
}

/// Writes one batch and answers its callers; returns the connection if it is still usable.
async fn flush<W: BatchWrite>(
    batch: Vec<(W, Reply<W::Out>)>,
    conn: Option<LaneConn>,
    db: &SysDb,
    stats: &DbStats,
) -> Option<LaneConn> {
    let (items, replies): (Vec<W>, Vec<Reply<W::Out>>) = batch.into_iter().unzip();
    let mut conn = match conn {
        Some(conn) => conn,
        None => match db.dedicated().await {
            Ok(conn) => {
                stats.connections_opened.fetch_add(1, Ordering::Relaxed);
                conn
            }
            Err(e) => {
                metrics::db_failed(W::LANE, e.is_transient());
                answer_all(replies, &e);
                return None;
            }
        },
    };
    let began = Instant::now();
    let result = run_batch(db, &mut conn, &items).await;
    metrics::db_flushed(W::LANE, items.len(), began.elapsed());
    stats.flushes.fetch_add(1, Ordering::Relaxed);
    stats
        .batched_requests
        .fetch_add(items.len() as u64, Ordering::Relaxed);
    match result {
        Ok(outs) => {
            for (reply, out) in replies.into_iter().zip(outs) {
                let _ = reply.send(Ok(out));
            }
            Some(conn)
        }
        Err(e) => {
            metrics::db_failed(W::LANE, e.is_transient());
            if e.is_transient() {
                tracing::warn!(lane = W::LANE, error = %e, "flush failed; reconnecting");
                answer_all(replies, &e);
                return None;
            }
            if items.len() == 1 {
                answer_all(replies, &e);
                return Some(conn);
            }
            // One bad row must not fail its neighbours: write them one by one.
            isolate(items, replies, conn, db).await
        }
    }
}

async fn isolate<W: BatchWrite>(
    items: Vec<W>,
    replies: Vec<Reply<W::Out>>,
    mut conn: LaneConn,
    db: &SysDb,
) -> Option<LaneConn> {
    let mut healthy = true;
    for (item, reply) in items.into_iter().zip(replies) {
        let result = if healthy {
            run_batch(db, &mut conn, std::slice::from_ref(&item))
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
    healthy.then_some(conn)
}

fn answer_all<T>(replies: Vec<Reply<T>>, e: &DbError) {
    for reply in replies {
        let _ = reply.send(Err(e.clone()));
    }
}

//! The storage interface: what the rest of the crate may ask of a system database, and nothing
//! about how. [`Store`] is every call the core and the clients make on the pool (reads,
//! management, definitions, recovery), grouped by concept in the supertraits its neighbours
//! declare; [`Session`] is a lane's own connection, on which the database actor runs its
//! batched requests and its claims.
//!
//! `postgres::Postgres` and `sqlite::Sqlite` implement both; an operation missing from either
//! does not compile. Every method is tested once for both in `suite/`.
//!
//! **Why this shape.** `Store` and `Session` are object-safe (`Arc<dyn Store>`, `Box<dyn Session>`)
//! through the `async-trait` crate: one boxed future per call, nothing next to a round trip.
//! `Store` is a union of per-concept supertraits so each backend file implements its concept
//! directly (no forwarding layer), and a caller needs no import to call any of them on `dyn Store`.
//! Row shapes both backends return are decoded once (`rows.rs`); SQL text is each backend's own,
//! even where the two read alike. The shared suite found three places where the backends answered
//! differently, now one behaviour: a claim's `depth` on Postgres counted its statement's snapshot
//! (the rows before the claim); SQLite claimed rows promoted in the same claim; a Postgres batch
//! repeating one workflow id answered `Created` twice.
//!
//! **Adding a storage operation** touches four places: its method (and any new type) in the neutral
//! concept module (`sysdb/<concept>.rs`); its SQL and body in `postgres/<concept>.rs` (the template
//! spliced by `Sql::get` on first use) and in `sqlite/<concept>.rs`; one test in `suite/` (it runs
//! on both). Callers use it as `store.<method>(..)` inside `shared.db.call(..)`; a hot-path batch
//! is a `Session` method and a `Lane` of the database actor instead.

use async_trait::async_trait;

use super::batch::Batches;
use super::cancel::Cancels;
use super::claim::{ClaimOutcome, ClaimRequest};
use super::continuations::Continuations;
use super::debounce::Debounce;
use super::dispatch::Dispatch;
use super::finish::{FinishOutcome, FinishWrite};
use super::fleet::Fleet;
use super::listen::Listen;
use super::manage::Manage;
use super::migrate::Schema;
use super::observe::Observe;
use super::ops::{Messages, Op, OpOutcome};
use super::pauses::Pauses;
use super::queues::Queues;
use super::reads::Reads;
use super::retention::Collect;
use super::rewind::Rewinds;
use super::schedules::Schedules;
use super::start::{NewWorkflow, StartOutcome};
use super::steps::{LoadSteps, StepOutcome, StepPage, StepWrite};
use super::versions::Versions;
use crate::error::{DbError, Error};

/// A connected system database, shared as `Arc<dyn Store>`.
///
/// Its calls run on a small pool and may be retried by the caller after a transient failure:
/// each is idempotent or reports what it found. The hot path (starts, checkpoints, finishes,
/// step loads, ops, claims) goes through a [`Session`] instead.
#[async_trait]
pub(crate) trait Store:
    Reads
    + Messages
    + Cancels
    + Dispatch
    + Manage
    + Batches
    + Rewinds
    + Versions
    + Schema
    + Queues
    + Pauses
    + Schedules
    + Debounce
    + Continuations
    + Collect
    + Observe
    + Listen
    + Fleet
    + Send
    + Sync
{
    /// Opens a connection for one lane of the database actor, kept across its flushes.
    async fn open_session(&self) -> Result<Box<dyn Session>, DbError>;

    /// Closes every connection; later calls fail.
    async fn close(&self);

    /// Marks the pools closed at once, without waiting for connections to close (for `Drop`).
    fn close_now(&self);

    /// An executor's claim on an embedded database, which serves one process; a no-op on
    /// Postgres, which serves a fleet.
    fn lock_for_executor(&self) -> Result<(), Error>;

    /// True for an embedded (SQLite) database, which only this process uses and which
    /// announces nothing (no LISTEN/NOTIFY): its writers wake local waiters themselves.
    fn is_embedded(&self) -> bool;

    /// Whether it can hear other processes' announcements (`LISTEN`): not an embedded
    /// database, nor a server behind a transaction pooler, where a session lasts only a
    /// transaction. Without it, waits and queues poll.
    fn can_listen(&self) -> bool {
        !self.is_embedded()
    }
}

/// One lane's connection. Each call carries a whole batch (except [`Session::claim`]) and
/// answers with one outcome per request, in order; it is one statement and one commit on
/// Postgres (the point of the lanes), one write transaction on SQLite.
///
/// Every call is idempotent: after a connection loss the actor may send the same batch again,
/// and a row that already committed is recognised, not written twice.
#[async_trait]
pub(crate) trait Session: Send {
    /// Creates workflow rows (direct starts owned at once, or enqueues).
    async fn start(&mut self, batch: &[&NewWorkflow]) -> Result<Vec<StartOutcome>, DbError>;

    /// Records steps, each only while its workflow is `PENDING` under the writer's owner.
    async fn checkpoint(&mut self, batch: &[&StepWrite]) -> Result<Vec<StepOutcome>, DbError>;

    /// Records outcomes, each only while its workflow is `PENDING` under the writer's owner.
    async fn finish(&mut self, batch: &[&FinishWrite]) -> Result<Vec<FinishOutcome>, DbError>;

    /// Reads one page of recorded steps per request, in call order (a batched read).
    async fn load_steps(&mut self, pages: &[&LoadSteps]) -> Result<Vec<StepPage>, DbError>;

    /// Runs durable calls whose effect commits with their record (send, receive, event,
    /// stream write), one after another.
    async fn ops(&mut self, batch: &[&Op]) -> Result<Vec<OpOutcome>, DbError>;

    /// Claims a queue's workflows by the rules in [`super::claim`]. Never batched: a claim
    /// commits on its own, and one whose answer was lost is answered by a take-back
    /// ([`Dispatch::redispatch`]), not a second claim.
    async fn claim(&mut self, request: &ClaimRequest) -> Result<ClaimOutcome, DbError>;
}

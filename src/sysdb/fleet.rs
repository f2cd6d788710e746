//! The fleet: stead's roster of executors (`stead_executors`, a table of stead's own, never one
//! of DBOS's), each executor's liveness lock, adoption of a dead executor's `PENDING`
//! workflows, and the work no live executor can run (stranded).
//!
//! Liveness is a session-level advisory lock in the two-int4 keyspace, keyed by schema and
//! executor id, held on a connection of its own (a [`Lease`]): an executor is live exactly
//! while that session lives. DBOS 3.4 takes only bigint-keyed advisory locks, which never
//! conflict with two-int4 ones. Adoption and moving stranded work run under the dead
//! executor's lock taken for one transaction, so exactly one process acts for it and never
//! while it (or a relaunch under its id) lives; and only once it has been *quiet*: its roster
//! `last_seen` older than its own lease plus a margin ([`QUIET_MARGIN`]), so a live executor
//! whose lock connection dropped (a Postgres restart) is not taken for dead before its lease
//! has run out and it has fenced itself.
//!
//! **The lock.** `pg_try_advisory_lock(k1, k2)` with `(k1, k2)` the halves of
//! FNV-1a("stead-executor\0" schema "\0" id). DBOS 3.4 takes only bigint-keyed advisory locks
//! (`pg_advisory_xact_lock(:key)` in `_datasource_migration.py`, `pg_try_advisory_lock(:lock_id)` /
//! `pg_try_advisory_xact_lock(:key)` in `_sys_db_postgres.py`), and stead's own claim lock is
//! bigint too: the spaces never meet. A launch takes the lock before it writes anything (retrying
//! for 1 s, for a predecessor's session the server has not ended yet); a held lock is
//! `Error::ExecutorInUse` naming the id. Liveness is read from `pg_locks` (`stead executor list`),
//! never by try-locking, so a listing cannot make a relaunch fail.
//!
//! **The roster** is `stead_executors` (created by `migrations/postgres/stead_executors.sql` on
//! every migration, left out of the DBOS schema comparison): id, host, pid, application, version,
//! lock keys, lease, started, `last_seen` (epoch ms on the database server's clock). stead only
//! ever adopts from executors in it, so a DBOS Python/Go/TypeScript executor's `PENDING` work is
//! never taken (tested with a live DBOS 3.4 app). It also lets a client name live executors'
//! versions (stranded work).
//!
//! **Plans.** A fleet round (adoptable, stranded, live count) starts from the dead executors and
//! reads no workflow row while none is dead (2 ms at 1,000,000 running; reading every `PENDING` row
//! cost 0.5–1.0 s a round); plan test `a_fleet_round_with_no_dead_executor_reads_no_workflow_row`.

use async_trait::async_trait;
use serde::Serialize;

use super::dispatch::Executor;
use crate::error::DbError;

/// What an executor writes about itself in the roster.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub executor_id: String,
    pub host: String,
    pub pid: i64,
    pub app_name: Option<String>,
    pub app_version: String,
    /// How long (ms) a successful ping lets it start steps.
    pub lease_ms: i64,
}

/// Added to an executor's lease before its silence makes it quiet: a tenth of the lease and
/// half a second, for the two clocks' rates and the ping's own time.
pub(crate) const QUIET_MARGIN: &str = "e.lease_ms / 10 + 500";

/// A stead executor in the roster, whether it is live, and how many workflows it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutorInfo {
    /// Its executor id (unique among live executors).
    pub executor_id: String,
    /// The host it ran on, as it reported it.
    pub host: String,
    /// Its process id on that host.
    pub pid: i64,
    /// Its application name, if it has one.
    pub app_name: Option<String>,
    /// The application version it serves.
    pub app_version: String,
    /// When it (last) launched, epoch ms.
    pub started_at_ms: i64,
    /// When it last proved it was alive, epoch ms (the database server's clock).
    pub last_seen_ms: i64,
    /// True while its liveness lock is held.
    pub live: bool,
    /// Its `PENDING` workflows.
    pub pending: i64,
}

/// A dead executor's work this executor may take: what it must be able to run.
#[derive(Debug, Clone)]
pub(crate) struct Adoption<'a> {
    pub me: Executor<'a>,
    pub dead: &'a str,
    /// The workflow names this executor registered.
    pub names: &'a [String],
}

/// What an adoption moved: how many workflows, and the queues they went back to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Adopted {
    pub workflows: u64,
    pub queues: Vec<String>,
}

/// An executor's hold on its liveness lock, on a connection of its own. Dropping it ends the
/// session, which releases the lock.
#[async_trait]
pub(crate) trait Lease: Send {
    /// Writes (or rewrites) this executor's roster row.
    async fn register(&mut self, me: &Member) -> Result<(), DbError>;

    /// Proves the session (and so the lock) is still there, stamping `last_seen`.
    async fn ping(&mut self, executor_id: &str) -> Result<(), DbError>;

    /// False for a hold that lasts as long as the process (an embedded database's file lock):
    /// nothing pings it, so it must not bound when runs may start steps.
    fn expires(&self) -> bool {
        true
    }
}

#[async_trait]
pub(crate) trait Fleet: Send + Sync {
    /// Takes `executor_id`'s liveness lock on a new connection whose session the server ends
    /// within about `timeout_ms` of the process freezing or losing the network; `None` when
    /// another session holds it (the id is live elsewhere). Touches no table.
    async fn hold(
        &self,
        executor_id: &str,
        timeout_ms: u64,
    ) -> Result<Option<Box<dyn Lease>>, DbError>;

    /// The roster (of application `app`, every application when `None`), live ones first.
    async fn list_executors(&self, app: Option<&str>) -> Result<Vec<ExecutorInfo>, DbError>;

    /// How many roster executors (of application `app`, every one when `None`) are live;
    /// unlike [`Fleet::list_executors`] it counts no workflow, so a fleet round can afford it.
    async fn live_executors(&self, app: Option<&str>) -> Result<u64, DbError>;

    /// Dead, quiet roster executors owning `PENDING` workflows of `me`'s
    /// application and version: the candidates for adoption.
    async fn adoptable(&self, me: &Executor<'_>) -> Result<Vec<String>, DbError>;

    /// Under the dead executor's lock for one transaction: puts its `PENDING` workflows that
    /// `me` can run (its version and application, a registered name) back on their queue (the
    /// internal one when they had none), `ENQUEUED` with no owner, as recovery does (the claim
    /// counts the attempt), and announces the queues. `None` when its lock is held (it lives,
    /// or another executor is adopting it) or it is not quiet.
    async fn adopt(&self, a: &Adoption<'_>) -> Result<Option<Adopted>, DbError>;

    /// Ids of `PENDING` workflows of dead, quiet roster executors of
    /// application `app` that no live roster executor of it can run (no live one serves their
    /// version), oldest first.
    async fn stranded(&self, app: Option<&str>) -> Result<Vec<String>, DbError>;

    /// Moves the stranded workflows `ids` onto `version` (resumed from their checkpoints on
    /// their queue, or the internal one), each under its dead executor's lock; returns how many
    /// moved. A workflow that is no longer stranded is left alone.
    async fn move_stranded(&self, ids: &[String], version: &str) -> Result<u64, DbError>;
}

/// The two int4 keys of `executor_id`'s lock in `schema`: FNV-1a of a domain, the schema and
/// the id, split in halves.
pub(crate) fn lock_key(schema: &str, executor_id: &str) -> (i32, i32) {
    let bytes = b"stead-executor\0"
        .iter()
        .copied()
        .chain(schema.bytes())
        .chain([0])
        .chain(executor_id.bytes());
    let h = crate::base::hash::fnv1a(bytes);
    ((h >> 32) as u32 as i32, h as u32 as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_depend_on_schema_and_id() {
        assert_eq!(lock_key("dbos", "a"), lock_key("dbos", "a"));
        assert_ne!(lock_key("dbos", "a"), lock_key("dbos", "b"));
        assert_ne!(lock_key("dbos", "a"), lock_key("other", "a"));
        // The separator keeps ("ab", "c") apart from ("a", "bc").
        assert_ne!(lock_key("ab", "c"), lock_key("a", "bc"));
    }
}

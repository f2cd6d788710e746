//! A fleet of executors on one Postgres: each executor's identity and its lease (how long it may
//! start durable calls after it last proved it was alive).
//!
//! The lock, the roster and adoption are storage (`sysdb::fleet`); the actor that pings,
//! fences and adopts is `actors/fleet.rs`; what operators ask of the fleet is on the client
//! (`client/fleet.rs`). This module never touches the database itself.
//!
//! **Identity.** The default executor id is `<hostname>-<pid>-<6 random hex>`, unique per launch;
//! `DBOS__VMID` or `.executor_id` override it; an empty id or version is refused
//! (`InvalidArgument`). A fixed id lets a relaunch recover its own work at once; work of any other
//! id is adopted once it is dead.
//!
//! **When a process is dead.** An executor is *dead* when no session holds its liveness lock, and
//! *quiet* when its roster `last_seen` is older than its lease plus a tenth plus 0.5 s (by the
//! server's clock); adoption needs both. The lock is released only when its session ends: a crash
//! or `kill -9` (the server ends the session at once), or the server's own timeouts on that
//! session, set to twice the lease (`idle_session_timeout` for a frozen process that stopped
//! pinging, `tcp_user_timeout` and keepalives for a lost network).
//!
//! **A live process is never adopted.** It pings every fifth of its lease; each ping that answers
//! renews its lease to *send time + lease* (a monotonic clock) and stamps `last_seen`. Every
//! durable call first checks the lease and the run's epoch (`Context::check_live`); when the lease
//! has run out the process *fences*: it stops every run without writing (the row stays `PENDING`
//! and owned) and starts a new epoch, so no run begun before starts another durable call even if
//! the lease comes back. A peer can adopt only once the executor is quiet, i.e. after its lease ran
//! out, so by then its gate is shut. A long GC pause or `SIGSTOP`: the gate is checked on the
//! monotonic clock when the process runs again, so it starts nothing; its in-flight step bodies may
//! finish, and their checkpoints are refused by the owner token once an adopter's claim took the
//! row. A lost lock connection that comes back (a Postgres restart, `pg_terminate_backend`): the
//! process takes its lock again on a new connection; if before its lease ran out, no peer could
//! have found it quiet, so it continues untouched; if after, it fenced, and once the lock is back
//! it recovers its own `PENDING` workflows (anything adopted meanwhile is not its own any more).
//!
//! Tested two ways in the adoption tests (`tests/integration/adoption.rs`, ignored, run by
//! `.ci/run`): a process frozen for 20 s (`SIGSTOP`) starts no step after it thaws; a process cut
//! off its database for 20 s while a survivor runs (its connections go through a proxy that drops
//! them all and blackholes new ones) starts no step body after its lease ran out, is adopted only
//! after the lease, takes its lock back when the network returns and runs nothing more. In both,
//! every workflow finishes `SUCCESS` once and only step bodies in flight at the cut ran twice, as
//! after a kill. The fence and the owner token each suffice (`sysdb::steps`). Limits: a forward
//! step of the database server's wall clock shortens the quiet margin; a suspended VM's monotonic
//! clock stops (Linux `CLOCK_MONOTONIC`), so it fences by the server's timeouts only.
//!
//! **Behind a pooler (not built).** A transaction-pooling PgBouncer hands sessions around, so
//! neither a session-level lock nor `pg_locks`' view of it means anything there: the lease
//! connection must bypass the pooler (a direct connection, or a session-pooled one with
//! `server_lifetime`/`server_idle_timeout` above the lease), and the session settings
//! (`idle_session_timeout`, `tcp_user_timeout`) must reach the server. The rest of stead's traffic
//! can go through the pooler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How an executor proves it is alive and how often it looks for dead peers' work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FleetSettings {
    /// How long a successful ping lets this executor start steps.
    pub lease: Duration,
    /// How often it looks for dead executors to adopt.
    pub adopt_every: Duration,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            lease: Duration::from_secs(5),
            adopt_every: Duration::from_secs(2),
        }
    }
}

impl FleetSettings {
    /// Pings come five times per lease, so one slow ping never fences.
    pub(crate) fn ping_every(&self) -> Duration {
        self.lease / 5
    }

    /// A ping (or taking the lock again) slower than this counts as failed.
    pub(crate) fn ping_timeout(&self) -> Duration {
        self.lease / 2
    }

    /// The server ends the lease's session this long after the process froze or lost the
    /// network: twice the lease, so the executor has fenced itself well before.
    pub(crate) fn server_timeout_ms(&self) -> u64 {
        (self.lease * 2).as_millis() as u64
    }
}

/// Whether this process may start steps: until its lease runs out, and only runs begun in the
/// current epoch (a fence starts a new one, so an older run never starts another step).
#[derive(Debug)]
pub(crate) struct Liveness {
    base: Instant,
    /// Ms since `base` until which steps may start.
    until: AtomicU64,
    epoch: AtomicU64,
}

impl Liveness {
    /// A process with no lease to keep (a client, an embedded database): always admits.
    pub(crate) fn unbounded() -> Liveness {
        Liveness {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
            epoch: AtomicU64::new(0),
        }
    }

    /// A lease that runs out `lease` after `proved` (when the lock was proved held).
    #[cfg(test)]
    pub(crate) fn leased(proved: Instant, lease: Duration) -> Liveness {
        let live = Liveness::unbounded();
        live.renew(proved, lease);
        live
    }

    fn millis(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_millis() as u64
    }

    /// The epoch a run starting now belongs to.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// True when a run of `epoch` may start a durable call now.
    pub(crate) fn admits(&self, epoch: u64) -> bool {
        epoch == self.epoch() && self.millis(Instant::now()) < self.until.load(Ordering::Acquire)
    }

    /// True once the lease has run out.
    pub(crate) fn expired(&self) -> bool {
        self.millis(Instant::now()) >= self.until.load(Ordering::Acquire)
    }

    /// Extends the lease to `lease` after `proved`, the moment the proof (a ping) was sent.
    pub(crate) fn renew(&self, proved: Instant, lease: Duration) {
        let until = self.millis(proved).saturating_add(lease.as_millis() as u64);
        self.until.store(until, Ordering::Release);
    }

    /// Ends the lease and the epoch: no run begun so far starts another durable call.
    pub(crate) fn fence(&self) {
        self.until.store(0, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

/// The default executor id: `<hostname>-<pid>-<6 random hex digits>`, unique per launch.
pub(crate) fn default_executor_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{}-{}-{}", host_name(), std::process::id(), &random[..6])
}

/// This host's name as the kernel reports it (`HOSTNAME` first), else `host`.
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_admits_until_it_runs_out_and_a_fence_ends_the_epoch() {
        let live = Liveness::leased(Instant::now(), Duration::from_secs(60));
        let epoch = live.epoch();
        assert!(live.admits(epoch));
        live.fence();
        assert!(!live.admits(epoch), "fenced");
        live.renew(Instant::now(), Duration::from_secs(60));
        assert!(!live.admits(epoch), "a run of an older epoch stays fenced");
        assert!(live.admits(live.epoch()));
        let short = Liveness::leased(Instant::now(), Duration::ZERO);
        assert!(short.expired() && !short.admits(short.epoch()));
    }

    #[test]
    fn default_ids_are_unique_and_name_the_host_and_process() {
        let (a, b) = (default_executor_id(), default_executor_id());
        assert_ne!(a, b);
        assert!(a.contains(&format!("-{}-", std::process::id())));
        assert_eq!(a.rsplit('-').next().map(str::len), Some(6));
    }
}

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
//! durable call begins at the gate (`Context::begin` waits on [`Liveness::admitted`]), and so does
//! every step or transaction attempt: once the lease has run out the process is *suspended*: no
//! run starts another durable call or attempt until the lease is back. A peer can adopt only once
//! the executor is quiet, i.e. after its lease ran out, so by then its gate is shut. A long GC
//! pause or `SIGSTOP`: the gate reads the monotonic clock when the process runs again, so it
//! starts nothing; in-flight step bodies may finish, and their records are refused by the owner
//! token once an adopter's claim took the row.
//!
//! **Coming back.** A lost lock connection that comes back (a Postgres restart,
//! `pg_terminate_backend`, a network cut) is taken again on a new connection. Before the lease
//! ran out, no peer could have found the process quiet, so nothing changed. After it, the process
//! first reads which of the runs it holds (resident and evicted) are still `PENDING` under their
//! owner tokens: holding the lock again, nobody can adopt them from now on, so those go on
//! (their held step records are written, nothing runs twice); runs whose row moved (adopted,
//! cancelled) are stopped without writing. Only then is the lease renewed and the gate opened,
//! and each queue actor takes back this executor's `PENDING` rows that no run of its own holds
//! (runs that crashed while the database was away). A peer adopts only once it has itself held its
//! lease without a gap for longer than the quiet margin ([`Liveness::live_for`]): after a database
//! outage every executor looks quiet at once, and each gets that long to take its lock back. A 5 s
//! Postgres restart thus re-runs no step body, with or without peers; before, every run was
//! stopped at the lease's end and recovered, so each in-flight workflow ran its last unrecorded
//! step again.
//!
//! Tested in the adoption tests (`tests/integration/adoption/fencing.rs`, ignored, run by `.ci/run`): a
//! process frozen for 20 s (`SIGSTOP`) starts no step after it thaws; a process cut off its
//! database for 20 s while a survivor runs (its connections go through a proxy that drops them
//! all and blackholes new ones) starts no step body after its lease ran out, is adopted only after
//! the lease, takes its lock back when the network returns and runs nothing more. In both, every
//! workflow finishes `SUCCESS` once and only step bodies in flight at the cut ran twice, as after a
//! kill. The gate and the owner token each suffice (`sysdb::steps`). Limits: a forward step of the
//! database server's wall clock shortens the quiet margin; a suspended VM's monotonic clock stops
//! (Linux `CLOCK_MONOTONIC`), so it is suspended by the server's timeouts only.
//!
//! **Behind a pooler (not built).** A transaction-pooling PgBouncer hands sessions around, so
//! neither a session-level lock nor `pg_locks`' view of it means anything there: the lease
//! connection must bypass the pooler (a direct connection, or a session-pooled one with
//! `server_lifetime`/`server_idle_timeout` above the lease), and the session settings
//! (`idle_session_timeout`, `tcp_user_timeout`) must reach the server. The rest of stead's traffic
//! can go through the pooler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

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

    /// How long a peer's `last_seen` must be stale before it counts as quiet (the lease plus a
    /// tenth plus 0.5 s, as `sysdb::fleet::QUIET_MARGIN` reads it on the server).
    pub(crate) fn quiet_after(&self) -> Duration {
        self.lease + self.lease / 10 + Duration::from_millis(500)
    }

    /// The server ends the lease's session this long after the process froze or lost the
    /// network: twice the lease, so the executor has fenced itself well before.
    pub(crate) fn server_timeout_ms(&self) -> u64 {
        (self.lease * 2).as_millis() as u64
    }
}

/// Whether this process may start durable calls: until its lease runs out. Waiters are woken
/// when it is renewed.
#[derive(Debug)]
pub(crate) struct Liveness {
    base: Instant,
    /// Ms since `base` until which durable calls may start.
    until: AtomicU64,
    /// Ms since `base` of the renewal that ended the last gap in the lease.
    since: AtomicU64,
    renewed: Notify,
}

impl Liveness {
    /// A process with no lease to keep (a client, an embedded database): always admits.
    pub(crate) fn unbounded() -> Liveness {
        Liveness {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
            since: AtomicU64::new(0),
            renewed: Notify::new(),
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

    /// True while a durable call may start now.
    pub(crate) fn admits(&self) -> bool {
        self.millis(Instant::now()) < self.until.load(Ordering::Acquire)
    }

    /// True once the lease has run out.
    pub(crate) fn expired(&self) -> bool {
        !self.admits()
    }

    /// Resolves once a durable call may start (at once while the lease holds).
    pub(crate) async fn admitted(&self) {
        loop {
            let renewed = self.renewed.notified();
            tokio::pin!(renewed);
            renewed.as_mut().enable();
            if self.admits() {
                return;
            }
            renewed.await;
        }
    }

    /// Extends the lease to `lease` after `proved`, the moment the proof (a ping) was sent.
    pub(crate) fn renew(&self, proved: Instant, lease: Duration) {
        if self.expired() {
            self.since.store(self.millis(proved), Ordering::Release);
        }
        let until = self.millis(proved).saturating_add(lease.as_millis() as u64);
        self.until.store(until, Ordering::Release);
        self.renewed.notify_waiters();
    }

    /// How long the lease has held without a gap (zero while it has run out). After a database
    /// outage every executor's `last_seen` is stale at once: a peer adopts only once it has
    /// itself been live longer than the quiet margin, which gives each executor that long to
    /// take its lock back.
    pub(crate) fn live_for(&self) -> Duration {
        if self.expired() {
            return Duration::ZERO;
        }
        let since = self.since.load(Ordering::Acquire);
        Duration::from_millis(self.millis(Instant::now()).saturating_sub(since))
    }

    /// Which gap in the lease ended last (changes with each renewal that ends one): a run that
    /// saw another value may have had its row moved meanwhile.
    pub(crate) fn gap_mark(&self) -> u64 {
        self.since.load(Ordering::Acquire)
    }

    /// Ends the lease now: no durable call starts until it is renewed.
    pub(crate) fn suspend(&self) {
        self.until.store(0, Ordering::Release);
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
    fn a_lease_admits_until_it_runs_out_or_is_suspended() {
        let live = Liveness::leased(Instant::now(), Duration::from_secs(60));
        assert!(live.admits());
        live.suspend();
        assert!(!live.admits() && live.expired(), "suspended");
        live.renew(Instant::now(), Duration::from_secs(60));
        assert!(live.admits(), "renewed");
        let short = Liveness::leased(Instant::now(), Duration::ZERO);
        assert!(short.expired() && !short.admits());
    }

    #[test]
    fn live_for_counts_from_the_renewal_that_ended_the_last_gap() {
        let live = Liveness::leased(Instant::now(), Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(30));
        assert!(live.live_for() >= Duration::from_millis(30));
        live.renew(Instant::now(), Duration::from_secs(60));
        assert!(
            live.live_for() >= Duration::from_millis(30),
            "no gap: still counting"
        );
        live.suspend();
        assert_eq!(live.live_for(), Duration::ZERO);
        live.renew(Instant::now(), Duration::from_secs(60));
        assert!(
            live.live_for() < Duration::from_millis(30),
            "counts again from the renewal"
        );
    }

    #[tokio::test]
    async fn a_call_waits_at_the_gate_until_the_lease_is_renewed() {
        let live = std::sync::Arc::new(Liveness::leased(Instant::now(), Duration::ZERO));
        let waiter = tokio::spawn({
            let live = live.clone();
            async move { live.admitted().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "no lease: the call waits");
        live.renew(Instant::now(), Duration::from_secs(60));
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("renewing the lease opens the gate")
            .unwrap();
    }

    #[test]
    fn default_ids_are_unique_and_name_the_host_and_process() {
        let (a, b) = (default_executor_id(), default_executor_id());
        assert_ne!(a, b);
        assert!(a.contains(&format!("-{}-", std::process::id())));
        assert_eq!(a.rsplit('-').next().map(str::len), Some(6));
    }
}

//! Virtual time (feature `testing`): a clock a test moves by hand or skips ahead when its
//! runtime is idle, installed per tokio runtime so tests running in parallel in one process
//! each keep their own. `clock::now_ms` and the waits that stand for workflow time
//! (`clock::sleep_until_ms`, `clock::sleep`, `clock::nap`) read it when the current tokio
//! runtime has one; everything else (polls, sweeps, pool timeouts) stays on real time.
//!
//! **Idle**: no database call is in flight (the port counts them, `db_call`), and nothing
//! counted as activity (a call starting or ending, a timer set or fired) happened for one settle
//! window of real time. sqlx's SQLite worker is a thread of its own, so tokio's own paused clock
//! would see a runtime waiting on a query as idle and skip past it; this clock never does.
//!
//! It owns the virtual time and its pending timers; it must never be consulted when no clock is
//! installed (one relaxed load decides), and never hold a lock across an await.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::sync::watch;

/// How many clocks are installed in the process: zero keeps every lookup to one load.
static INSTALLED: AtomicUsize = AtomicUsize::new(0);
static CLOCKS: LazyLock<RwLock<HashMap<Id, Arc<Clock>>>> = LazyLock::new(Default::default);

/// One runtime's virtual time.
#[derive(Debug)]
pub(crate) struct Clock {
    /// The virtual epoch ms, published to sleepers.
    now: watch::Sender<i64>,
    /// Pending wake-up times (a multiset: time → how many wait for it).
    timers: Mutex<BTreeMap<i64, usize>>,
    in_flight: AtomicUsize,
    activity: AtomicU64,
    auto: AtomicBool,
    settle: Mutex<Duration>,
}

/// Why a clock could not be installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstallError {
    NoRuntime,
    AlreadyInstalled,
}

impl Clock {
    /// Installs a clock at `start_ms` for the current tokio runtime.
    pub(crate) fn install(start_ms: i64) -> Result<Arc<Clock>, InstallError> {
        let id = Handle::try_current()
            .map_err(|_| InstallError::NoRuntime)?
            .id();
        let mut clocks = CLOCKS.write().unwrap_or_else(|p| p.into_inner());
        if clocks.contains_key(&id) {
            return Err(InstallError::AlreadyInstalled);
        }
        let clock = Arc::new(Clock {
            now: watch::channel(start_ms).0,
            timers: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            activity: AtomicU64::new(0),
            auto: AtomicBool::new(false),
            settle: Mutex::new(Duration::from_millis(3)),
        });
        clocks.insert(id, clock.clone());
        INSTALLED.fetch_add(1, Ordering::SeqCst);
        Ok(clock)
    }

    /// Removes the clock installed for runtime `id`.
    pub(crate) fn uninstall(id: Id) {
        let mut clocks = CLOCKS.write().unwrap_or_else(|p| p.into_inner());
        if clocks.remove(&id).is_some() {
            INSTALLED.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The virtual epoch ms.
    pub(crate) fn now(&self) -> i64 {
        *self.now.borrow()
    }

    fn bump(&self) {
        self.activity.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until virtual time reaches `at` (epoch ms).
    pub(crate) async fn sleep_until(&self, at: i64) {
        if self.now() >= at {
            return;
        }
        let _timer = Timer::set(self, at);
        let mut rx = self.now.subscribe();
        // The sender lives as long as `self`, which outlives this borrow.
        let _ = rx.wait_for(|now| *now >= at).await;
    }

    /// The earliest pending wake-up.
    pub(crate) fn next_timer(&self) -> Option<i64> {
        self.timers_mut().keys().next().copied()
    }

    fn timers_mut(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, usize>> {
        self.timers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the clock to `to` (never back), waking every sleeper due by then.
    pub(crate) fn set(&self, to: i64) {
        self.bump();
        self.now.send_if_modified(|now| {
            let moved = to > *now;
            *now = (*now).max(to);
            moved
        });
    }

    /// Moves the clock forward by `by`, one pending timer at a time, letting the runtime settle
    /// after each, so work a timer starts sees its own time and not the end of the jump.
    pub(crate) async fn advance(&self, by: Duration) {
        // Not `clock::millis`: the clock reads this module, never the other way round.
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let target = self.now().saturating_add(by);
        // Timers still being set (a runtime just launched arms its scheduler) must be seen.
        self.settled().await;
        while let Some(next) = self.next_timer().filter(|t| *t <= target) {
            self.set(next);
            self.settled().await;
        }
        self.set(target);
        self.settled().await;
    }

    /// Resolves once the runtime is idle (see the module docs).
    pub(crate) async fn settled(&self) {
        loop {
            let seen = self.activity.load(Ordering::SeqCst);
            tokio::time::sleep(self.settle()).await;
            if self.in_flight.load(Ordering::SeqCst) == 0
                && self.activity.load(Ordering::SeqCst) == seen
            {
                return;
            }
        }
    }

    /// Skips to the next timer whenever the runtime is idle, while auto mode is on; the
    /// launching kit runs it as a task and aborts it when the clock goes.
    pub(crate) async fn skip_loop(self: Arc<Self>) {
        loop {
            self.settled().await;
            if self.auto.load(Ordering::SeqCst) {
                if let Some(next) = self.next_timer() {
                    self.set(next);
                }
            }
        }
    }

    pub(crate) fn set_auto(&self, on: bool) {
        self.auto.store(on, Ordering::SeqCst);
    }

    pub(crate) fn settle(&self) -> Duration {
        *self.settle.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_settle(&self, settle: Duration) {
        *self.settle.lock().unwrap_or_else(|p| p.into_inner()) =
            settle.max(Duration::from_millis(1));
    }
}

/// One pending wake-up, withdrawn when its sleep ends or is dropped.
struct Timer<'a> {
    clock: &'a Clock,
    at: i64,
}

impl<'a> Timer<'a> {
    fn set(clock: &'a Clock, at: i64) -> Timer<'a> {
        *clock.timers_mut().entry(at).or_default() += 1;
        clock.bump();
        Timer { clock, at }
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        let mut timers = self.clock.timers_mut();
        if let Some(n) = timers.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                timers.remove(&self.at);
            }
        }
        drop(timers);
        self.clock.bump();
    }
}

/// The clock of the current tokio runtime, if a test installed one.
pub(crate) fn current() -> Option<Arc<Clock>> {
    if INSTALLED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let id = Handle::try_current().ok()?.id();
    CLOCKS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned()
}

/// A database call in flight on a virtual clock: the clock does not skip while one is.
pub(crate) struct DbCall(Arc<Clock>);

/// Counts a database call until the guard drops (`None` without a virtual clock).
pub(crate) fn db_call() -> Option<DbCall> {
    let clock = current()?;
    clock.in_flight.fetch_add(1, Ordering::SeqCst);
    clock.bump();
    Some(DbCall(clock))
}

impl Drop for DbCall {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.bump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sleepers_wake_in_order_as_the_clock_moves() {
        let clock = Clock::install(1_000).expect("installed");
        assert_eq!(
            Clock::install(0).err(),
            Some(InstallError::AlreadyInstalled)
        );
        assert_eq!(current().map(|c| c.now()), Some(1_000));
        let c = clock.clone();
        let late = tokio::spawn(async move { c.sleep_until(5_000).await });
        let c = clock.clone();
        let early = tokio::spawn(async move { c.sleep_until(2_000).await });
        tokio::task::yield_now().await;
        while clock.next_timer() != Some(2_000) {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_millis(1_500)).await;
        early.await.expect("woken");
        assert!(!late.is_finished(), "its time has not come");
        assert_eq!(clock.next_timer(), Some(5_000));
        clock.advance(Duration::from_secs(10)).await;
        late.await.expect("woken");
        assert_eq!(clock.now(), 12_500);
        assert_eq!(clock.next_timer(), None, "finished sleeps withdraw");
        Clock::uninstall(Handle::current().id());
        assert!(current().is_none());
    }
}

//! Waiting for something another writer produces (a message, an event, a stream value, a
//! child's outcome), without holding a thread or a connection; and evicting a workflow that
//! waits long enough idle (`Context::evictable`): the run is parked in the registry
//! (`crate::engine::evict`) and its body dropped, to run again by replay when woken.
//!
//! **Waiting** calls subscribe to a signal key, then re-read the database when woken (NOTIFY on
//! DBOS's channels via the listener, or a write in this process) or on a poll (50 ms doubling to 1
//! s); a cancel interrupts them. Measured: a `recv` wakes 3.5 ms (median of 20) after another
//! writer's `dbos.send_message`. A `recv` polls slowly while sends are heard (every `notifications`
//! insert announces itself through DBOS's trigger: 2 s doubling to 30 s), so resident waiters do
//! not load the ops lane.

use std::future::Future;
use std::time::Duration;

use crate::base::clock::{millis, now_ms};
use crate::durable::context::Context;
use crate::engine::shared::Shared;
use crate::error::Result;

const POLL_FIRST: Duration = Duration::from_millis(50);
/// Under pressure (`engine::residents`), a wait with less than this left (ms) stays resident.
const PRESSED_MIN_LEFT_MS: i64 = 1_000;
const POLL_MAX: Duration = Duration::from_secs(1);

/// Runs `check` until it finds something, waking on `key`'s signal and polling as a fallback,
/// until `until` (epoch ms; `None`: no limit). A workflow's wait (`ctx`) ends when it is
/// cancelled. `Ok(None)` means the time ran out.
pub(crate) async fn until_found<T, F, Fut>(
    shared: &Shared,
    key: String,
    until: Option<i64>,
    ctx: Option<&Context>,
    mut check: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let _waiting = ctx.map(Context::waiting);
    let since = now_ms();
    let mut parked = false;
    let subscription = shared.signals.subscribe(key);
    let mut poll = POLL_FIRST;
    loop {
        let woken = subscription.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if let Some(found) = check().await? {
            if let (true, Some(ctx)) = (parked, ctx) {
                ctx.unpark();
            }
            return Ok(Some(found));
        }
        if let (true, Some(ctx)) = (parked, ctx) {
            return ctx.evict().await;
        }
        if until.is_some_and(|until| until - now_ms() <= 0) {
            return Ok(None);
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = crate::base::clock::nap(poll, until) => poll = (poll * 2).min(POLL_MAX),
            _ = aborted(ctx) => {}
            _ = evictable(ctx, since, until, subscription.key()) => parked = true,
        }
        if let Some(ctx) = ctx {
            ctx.check_abort()?;
        }
    }
}

async fn evictable(ctx: Option<&Context>, since: i64, until: Option<i64>, key: &str) {
    match ctx {
        Some(ctx) => ctx.evictable(since, until, Some(key)).await,
        None => std::future::pending().await,
    }
}

impl Context {
    /// Resolves once this run, waiting since `since` (epoch ms) until `until` for a signal on
    /// `key`, is registered for eviction: it waited idle for the configured time (or at once
    /// while this process is at its resident bound), nothing else durable is in flight, and at
    /// least that long (under pressure, a second) is left. Never resolves when eviction is
    /// off, in a replay-only run, or for a wait about to end. The wait then looks once more
    /// (a signal sent before the registration woke only the live subscription) and either
    /// finds its value ([`Context::unpark`]) or ends the run here ([`Context::evict`]).
    pub(crate) async fn evictable(&self, since: i64, until: Option<i64>, key: Option<&str>) {
        let Some(idle) = self.shared().config.evict_after.map(millis) else {
            return std::future::pending().await;
        };
        // A wait for a message or event nobody could announce here keeps polling, resident.
        if key.is_some() && self.shared().signals.deaf() {
            return std::future::pending().await;
        }
        let residents = &self.shared().residents;
        let mut at = since.saturating_add(idle);
        // At the resident bound a wait leaves at once (unless it is about to end anyway); one
        // that cannot (something else in flight) tries again at the next announcement.
        let mut now_if_full = true;
        loop {
            let pressed = residents.pressed();
            tokio::pin!(pressed);
            pressed.as_mut().enable();
            if !(now_if_full && residents.full()) {
                tokio::select! {
                    _ = crate::base::clock::sleep_until_ms(at) => {}
                    _ = pressed => {}
                }
            }
            let left = match residents.full() {
                true => PRESSED_MIN_LEFT_MS.min(idle),
                false if now_ms() < at => continue,
                false => idle,
            };
            if until.is_some_and(|u| u - now_ms() <= left) {
                return std::future::pending().await;
            }
            let wake_at = match (until, self.deadline()) {
                (Some(u), Some(d)) => Some(u.min(d)),
                (u, d) => u.or(d),
            };
            let evicted = &self.shared().signals.evicted;
            if self.only_waiting() && evicted.park(self.workflow_id(), wake_at, key) {
                self.set_parked(true);
                return;
            }
            now_if_full = false;
            if now_ms() >= at {
                at = now_ms().saturating_add(idle);
            }
        }
    }

    /// Withdraws a registration whose wait found its value at its last look.
    pub(crate) fn unpark(&self) {
        self.set_parked(false);
        self.shared().signals.evicted.remove(self.workflow_id());
    }

    /// Ends a registered run here: its actor drops the body (this never resolves) and hands
    /// the run to the registry. A run told to stop for another reason first (a cancel, a
    /// pause) is not evicted: the wait fails with that reason instead.
    pub(crate) async fn evict<T>(&self) -> Result<T> {
        use crate::durable::context::Abort;
        let err = self.stop(Abort::Evicted);
        if self.abort() == Some(Abort::Evicted) {
            return std::future::pending().await;
        }
        Err(self.check_abort().err().unwrap_or(err))
    }
}

async fn aborted(ctx: Option<&Context>) {
    match ctx {
        Some(ctx) => ctx.aborted().await,
        None => std::future::pending().await,
    }
}

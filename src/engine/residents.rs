//! The bound on resident workflows (`RuntimeBuilder::max_resident`): how many workflow actors
//! this process holds at once, so that a million waiting workflows cost their eviction entries
//! and not a million bodies.
//!
//! It owns the count (a [`Resident`] guard per workflow actor) and two signals: **room**, when the
//! count falls below the bound, and **pressure**, while it is at the bound. Under pressure a
//! waiting run evicts itself at once instead of after `evict_after` (`Context::evictable`), so
//! new work is admitted as waiters leave. What waits for room: a direct start from outside a
//! workflow (`start::submit`, with a place promised until its run is handed to its queue actor),
//! a queue actor's claim (`actors/queue.rs` holds it back, then asks for no more than the room
//! left), a woken evicted run (`engine::evict` hands them back as room frees), and an enqueue
//! from this process, which goes to the table instead of a slot, keeping the queue's order. A
//! child started by a workflow never waits (its parent holds a place and may be waiting on it).
//! So the bound is soft by the children in flight, by runs handed over whose actor has not
//! spawned yet (a message's lag), and by one woken run per `PRESS_EVERY_MS` at the bound.
//!
//! It never evicts anything itself and never blocks a thread.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The default bound: a resident waiting workflow costs ~10 KB and an evicted one ~0.75 KB, so
/// a million waiting workflows stay under 1 GB (`benches/README.md`, "A million waiting
/// workflows").
pub(crate) const DEFAULT_MAX_RESIDENT: usize = 10_000;

/// Pressure is announced at most this often (ms): each announcement wakes every resident wait.
pub(crate) const PRESS_EVERY_MS: i64 = 50;

/// The count of resident workflows against the bound.
pub(crate) struct Residents {
    /// `usize::MAX`: unbounded.
    bound: usize,
    count: AtomicUsize,
    /// Places promised to starts that found room and have not reached their actor yet.
    promised: AtomicUsize,
    room: Notify,
    pressure: Notify,
    pressed_at: AtomicI64,
    origin: std::time::Instant,
}

/// One workflow actor's place; dropping it frees the place.
pub(crate) struct Resident(Arc<Residents>);

/// A place promised to a start until its run is handed to its queue actor.
pub(crate) struct Promised(Arc<Residents>);

impl Drop for Promised {
    fn drop(&mut self) {
        self.0.promised.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Residents {
    /// Residents bounded by `bound` (`None`: unbounded).
    pub(crate) fn new(bound: Option<usize>) -> Arc<Residents> {
        Arc::new(Residents {
            bound: bound.map_or(usize::MAX, |b| b.max(1)),
            count: AtomicUsize::new(0),
            promised: AtomicUsize::new(0),
            room: Notify::new(),
            pressure: Notify::new(),
            pressed_at: AtomicI64::new(-PRESS_EVERY_MS),
            origin: std::time::Instant::now(),
        })
    }

    /// Workflow actors held now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Places taken: resident actors and promised starts.
    fn held(&self) -> usize {
        self.count()
            .saturating_add(self.promised.load(Ordering::Relaxed))
    }

    /// At (or over) the bound, counting promised places.
    pub(crate) fn full(&self) -> bool {
        self.held() >= self.bound
    }

    /// Places left below the bound (`i64::MAX` when unbounded), for a claim's limit.
    pub(crate) fn headroom(&self) -> i64 {
        i64::try_from(self.bound.saturating_sub(self.held())).unwrap_or(i64::MAX)
    }

    /// Takes a place for a workflow actor (never refused: the callers waited for room).
    pub(crate) fn arrive(self: &Arc<Self>) -> Resident {
        if self.count.fetch_add(1, Ordering::Relaxed) + 1 >= self.bound {
            self.press();
        }
        Resident(self.clone())
    }

    /// Resolves once the count is below the bound, announcing pressure while it waits, with a
    /// place promised until the returned guard drops (when the start has handed its run over).
    pub(crate) async fn room(self: &Arc<Self>) -> Promised {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if !self.full() {
                self.promised.fetch_add(1, Ordering::Relaxed);
                return Promised(self.clone());
            }
            self.press();
            let again = tokio::time::sleep(std::time::Duration::from_millis(PRESS_EVERY_MS as u64));
            tokio::select! {
                _ = room => {}
                _ = again => {}
            }
        }
    }

    /// The next announcement of pressure (enable it before looking at [`Residents::full`]).
    pub(crate) fn pressed(&self) -> tokio::sync::futures::Notified<'_> {
        self.pressure.notified()
    }

    /// Announces pressure for work that waits for room elsewhere (woken evicted runs).
    pub(crate) fn want_room(&self) {
        self.press();
    }

    /// Wakes every resident wait to evict itself, at most every `PRESS_EVERY_MS`.
    fn press(&self) {
        // Real time, not workflow time: a virtual clock standing still must not mute it.
        let now = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        let last = self.pressed_at.load(Ordering::Relaxed);
        if now - last >= PRESS_EVERY_MS
            && self
                .pressed_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.pressure.notify_waiters();
        }
    }

    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::Relaxed) <= self.bound {
            self.room.notify_waiters();
        }
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        self.0.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn room_waits_until_a_resident_leaves() {
        let residents = Residents::new(Some(2));
        let a = residents.arrive();
        let _b = residents.arrive();
        assert!(residents.full());
        let waiting = tokio::spawn({
            let residents = residents.clone();
            async move { drop(residents.room().await) }
        });
        tokio::time::sleep(std::time::Duration::from_millis(120)).await;
        assert!(!waiting.is_finished(), "no room while full");
        drop(a);
        let waited = tokio::time::timeout(std::time::Duration::from_secs(1), waiting).await;
        assert!(waited.is_ok(), "room once one left");
        assert_eq!(residents.count(), 1);
    }

    #[tokio::test]
    async fn a_promised_place_counts_until_its_start_hands_over() {
        let residents = Residents::new(Some(1));
        let promised = residents.room().await;
        assert!(residents.full(), "the promise holds the one place");
        drop(promised);
        assert!(!residents.full());
    }

    #[tokio::test]
    async fn arriving_at_the_bound_announces_pressure() {
        let residents = Residents::new(Some(2));
        let _a = residents.arrive();
        let pressed = residents.pressed();
        tokio::pin!(pressed);
        pressed.as_mut().enable();
        let _b = residents.arrive();
        let wait = std::time::Duration::from_millis(100);
        assert!(tokio::time::timeout(wait, pressed).await.is_ok());
    }

    #[test]
    fn unbounded_is_never_full() {
        let residents = Residents::new(None);
        let _held: Vec<Resident> = (0..1000).map(|_| residents.arrive()).collect();
        assert!(!residents.full());
    }
}

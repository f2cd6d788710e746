//! The slots of one queue in this process, shared lock-free between its queue actor's admission
//! machine and the enqueues of every thread. A slot is a [`Permit`], freed when dropped; the
//! machine offers free slots, and an enqueue takes one with one atomic operation or, finding
//! none, counts itself as tabled and writes its row to the table. Never decides who may run: the
//! machine does.
//!
//! Model-checked by `loom` (`super::loom`): under `--cfg stead_loom` the atomics are loom's.
//!
//! **Local enqueues skip the queue** when nothing would be jumped (no known backlog, no shared
//! limit, no partitions): the machine offers free slots in one atomic word; an enqueue here takes
//! one in one atomic operation, writes its row `PENDING` and owned, and sends it to the actor with
//! its slot. A claim in flight holds the slots it asked for: they are not offered meanwhile.
//!
//! **Local enqueues never overtake.** One that finds no slot counts itself as tabled in the same
//! word, so an offer expecting the count the machine accounted for fails; offers resume after a
//! claim that began once every tabled write had landed (`Tabled` guards), saw none tabled since,
//! left nothing waiting and heard no wake-up after it looked. Model-checked with loom (a cfg of our
//! own, so tokio stays as it is): `RUSTFLAGS="--cfg stead_loom" CARGO_TARGET_DIR=target/loom cargo
//! test --profile loom --lib admission`.

#[cfg(all(test, stead_loom))]
use loom::sync::{
    atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    Arc,
};
#[cfg(not(all(test, stead_loom)))]
use std::sync::{
    atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    Arc,
};

/// The offer word's low half: the slots offered to enqueues.
const OFFERED: u64 = 0xFFFF_FFFF;
/// One enqueue gone to the table, counted in the offer word's high half (wrapping).
const ONE_TABLED: u64 = 1 << 32;

/// A queue's slots: cheap to clone, one pool for the queue actor and every enqueue.
#[derive(Clone, Debug)]
pub(crate) struct Slots(Arc<Pool>);

#[derive(Debug)]
struct Pool {
    /// Tabled enqueues (high half) and offered slots (low half) in one word, so that an enqueue
    /// going to the table and an offer cannot pass each other: an offer expects the tabled count
    /// the machine accounted for and fails once another enqueue went to the table.
    word: AtomicU64,
    /// Tabled enqueues whose writes are over (never ahead of the tabled count).
    landed: AtomicU32,
    /// Slots held: by permits, by the offer, by a claim in flight.
    used: AtomicU64,
    /// A claim in flight may reopen the offer: an awaited enqueue finding none may wait for its
    /// answer instead of going to the table (advice only; `take` decides).
    reopening: AtomicBool,
}

/// A slot (or a claim's batch of them), held for as long as its workflow may run here; dropping
/// it frees the slot.
#[derive(Debug)]
pub(crate) struct Permit {
    pool: Arc<Pool>,
    n: u32,
}

/// An enqueue that found no slot and writes its row to the table; dropping it says the write is
/// over (committed or failed), whatever happened.
#[derive(Debug)]
pub(crate) struct Tabled(Arc<Pool>);

/// What an enqueue from this process got.
#[derive(Debug)]
pub(crate) enum Take {
    /// An offered slot: the workflow runs at once, in it.
    Slot(Permit),
    /// None: the row goes to the table, behind the work there.
    Tabled(Tabled),
}

/// Tabled enqueues so far and those whose writes were over, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub tabled: u32,
    pub landed: u32,
}

impl Snapshot {
    /// Every enqueue counted as tabled had landed when this was read.
    pub(crate) fn all_landed(self) -> bool {
        self.tabled == self.landed
    }
}

impl Slots {
    pub(crate) fn new() -> Slots {
        Slots(Arc::new(Pool {
            word: AtomicU64::new(0),
            landed: AtomicU32::new(0),
            used: AtomicU64::new(0),
            reopening: AtomicBool::new(false),
        }))
    }

    /// Takes an offered slot, or counts this enqueue as tabled: one atomic operation either way.
    pub(crate) fn take(&self) -> Take {
        let step = |w: u64| {
            Some(if w & OFFERED > 0 {
                w - 1
            } else {
                w.wrapping_add(ONE_TABLED)
            })
        };
        // `step` always returns `Some`, so both arms hold the word before the update.
        let before = match self
            .0
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, step)
        {
            Ok(w) | Err(w) => w,
        };
        if before & OFFERED > 0 {
            Take::Slot(Permit {
                pool: self.0.clone(),
                n: 1,
            })
        } else {
            Take::Tabled(Tabled(self.0.clone()))
        }
    }

    /// Holds `n` slots (the caller checked they are free).
    pub(super) fn acquire(&self, n: u32) -> Permit {
        self.0.used.fetch_add(u64::from(n), Ordering::AcqRel);
        Permit {
            pool: self.0.clone(),
            n,
        }
    }

    /// Slots held now (at most this many: permits may be dropping meanwhile).
    pub(super) fn used(&self) -> u64 {
        self.0.used.load(Ordering::Acquire)
    }

    /// Slots offered now (enqueues may be taking them).
    pub(crate) fn offered(&self) -> u64 {
        self.0.word.load(Ordering::Acquire) & OFFERED
    }

    /// Whether waiting for the claim in flight may find a slot offered (see [`Pool`]).
    pub(crate) fn reopening(&self) -> bool {
        self.0.reopening.load(Ordering::Acquire)
    }

    pub(super) fn set_reopening(&self, on: bool) {
        self.0.reopening.store(on, Ordering::Release);
    }

    /// Withdraws the offer, freeing the slots no enqueue took; returns the tabled count.
    pub(super) fn withdraw(&self) -> u32 {
        let before = self.0.word.fetch_and(!OFFERED, Ordering::AcqRel);
        let left = before & OFFERED;
        if left > 0 {
            self.0.used.fetch_sub(left, Ordering::AcqRel);
        }
        (before >> 32) as u32
    }

    /// Offers `n` slots (after a withdraw) if the tabled count is still `tabled`; false, offering
    /// nothing, when another enqueue went to the table since.
    pub(super) fn offer(&self, n: u32, tabled: u32) -> bool {
        // Held before they are published, so an enqueue's permit never frees a slot not counted.
        self.0.used.fetch_add(u64::from(n), Ordering::AcqRel);
        let expected = u64::from(tabled) << 32;
        let offered = self
            .0
            .word
            .compare_exchange(
                expected,
                expected | u64::from(n),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if !offered {
            self.0.used.fetch_sub(u64::from(n), Ordering::AcqRel);
        }
        offered
    }

    /// How many enqueues went to the table, and how many of those writes are over.
    pub(super) fn tabled(&self) -> Snapshot {
        // `landed` first: a write counted as landed was counted as tabled before.
        let landed = self.0.landed.load(Ordering::Acquire);
        let tabled = (self.0.word.load(Ordering::Acquire) >> 32) as u32;
        Snapshot { tabled, landed }
    }
}

impl Permit {
    /// Splits one slot off this batch, if it has one left.
    pub(super) fn split(&mut self) -> Option<Permit> {
        (self.n > 0).then(|| {
            self.n -= 1;
            Permit {
                pool: self.pool.clone(),
                n: 1,
            }
        })
    }

    /// How many slots it holds.
    pub(super) fn len(&self) -> u32 {
        self.n
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.n > 0 {
            self.pool
                .used
                .fetch_sub(u64::from(self.n), Ordering::AcqRel);
        }
    }
}

impl Drop for Tabled {
    fn drop(&mut self) {
        self.0.landed.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(all(test, not(stead_loom)))]
mod tests {
    use super::*;

    fn slot(take: Take) -> Option<Permit> {
        match take {
            Take::Slot(p) => Some(p),
            Take::Tabled(_) => None,
        }
    }

    #[test]
    fn offered_slots_are_taken_until_none_is_left_and_withdrawn_at_once() {
        let slots = Slots::new();
        assert!(slots.offer(2, 0));
        assert_eq!(slots.used(), 2, "offered slots are held");
        let taken = slot(slots.take()).expect("one of two offered");
        assert_eq!(slots.withdraw(), 0, "nothing went to the table");
        assert_eq!(slots.used(), 1, "the slot not taken is free again");
        assert!(slot(slots.take()).is_none(), "withdrawn");
        drop(taken);
        assert_eq!(slots.used(), 0, "a dropped permit frees its slot");
    }

    #[test]
    fn an_enqueue_that_finds_no_slot_fails_the_next_offer() {
        let slots = Slots::new();
        let tabled = slots.take();
        assert!(matches!(tabled, Take::Tabled(_)));
        assert_eq!(
            slots.tabled(),
            Snapshot {
                tabled: 1,
                landed: 0
            }
        );
        assert!(!slots.offer(1, 0), "a later enqueue must not overtake it");
        assert_eq!(slots.used(), 0, "a failed offer holds nothing");
        drop(tabled);
        assert!(slots.tabled().all_landed());
        assert!(slots.offer(1, 1), "accounted for: offers work again");
        assert!(slot(slots.take()).is_some());
    }

    #[test]
    fn a_claims_batch_splits_into_one_permit_per_row() {
        let slots = Slots::new();
        let mut batch = slots.acquire(3);
        let row = batch.split().unwrap();
        assert_eq!((batch.len(), row.len(), slots.used()), (2, 1, 3));
        drop(batch);
        assert_eq!(slots.used(), 1, "the slots no row took are freed");
        drop(row);
        assert_eq!(slots.used(), 0);
    }

    #[test]
    fn the_tabled_count_wraps_around() {
        let slots = Slots::new();
        slots
            .0
            .word
            .store(u64::from(u32::MAX) << 32, Ordering::SeqCst);
        let _tabled = slots.take();
        assert_eq!(slots.withdraw(), 0);
        assert!(slots.offer(1, 0));
    }
}

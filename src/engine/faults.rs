//! Test hooks (feature `test-hooks`, enabled only by stead's own tests): faults a test injects
//! into one running runtime. Never part of a default build or of the documented API.
//!
//! **Fault injection.** `Runtime::inject_fault` makes the database or a queue actor panic, so tests
//! exercise restarts for real, or parks transactional steps (or a continue-as-new) after their
//! commit, so a test can kill the process in that window. `Fault::Store` makes calls to the storage interface fail at a
//! seeded rate, at random before they reach the database or after it applied them (the reply
//! lost), as Temporal's persistence tests do: every lane batch and every pool call rolls once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Faults a test can inject (see `Runtime::inject_fault`).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Fault {
    /// The database actor panics.
    PanicDatabase,
    /// The named queue's actor panics (`_dbos_internal_queue` runs direct starts).
    PanicQueue(String),
    /// Every transactional step of this runtime parks for good right after its application
    /// commit, before its system checkpoint (a test then kills the process there).
    HoldAfterTransactionCommit,
    /// Every continue-as-new of this runtime parks for good right after its commit, before the
    /// next run is handed on (a test then kills the process there).
    HoldAfterContinue,
    /// From now on, `per_mille` of the calls to the storage interface fail: half before
    /// reaching the database, half after it applied them. Seeded, so a failing run replays.
    Store { seed: u64, per_mille: u64 },
}

/// Where an injected store fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injected {
    /// The call fails without reaching the database.
    Before,
    /// The database applies the call; its reply is lost.
    After,
}

impl Injected {
    /// The error a call struck so reports (transient: the caller retries, as for a lost
    /// connection).
    fn error(self) -> crate::error::DbError {
        crate::error::DbError::Transient(match self {
            Injected::Before => "injected fault: failed before reaching the database".into(),
            Injected::After => "injected fault: applied, then the reply was lost".into(),
        })
    }
}

/// Seeded store faults (see [`Fault::Store`]); off until started.
#[derive(Debug, Default)]
pub(crate) struct StoreFaults {
    plan: OnceLock<(u64, Mutex<u64>)>,
    before: AtomicU64,
    after: AtomicU64,
}

impl StoreFaults {
    /// Starts injecting; false when already started.
    pub(crate) fn start(&self, seed: u64, per_mille: u64) -> bool {
        self.plan.set((per_mille, Mutex::new(seed))).is_ok()
    }

    /// Whether (and where) the next call fails.
    fn roll(&self) -> Option<Injected> {
        let (per_mille, state) = self.plan.get()?;
        let draw = {
            let mut s = state.lock().ok()?;
            *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = *s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        if draw % 1000 >= *per_mille {
            return None;
        }
        let (which, count) = if (draw / 1000) % 2 == 0 {
            (Injected::Before, &self.before)
        } else {
            (Injected::After, &self.after)
        };
        count.fetch_add(1, Ordering::Relaxed);
        Some(which)
    }

    /// Runs `call` under the next roll: struck before, it never runs; struck after, it runs
    /// and its answer is replaced by the fault's error.
    pub(crate) async fn around<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, crate::error::DbError>>,
    ) -> Result<T, crate::error::DbError> {
        match self.roll() {
            Some(Injected::Before) => Err(Injected::Before.error()),
            struck => match (struck, call.await) {
                (Some(at), Ok(_)) => Err(at.error()),
                (_, result) => result,
            },
        }
    }

    /// How many faults struck so far: before the database, after it.
    pub(crate) fn struck(&self) -> (u64, u64) {
        (
            self.before.load(Ordering::Relaxed),
            self.after.load(Ordering::Relaxed),
        )
    }
}

/// The faults one runtime has been told to show.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    hold_after_commit: AtomicBool,
    hold_after_continue: AtomicBool,
}

impl Faults {
    pub(crate) fn hold_after_commit(&self) {
        self.hold_after_commit.store(true, Ordering::SeqCst);
    }

    pub(crate) fn hold_after_continue(&self) {
        self.hold_after_continue.store(true, Ordering::SeqCst);
    }

    /// Whether a continue-as-new must park after its commit.
    pub(crate) fn holds_after_continue(&self) -> bool {
        self.hold_after_continue.load(Ordering::SeqCst)
    }

    /// Whether a transactional step must park after its commit.
    pub(crate) fn holds_after_commit(&self) -> bool {
        self.hold_after_commit.load(Ordering::SeqCst)
    }
}

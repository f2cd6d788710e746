//! Test hooks (feature `test-hooks`, enabled only by stead's own tests): faults a test injects
//! into one running runtime. Never part of a default build or of the documented API.
//!
//! **Fault injection.** `Runtime::inject_fault` makes the database or a queue actor panic, so tests
//! exercise restarts for real, or parks transactional steps after their commit, so a test can kill
//! the process in that window.

use std::sync::atomic::{AtomicBool, Ordering};

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
}

/// The faults one runtime has been told to show.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    hold_after_commit: AtomicBool,
}

impl Faults {
    pub(crate) fn hold_after_commit(&self) {
        self.hold_after_commit.store(true, Ordering::SeqCst);
    }

    /// Whether a transactional step must park after its commit.
    pub(crate) fn holds_after_commit(&self) -> bool {
        self.hold_after_commit.load(Ordering::SeqCst)
    }
}

//! Why a run must stop, and the one flag that says so. A run's `Context` reads the flag on every
//! durable call; the directory holds it beside the run's actor, so a cancel, pause or fence
//! from this process sets it before the caller's call returns (a message to the actor could be
//! read after the body had begun its next step). It never decides what a stopped run does
//! next: the workflow actor reads the reason once the body returns.

use std::sync::OnceLock;

use tokio::sync::Notify;

/// Why a run stopped without an outcome of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Abort {
    /// The workflow was cancelled (or its deadline passed); leave it as it is.
    Cancelled,
    /// Another execution owns it now; leave it to that one.
    NotOwner,
    /// The system database failed past its retries: crash, so the run is restarted.
    Crash(String),
    /// The run was evicted while waiting; it is parked, to run again by replay.
    Evicted,
    /// The workflow was paused: the held records are written and its row goes back on its
    /// queue, to run again by replay once resumed (`engine::pause`).
    Paused,
    /// The run continued as this new run: its outcome (the marker) is recorded already.
    Continued(String),
}

/// A run's stop flag: set once, by the first reason; a lock-free read.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    reason: OnceLock<Abort>,
    /// Woken when the reason is set, to interrupt waits.
    set: Notify,
}

impl Stop {
    /// Sets `reason` unless one is set already (the first wins), and wakes every waiter.
    pub(crate) fn stop(&self, reason: Abort) {
        let _ = self.reason.set(reason);
        self.set.notify_waiters();
    }

    /// The reason, once set.
    pub(crate) fn reason(&self) -> Option<&Abort> {
        self.reason.get()
    }

    /// Resolves once a reason is set.
    pub(crate) async fn stopped(&self) {
        let notified = self.set.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.reason.get().is_none() {
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_reason_wins_and_wakes_a_waiter() {
        let stop = std::sync::Arc::new(Stop::default());
        let waiter = tokio::spawn({
            let stop = stop.clone();
            async move { stop.stopped().await }
        });
        tokio::task::yield_now().await;
        stop.stop(Abort::Paused);
        stop.stop(Abort::Cancelled);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stop.reason(), Some(&Abort::Paused));
        // Set already: resolves at once.
        tokio::time::timeout(std::time::Duration::from_secs(5), stop.stopped())
            .await
            .unwrap();
    }
}

//! Waiting for something to happen, bounded so a loaded machine (eight tests at once on two
//! cores, or a CPU hog beside them) never fails a test that would pass on a quiet one.
//!
//! Two kinds of bound, kept apart. A *progress* bound (a cluster starting, a standby catching up,
//! a pooler accepting, a process launching, a workflow reaching a status) is only there to stop a
//! hung test: it is [`SETUP`], or a stall bound that restarts whenever the thing watched moves.
//! A *behaviour* bound (a wake-up within 2 s, a step timeout within 1 s) is what a test asserts;
//! it stays in that test, with a comment saying why it holds under load.

use std::future::Future;
use std::time::{Duration, Instant};

/// The bound for setup and progress: far above what any of them takes on a quiet machine (a few
/// seconds), so only a hang reaches it.
pub const SETUP: Duration = Duration::from_secs(180);

/// The stall bound for [`until_progress`]: how long what a test watches may stand still (a
/// standby between two replay positions, a run between two acknowledged steps) before the test
/// calls it stuck. A loaded machine slows each move; it does not stop them for a minute.
pub const STALL: Duration = Duration::from_secs(60);

/// Polls `done` every 20 ms until it holds; panics naming `what` after [`SETUP`]. For the
/// harness's synchronous parts (clusters, poolers, browsers).
pub fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + SETUP;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not after {SETUP:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`until`] for async checks: polls `done` every `every` until it holds, panics naming `what`
/// after [`SETUP`].
pub async fn until_async<F, Fut>(what: &str, every: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + SETUP;
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not after {SETUP:?}");
        tokio::time::sleep(every).await;
    }
}

/// Polls `probe` until it reports done, failing only when what it watches stops moving: the
/// progress it returns (any comparable reading: a state, an LSN, a count) unchanged for `stall`.
/// For waits whose length grows with the machine's load but which always move while healthy.
pub fn until_progress<P: PartialEq + std::fmt::Debug>(
    what: &str,
    stall: Duration,
    mut probe: impl FnMut() -> (bool, P),
) {
    let (mut done, mut seen) = probe();
    let mut moved = Instant::now();
    while !done {
        assert!(
            moved.elapsed() < stall,
            "{what}: no progress for {stall:?} (last seen {seen:?})"
        );
        std::thread::sleep(Duration::from_millis(100));
        let (now_done, now) = probe();
        done = now_done;
        if now != seen {
            seen = now;
            moved = Instant::now();
        }
    }
}

/// [`until_progress`] for async probes, polled every `every`.
pub async fn until_progress_async<P, F, Fut>(
    what: &str,
    stall: Duration,
    every: Duration,
    mut probe: F,
) where
    P: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = (bool, P)>,
{
    let (mut done, mut seen) = probe().await;
    let mut moved = Instant::now();
    while !done {
        assert!(
            moved.elapsed() < stall,
            "{what}: no progress for {stall:?} (last seen {seen:?})"
        );
        tokio::time::sleep(every).await;
        let (now_done, now) = probe().await;
        done = now_done;
        if now != seen {
            seen = now;
            moved = Instant::now();
        }
    }
}

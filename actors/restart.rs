//! Restart policies, written once for every supervising actor: which exits restart a child, how
//! long to wait, and when to give up.
//!
//! Pure bookkeeping: it never spawns or stops an actor itself.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::engine::config::RestartPolicy;

/// Which exits of a child lead to a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Always restarted, whatever the exit (database, queue actors).
    Permanent,
    /// Restarted only after an abnormal exit: a panic or an error (workflow actors).
    Transient,
}

impl Restart {
    /// Whether an exit restarts the child.
    pub(crate) fn applies(self, abnormal: bool) -> bool {
        match self {
            Restart::Permanent => true,
            Restart::Transient => abnormal,
        }
    }
}

/// What to do about a child's exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    RestartAfter(Duration),
    GiveUp,
}

/// The restart history of one child.
#[derive(Debug, Default)]
pub(crate) struct RestartBudget {
    recent: VecDeque<Instant>,
}

impl RestartBudget {
    /// Counts an exit at `now` and decides: restart after a delay that grows with the restarts
    /// in the window, or give up once they exceed the policy's maximum.
    pub(crate) fn on_exit(&mut self, policy: &RestartPolicy, now: Instant) -> Decision {
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= policy.max_restarts as usize {
            return Decision::GiveUp;
        }
        self.recent.push_back(now);
        Decision::RestartAfter(policy.backoff.delay(self.recent.len() as u32 - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy::default()
            .max_restarts(3)
            .window(Duration::from_secs(10))
            .backoff(Duration::from_millis(100), Duration::from_secs(1))
    }

    #[test]
    fn backs_off_then_gives_up_within_the_window() {
        let (p, t0) = (policy(), Instant::now());
        let mut b = RestartBudget::default();
        assert_eq!(
            b.on_exit(&p, t0),
            Decision::RestartAfter(Duration::from_millis(100))
        );
        assert_eq!(
            b.on_exit(&p, t0),
            Decision::RestartAfter(Duration::from_millis(200))
        );
        assert_eq!(
            b.on_exit(&p, t0),
            Decision::RestartAfter(Duration::from_millis(400))
        );
        assert_eq!(b.on_exit(&p, t0), Decision::GiveUp);
    }

    #[test]
    fn restarts_outside_the_window_are_forgotten() {
        let (p, t0) = (policy(), Instant::now());
        let mut b = RestartBudget::default();
        for _ in 0..3 {
            b.on_exit(&p, t0);
        }
        let later = t0 + Duration::from_secs(11);
        assert_eq!(
            b.on_exit(&p, later),
            Decision::RestartAfter(Duration::from_millis(100))
        );
    }

    #[test]
    fn transient_children_restart_only_after_abnormal_exits() {
        assert!(Restart::Permanent.applies(false));
        assert!(Restart::Transient.applies(true));
        assert!(!Restart::Transient.applies(false));
    }
}

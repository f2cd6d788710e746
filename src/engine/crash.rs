//! Crash points (feature `testing`): where the crash matrix (`testing::crash`) stops one run
//! dead. A plan names one workflow and one boundary; every durable call the run begins afresh,
//! once the records before it are written, asks the plan whether to stop there, and so does the
//! run's end, before its outcome is written.
//!
//! It owns the count of a run's calls and the moment it struck; it must never write, and never
//! touch a workflow other than the one it names (children and peers run as usual).

use std::sync::Mutex;

use tokio::sync::Notify;

/// One run's crash point, or (with no boundary) a watch that only learns its calls.
#[derive(Debug)]
pub(crate) struct CrashPlan {
    workflow_id: String,
    /// Stop after this many calls are recorded; `None`: never stop, only count.
    boundary: Option<usize>,
    state: Mutex<Seen>,
    struck: Notify,
}

#[derive(Debug, Default)]
struct Seen {
    /// The names of the calls begun afresh, in order.
    calls: Vec<String>,
    struck: bool,
}

impl CrashPlan {
    /// A plan that stops `workflow_id` once `boundary` calls are recorded (`None`: never).
    pub(crate) fn new(workflow_id: &str, boundary: Option<usize>) -> CrashPlan {
        CrashPlan {
            workflow_id: workflow_id.to_owned(),
            boundary,
            state: Mutex::new(Seen::default()),
            struck: Notify::new(),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts call `name` of `workflow_id`, begun afresh; true when the run must stop dead
    /// before it.
    pub(crate) fn at_call(&self, workflow_id: &str, name: &str) -> bool {
        if workflow_id != self.workflow_id {
            return false;
        }
        let mut seen = self.seen();
        let index = seen.calls.len();
        seen.calls.push(name.to_owned());
        self.strike(&mut seen, index)
    }

    /// True when `workflow_id` must stop dead at its end, before its outcome is written.
    pub(crate) fn at_end(&self, workflow_id: &str) -> bool {
        if workflow_id != self.workflow_id {
            return false;
        }
        let mut seen = self.seen();
        let index = seen.calls.len();
        self.strike(&mut seen, index)
    }

    fn strike(&self, seen: &mut Seen, index: usize) -> bool {
        if seen.struck || self.boundary != Some(index) {
            return false;
        }
        seen.struck = true;
        self.struck.notify_waiters();
        true
    }

    /// The calls the run began afresh, by name, in order.
    pub(crate) fn calls(&self) -> Vec<String> {
        self.seen().calls.clone()
    }

    /// Resolves once the plan has stopped its run.
    pub(crate) async fn struck(&self) {
        let notified = self.struck.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self.seen().struck {
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_strikes_its_workflow_once_at_its_boundary() {
        let plan = CrashPlan::new("w", Some(1));
        assert!(!plan.at_call("other", "a"), "another workflow runs on");
        assert!(!plan.at_call("w", "a"));
        assert!(
            plan.at_call("w", "b"),
            "one call recorded: stop before the second"
        );
        assert!(!plan.at_end("w"), "it strikes once");
        assert_eq!(plan.calls(), ["a", "b"]);
        let end = CrashPlan::new("w", Some(1));
        assert!(!end.at_call("w", "a"));
        assert!(end.at_end("w"), "after the last call, before the outcome");
        let watch = CrashPlan::new("w", None);
        assert!(!watch.at_call("w", "a") && !watch.at_end("w"));
    }
}

//! The actor directory: where the core finds this process's actors (each queue's port and open
//! slots, each running workflow's stop flag, the scheduler) and the queue definitions they serve.
//!
//! Each actor keeps its own entry (it registers on start and leaves on stop); the supervisor's
//! tree owns the actors, the core only reads entries, sends them the core's own message types
//! (`QueueRequest`, `SchedulerRequest`) and sets a run's stop flag (`engine::stop`). It never
//! names an actor type.

use std::sync::Arc;

use dashmap::DashMap;
use ractor::DerivedActorRef;
use tokio::sync::Notify;

use crate::base::queue::Queue;
use crate::engine::admission::Slots;
use crate::engine::dispatch::{LocalRun, QueueRequest};
use crate::engine::stop::Abort;
use crate::sysdb::HeldRun;

/// The current actors of one runtime, by what the core looks them up by.
#[derive(Default)]
pub(crate) struct Directory {
    /// The current actor of each queue, kept by the queue actors themselves.
    pub queues: DashMap<String, DerivedActorRef<QueueRequest>>,
    /// Slots each local queue actor offers to local enqueues, by queue name.
    pub open_slots: DashMap<String, Offer>,
    /// The actors of the workflows running in this process, by workflow id (more than one only
    /// while a taken-over run winds down).
    pub running: DashMap<String, Vec<LocalRun>>,
    /// The definitions this executor last read, by queue name.
    pub queue_defs: DashMap<String, Queue>,
    /// Queue names known to be defined for this application (at the last reload, written here,
    /// or found by an enqueue's lookup): an enqueue to any other name reads the definitions.
    pub queue_names: dashmap::DashSet<String>,
    /// Queues another application defined, with that application, as an enqueue's lookup found
    /// them: what this process enqueues there belongs to their owner, who serves them.
    pub foreign_queues: DashMap<String, String>,
    /// The current scheduler actor, kept by the scheduler itself.
    pub scheduler: std::sync::RwLock<Option<DerivedActorRef<SchedulerRequest>>>,
}

/// A local queue actor's offer to this process's enqueues.
#[derive(Clone)]
pub(crate) struct Offer {
    pub slots: Slots,
    /// Notified each time the actor has settled an input (its offer may have changed).
    pub settled: Arc<Notify>,
}

/// What the core asks of the scheduler actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchedulerRequest {
    /// Re-read the schedules now (one was created, changed or deleted through this runtime).
    Refresh,
}

impl Directory {
    /// Every run this process holds, with its owner token.
    pub(crate) fn held_runs(&self) -> Vec<HeldRun> {
        self.running
            .iter()
            .flat_map(|e| {
                let id = e.key();
                e.value()
                    .iter()
                    .map(|r| HeldRun {
                        id: id.clone(),
                        owner: r.owner.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Stops the runs of `id` here (all, or only the one running as `owner`) for `reason`,
    /// before their next durable call: set before this returns.
    pub(crate) fn stop_local(&self, id: &str, owner: Option<&str>, reason: Abort) {
        if let Some(runs) = self.running.get(id) {
            for run in runs.iter().filter(|r| owner.is_none_or(|o| o == r.owner)) {
                run.stop.stop(reason.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stop::Stop;

    fn run(dir: &Directory, id: &str, owner: &str) -> Arc<Stop> {
        let stop = Arc::new(Stop::default());
        let owner = owner.to_owned();
        let local = LocalRun {
            owner,
            stop: stop.clone(),
        };
        dir.running.entry(id.to_owned()).or_default().push(local);
        stop
    }

    #[test]
    fn a_local_stop_is_set_before_it_returns_and_only_on_the_named_owner() {
        let dir = Directory::default();
        let (old, new) = (run(&dir, "w", "old"), run(&dir, "w", "new"));
        let other = run(&dir, "x", "old");
        dir.stop_local("w", Some("old"), Abort::NotOwner);
        assert_eq!(old.reason(), Some(&Abort::NotOwner));
        assert_eq!(new.reason(), None);
        dir.stop_local("w", None, Abort::Paused);
        assert_eq!(new.reason(), Some(&Abort::Paused));
        assert_eq!(
            old.reason(),
            Some(&Abort::NotOwner),
            "the first reason stays"
        );
        assert_eq!(other.reason(), None);
        dir.stop_local("nobody", None, Abort::Cancelled);
    }
}

//! In-process completion slots: a handle on a workflow running here learns its outcome the moment
//! the workflow actor commits it, without polling the database.
//!
//! A slot exists only while its workflow runs in this process; handles fall back to reading the
//! database for anything else.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::watch;

use crate::base::status::Status;

/// A committed outcome, as stored.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub status: Status,
    pub output: Option<String>,
    pub error: Option<String>,
}

/// The shared slot of one running workflow.
pub(crate) type Slot = watch::Receiver<Option<Arc<Finished>>>;

/// Slots of the workflows running in this process, by id.
#[derive(Default)]
pub(crate) struct Completions {
    running: DashMap<String, watch::Sender<Option<Arc<Finished>>>>,
}

impl Completions {
    /// The slot of `id`, created if this process has none yet.
    pub(crate) fn slot(&self, id: &str) -> Slot {
        self.running
            .entry(id.to_owned())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// The slot of `id` if the workflow runs here.
    pub(crate) fn existing(&self, id: &str) -> Option<Slot> {
        self.running.get(id).map(|s| s.subscribe())
    }

    /// Publishes the committed outcome of `id` and forgets the slot.
    pub(crate) fn finish(&self, id: &str, finished: Finished) {
        if let Some((_, tx)) = self.running.remove(id) {
            tx.send_replace(Some(Arc::new(finished)));
        }
    }

    /// Forgets the slot of `id` if no handle is waiting on it (an evicted workflow: a handle
    /// that asks later reads the database).
    pub(crate) fn release_unwatched(&self, id: &str) {
        self.running.remove_if(id, |_, tx| tx.receiver_count() == 0);
    }

    /// Forgets the slot of a workflow that stopped here without an outcome (cancelled, taken
    /// over, shut down); its handles go back to reading the database.
    pub(crate) fn abandon(&self, id: &str) {
        self.running.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slot_taken_before_the_finish_sees_it() {
        let c = Completions::default();
        let mut slot = c.slot("wf");
        c.finish(
            "wf",
            Finished {
                status: Status::Success,
                output: Some("1".into()),
                error: None,
            },
        );
        let got = slot
            .wait_for(|v| v.is_some())
            .await
            .unwrap()
            .clone()
            .unwrap();
        assert_eq!(got.output.as_deref(), Some("1"));
        assert!(c.existing("wf").is_none());
    }
}

//! Paused workflows in this process: what an executor does when told a workflow it runs is
//! paused (by its own client, an announcement on `stead_pause_channel`, or the sweep's read), and
//! how a stopped paused run's row goes back on its queue. The rules are in `sysdb::pauses`.
//!
//! A resident run's stop flag takes `Abort::Paused` before the pause call returns (an
//! in-memory flag every durable call already reads, so no step pays a read), and the run stops
//! before its next durable call; a wait is interrupted at once. Its workflow actor then writes the
//! step records it held and calls [`requeue`]; the actor's exit frees its slot here. An evicted
//! run has no actor: its entry is dropped (freeing its slot) and its row requeued from here, or,
//! caught between eviction and hand-over, marked so its queue actor does that. It owns no row of
//! its own and never runs workflow code.

use crate::engine::db::Db;
use crate::engine::dispatch::QueueRequest;
use crate::engine::shared::Shared;
use crate::engine::stop::Abort;
use crate::error::DbError;

impl Shared {
    /// Stops the runs of paused workflow `id` in this process (all, or only the one running as
    /// `owner`) before their next durable call, and requeues an evicted one's row.
    pub(crate) fn pause_local(&self, id: &str, owner: Option<&str>) {
        self.directory.stop_local(id, owner, Abort::Paused);
        let Some(parked) = self.signals.evicted.pause(id) else {
            return;
        };
        let port = self.directory.queues.get(parked.queue()).map(|q| q.clone());
        let (d, slot) = parked.into_dispatch();
        // Its slot is freed now: the row leaves the running count with the requeue below.
        drop(slot);
        self.completions.abandon(id);
        let db = self.db.clone();
        tokio::spawn(async move {
            if requeue_logged(&db, &d.id, &d.owner).await {
                if let Some(port) = port {
                    let _ = port.send_message(QueueRequest::Wake);
                }
            }
        });
    }
}

/// [`requeue`] for a run no actor holds (an evicted one), a failure logged: true when the row
/// went back on its queue (then wake that queue).
pub(crate) async fn requeue_logged(db: &Db, id: &str, owner: &str) -> bool {
    match requeue(db, id, owner).await {
        Ok(queue) => queue.is_some(),
        Err(e) => {
            tracing::warn!(workflow_id = %id, error = %e,
                "cannot requeue a paused workflow; recovery puts it back on its queue");
            false
        }
    }
}

/// Puts paused run `id`'s row (`PENDING` under `owner`) back on its queue, as
/// `Pauses::requeue_paused` does; returns that queue, `None` when the row moved on meanwhile.
pub(crate) async fn requeue(db: &Db, id: &str, owner: &str) -> Result<Option<String>, DbError> {
    let args = (id.to_owned(), owner.to_owned());
    db.call_with(args, |store, (id, owner)| async move {
        store.requeue_paused(&id, &owner).await
    })
    .await
}

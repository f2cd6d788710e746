//! Pausing queues and workflows, on a [`Client`] (and so on a runtime): the faces of
//! `sysdb::pauses`.
//!
//! A queue's pause is its state in the system database, shared by the fleet: no executor claims
//! from a paused queue, enqueues are still accepted, running workflows finish. A resume wakes
//! this process's actor of the queue (the store announces it to the other processes); it never
//! touches a workflow row.
//!
//! A workflow's pause ([`Client::pause_workflow`]) stops it before its next durable call wherever
//! it runs, and keeps every executor from running it until [`Client::resume`] (which, for a paused
//! workflow, only lifts the pause: it continues on its own queue from where it stopped). This
//! process's runs are told at once; other processes hear the announcement (Postgres) or find it at
//! their next sweep. Pausing a finished workflow is refused ([`Error::WorkflowFinished`]): it
//! could never run again anyway. Nothing here builds SQL.

use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::base::status::Status;
use crate::client::Client;
use crate::engine::start;
use crate::error::{Error, Result};
use crate::sysdb::PauseOutcome;

/// A paused queue and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PausedQueue {
    pub name: String,
    /// When it was paused (epoch ms).
    pub paused_at_ms: i64,
}

impl Client {
    /// Pauses a queue for every executor on this database: none claims from it from its next
    /// claim on (a claim already under way may still take work), enqueues are still accepted
    /// and running workflows finish. An executor learns of it at that claim: until then, an
    /// enqueue in that executor's own process may still start at once in a free slot (this
    /// process's actor is woken to claim now). True if it was running, false if it was already paused.
    /// Refused with [`Error::UnknownQueue`] for a queue no application defines.
    pub async fn pause_queue(&self, name: &str) -> Result<bool> {
        self.check_queue(name).await?;
        let queue = name.to_owned();
        let now = now_ms();
        let paused = self
            .shared()
            .db
            .call_with(queue, move |db, queue| async move {
                db.pause_queue(&queue, now).await
            })
            .await?;
        // This process's actor learns of the pause at its next claim: make that now.
        start::wake(self.shared(), name);
        Ok(paused)
    }

    /// Resumes a paused queue: its waiting work is claimed at once by the executors that serve
    /// it. True if it was paused.
    pub async fn resume_queue(&self, name: &str) -> Result<bool> {
        let queue = name.to_owned();
        let resumed = self
            .shared()
            .db
            .call_with(queue, move |db, queue| async move {
                db.resume_queue(&queue).await
            })
            .await?;
        start::wake(self.shared(), name);
        Ok(resumed)
    }

    /// Pauses workflow `id`: the executor running it stops it before its next durable call
    /// (its finished steps stay recorded; a step body already running finishes first), its row
    /// goes back on its queue (`ENQUEUED`, so it holds no concurrency slot), and no executor
    /// runs it again, across restarts and fleet changes, until [`Client::resume`]. An enqueued
    /// workflow is not claimed while paused. Its stored status stays DBOS's; listings show the
    /// pause as [`WorkflowStatus::paused_at_ms`](crate::WorkflowStatus). True if this call
    /// paused it, false if it already was. Refused with [`Error::NotFound`] for an unknown id
    /// and [`Error::WorkflowFinished`] for a finished one. Its children are not paused.
    pub async fn pause_workflow(&self, id: &str) -> Result<bool> {
        crate::names::validate_name(id, "workflow id")?;
        let target = id.to_owned();
        let now = now_ms();
        let outcome = self
            .shared()
            .db
            .call_with(target, move |db, target| async move {
                db.pause_workflow(&target, now).await
            })
            .await?;
        match outcome {
            PauseOutcome::NotFound => Err(Error::NotFound(id.to_owned())),
            PauseOutcome::Finished(status) => Err(Error::WorkflowFinished {
                id: id.to_owned(),
                status,
            }),
            PauseOutcome::Paused(added) => {
                // This process's runs stop now (others hear the announcement, or sweep).
                self.shared().pause_local(id, None);
                Ok(added)
            }
        }
    }

    /// Lifts workflow `id`'s pause; `None` when it does not exist, else whether it was paused
    /// and still may run (then it continues on its queue). This process's queue is woken (the
    /// store announces it to the others).
    pub(crate) async fn unpause_workflow(&self, id: &str) -> Result<Option<bool>> {
        let target = id.to_owned();
        let found = self
            .shared()
            .db
            .call_with(target, move |db, target| async move {
                db.unpause_workflow(&target).await
            })
            .await?;
        let Some(found) = found else {
            return Ok(None);
        };
        let runs = Status::parse(&found.status).is_some_and(|s| !s.is_final());
        if let Some(queue) = found.queue.as_deref() {
            start::wake(self.shared(), queue);
        }
        Ok(Some(found.was_paused && runs))
    }

    /// The paused queues, by name.
    pub async fn paused_queues(&self) -> Result<Vec<PausedQueue>> {
        let found = self
            .shared()
            .db
            .call(|db| async move { db.paused_queues().await })
            .await?;
        Ok(found
            .into_iter()
            .map(|(name, paused_at_ms)| PausedQueue { name, paused_at_ms })
            .collect())
    }

    /// The internal queue, or one some application defines.
    async fn check_queue(&self, name: &str) -> Result<()> {
        if name == INTERNAL_QUEUE || self.all_queues().await?.iter().any(|(_, q)| q.name == name) {
            Ok(())
        } else {
            Err(Error::UnknownQueue(name.to_owned()))
        }
    }
}

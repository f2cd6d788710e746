//! Pausing queues, on a [`Client`] (and so on a runtime): the faces of `sysdb::pauses`.
//!
//! A pause is the queue's state in the system database, shared by the fleet: no executor claims
//! from a paused queue, enqueues are still accepted, running workflows finish. A resume wakes
//! this process's actor of the queue (the store announces it to the other processes). It never
//! touches a workflow row, and builds no SQL.

use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::client::Client;
use crate::engine::start;
use crate::error::{Error, Result};

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

//! The `queues` table: queue definitions shared by every executor of an application.

use async_trait::async_trait;

use crate::base::queue::Queue;
use crate::error::DbError;

#[async_trait]
pub(crate) trait Queues: Send + Sync {
    /// The queues of application `app` (rows of its name, and rows of none), by name.
    async fn list_queues(&self, app: Option<&str>) -> Result<Vec<Queue>, DbError>;

    /// Every application's queues, by name, each with its application (`None`: shared).
    async fn list_all_queues(&self) -> Result<Vec<(Option<String>, Queue)>, DbError>;

    /// Writes a queue's definition. `replace` overwrites an existing row; otherwise an existing
    /// row is left alone. `None`: it existed and was left alone; `Some(created)` otherwise.
    async fn put_queue(
        &self,
        q: &Queue,
        app: Option<&str>,
        replace: bool,
    ) -> Result<Option<bool>, DbError>;

    /// Deletes a queue's definition, unless workflows still wait on it (`ENQUEUED` or
    /// `DELAYED`): those would wait forever, so the row stays and they are counted.
    async fn delete_queue(&self, name: &str) -> Result<QueueDeletion, DbError>;
}

/// What [`Queues::delete_queue`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueDeletion {
    /// No queue of that name.
    Missing,
    /// Deleted (no workflow waited on it).
    Deleted,
    /// Kept: this many workflows wait on it.
    Waiting(i64),
}

impl QueueDeletion {
    /// The answer for a queue that `existed`, with `waiting` workflows.
    pub(crate) fn of(existed: bool, waiting: i64) -> QueueDeletion {
        match (existed, waiting) {
            (false, _) => QueueDeletion::Missing,
            (true, 0) => QueueDeletion::Deleted,
            (true, n) => QueueDeletion::Waiting(n),
        }
    }
}

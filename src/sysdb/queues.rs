//! The `queues` table: queue definitions shared by every executor of an application.

use async_trait::async_trait;

use crate::error::DbError;
use crate::queue::Queue;

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

    /// Deletes a queue's definition; false when there was none.
    async fn delete_queue(&self, name: &str) -> Result<bool, DbError>;
}

//! The `queues` table on SQLite.

use async_trait::async_trait;
use sqlx::AssertSqlSafe;

use super::Sqlite;
use crate::base::queue::Queue;
use crate::error::DbError;
use crate::sysdb::queues::{QueueDeletion, Queues};
use crate::sysdb::rows::{all, app_queue_from_row, bind_queue, queue_from_row, QUEUE_COLUMNS};

#[async_trait]
impl Queues for Sqlite {
    async fn list_queues(&self, app: Option<&str>) -> Result<Vec<Queue>, DbError> {
        let sql = format!(
            "SELECT {QUEUE_COLUMNS} FROM queues \
             WHERE application_name = ?1 OR application_name IS NULL ORDER BY name"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(app)
            .fetch_all(self.reader())
            .await?;
        all(&rows, queue_from_row)
    }

    async fn list_all_queues(&self) -> Result<Vec<(Option<String>, Queue)>, DbError> {
        let sql = format!("SELECT {QUEUE_COLUMNS}, application_name FROM queues ORDER BY name");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(self.reader())
            .await?;
        all(&rows, app_queue_from_row)
    }

    async fn put_queue(
        &self,
        q: &Queue,
        app: Option<&str>,
        replace: bool,
    ) -> Result<Option<bool>, DbError> {
        let mut tx = self.write().await?;
        let exists = sqlx::query("SELECT 1 FROM queues WHERE name = ?1")
            .bind(&q.name)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if exists && !replace {
            return Ok(None);
        }
        let sql = if exists {
            "UPDATE queues SET concurrency = ?2, worker_concurrency = ?3, rate_limit_max = ?4, \
               rate_limit_period_sec = ?5, priority_enabled = ?6, partition_queue = ?7, \
               polling_interval_sec = ?8, partition_concurrency = ?9, \
               partition_worker_concurrency = ?10, partition_rate_limit_max = ?11, \
               partition_rate_limit_period_sec = ?12, application_name = ?13, updated_at = ?14 \
             WHERE name = ?1"
                .to_owned()
        } else {
            format!(
                "INSERT INTO queues ({QUEUE_COLUMNS}, application_name, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14)"
            )
        };
        bind_queue(sqlx::query(AssertSqlSafe(sql)), q, app)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(!exists))
    }

    async fn delete_queue(&self, name: &str) -> Result<QueueDeletion, DbError> {
        let mut tx = self.write().await?;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM workflow_status \
             WHERE queue_name = ?1 AND status IN ('ENQUEUED', 'DELAYED')",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        let existed: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM queues WHERE name = ?1)")
                .bind(name)
                .fetch_one(&mut *tx)
                .await?;
        if existed && waiting == 0 {
            sqlx::query("DELETE FROM queues WHERE name = ?1")
                .bind(name)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(QueueDeletion::of(existed, waiting))
    }
}

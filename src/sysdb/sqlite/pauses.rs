//! Paused queues on SQLite (`stead_queue_pauses`, `sysdb::pauses`). One process uses the file,
//! so a resume announces nothing: the caller wakes its own queue actor.

use async_trait::async_trait;

use super::Sqlite;
use crate::error::DbError;
use crate::sysdb::pauses::Pauses;

#[async_trait]
impl Pauses for Sqlite {
    async fn pause_queue(&self, queue: &str, now_ms: i64) -> Result<bool, DbError> {
        let mut tx = self.write().await?;
        let added = sqlx::query(
            "INSERT INTO stead_queue_pauses (queue_name, paused_at) VALUES (?1, ?2) \
             ON CONFLICT (queue_name) DO NOTHING",
        )
        .bind(queue)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(added > 0)
    }

    async fn resume_queue(&self, queue: &str) -> Result<bool, DbError> {
        let mut tx = self.write().await?;
        let gone = sqlx::query("DELETE FROM stead_queue_pauses WHERE queue_name = ?1")
            .bind(queue)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone > 0)
    }

    async fn paused_queues(&self) -> Result<Vec<(String, i64)>, DbError> {
        Ok(sqlx::query_as(
            "SELECT queue_name, paused_at FROM stead_queue_pauses ORDER BY queue_name",
        )
        .fetch_all(self.reader())
        .await?)
    }
}

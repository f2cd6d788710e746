//! Paused queues and workflows on SQLite (`stead_queue_pauses`, `stead_workflow_pauses`,
//! `sysdb::pauses`). One process uses the file, so nothing is announced: the caller wakes its
//! own queue actor and stops its own runs.

use async_trait::async_trait;

use sqlx::Row;

use super::Sqlite;
use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::error::DbError;
use crate::sysdb::pauses::{PauseOutcome, Pauses, Unpaused};

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

    async fn pause_workflow(&self, id: &str, now_ms: i64) -> Result<PauseOutcome, DbError> {
        let mut tx = self.write().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM workflow_status WHERE workflow_uuid = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let added = sqlx::query(
            "INSERT INTO stead_workflow_pauses (workflow_uuid, paused_at) \
             SELECT workflow_uuid, ?2 FROM workflow_status WHERE workflow_uuid = ?1 \
               AND status IN ('PENDING', 'ENQUEUED', 'DELAYED') \
             ON CONFLICT (workflow_uuid) DO NOTHING",
        )
        .bind(id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(PauseOutcome::of(status, added > 0))
    }

    async fn unpause_workflow(&self, id: &str) -> Result<Option<Unpaused>, DbError> {
        let mut tx = self.write().await?;
        let gone = sqlx::query("DELETE FROM stead_workflow_pauses WHERE workflow_uuid = ?1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let row =
            sqlx::query("SELECT status, queue_name FROM workflow_status WHERE workflow_uuid = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        row.map(|r| {
            Ok(Unpaused {
                status: r.try_get(0)?,
                queue: r.try_get(1)?,
                was_paused: gone > 0,
            })
        })
        .transpose()
    }

    async fn requeue_paused(&self, id: &str, owner: &str) -> Result<Option<String>, DbError> {
        let mut tx = self.write().await?;
        let queue: Option<Option<String>> = sqlx::query_scalar(
            "UPDATE workflow_status \
             SET status = 'ENQUEUED', queue_name = COALESCE(queue_name, ?3), owner_xid = NULL, \
                 updated_at = ?4, recovery_attempts = MAX(COALESCE(recovery_attempts, 1) - 1, 0) \
             WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2 \
             RETURNING queue_name",
        )
        .bind(id)
        .bind(owner)
        .bind(INTERNAL_QUEUE)
        .bind(now_ms())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(queue.flatten())
    }
}

//! Dispatch outside claims on SQLite: recovery, taking back a crashed queue actor's workflows,
//! and counting crash restarts.

use async_trait::async_trait;
use sqlx::Row;

use super::claim::claimed_row;
use super::{json_list, Sqlite};
use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::error::DbError;
use crate::sysdb::claim::in_dispatch_order;
use crate::sysdb::dispatch::{Dispatch, Executor};
use crate::sysdb::Claimed;

#[async_trait]
impl Dispatch for Sqlite {
    async fn recover(&self, me: &Executor<'_>, any_executor: bool) -> Result<u64, DbError> {
        let mut tx = self.write().await?;
        let done = sqlx::query(
            "UPDATE workflow_status \
             SET status = 'ENQUEUED', queue_name = COALESCE(queue_name, ?4), owner_xid = NULL, \
                 updated_at = ?5, application_name = COALESCE(application_name, ?3) \
             WHERE status = 'PENDING' AND (executor_id = ?1 OR ?6) AND application_version = ?2 \
               AND (application_name = ?3 OR application_name IS NULL)",
        )
        .bind(me.executor_id)
        .bind(me.app_version)
        .bind(me.app_name)
        .bind(INTERNAL_QUEUE)
        .bind(now_ms())
        .bind(any_executor)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn redispatch(
        &self,
        me: &Executor<'_>,
        queue: &str,
        with_direct: bool,
        running: &[String],
        decided_ms: i64,
    ) -> Result<Vec<Claimed>, DbError> {
        let mut tx = self.write().await?;
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT workflow_uuid FROM workflow_status \
             WHERE status = 'PENDING' AND executor_id = ?1 AND application_version = ?2 \
               AND (queue_name = ?3 OR (?4 AND queue_name IS NULL)) \
               AND workflow_uuid NOT IN (SELECT value FROM json_each(?5)) \
               AND COALESCE(updated_at, 0) <= ?6",
        )
        .bind(me.executor_id)
        .bind(me.app_version)
        .bind(queue)
        .bind(with_direct)
        .bind(json_list(running))
        .bind(decided_ms)
        .fetch_all(&mut *tx)
        .await?;
        let mut keyed = Vec::with_capacity(ids.len());
        for id in ids {
            sqlx::query(
                "UPDATE workflow_status SET owner_xid = ?2, updated_at = ?3, \
                     recovery_attempts = COALESCE(recovery_attempts, 0) + 1 \
                 WHERE workflow_uuid = ?1",
            )
            .bind(&id)
            .bind(uuid::Uuid::new_v4().to_string())
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
            keyed.push(Claimed::keyed_from_row(
                &claimed_row(&mut tx, &id).await?,
                0,
            )?);
        }
        tx.commit().await?;
        Ok(in_dispatch_order(keyed))
    }

    async fn bump_attempts(&self, id: &str, owner: &str) -> Result<Option<i64>, DbError> {
        let mut tx = self.write().await?;
        let row = sqlx::query(
            "UPDATE workflow_status \
             SET recovery_attempts = COALESCE(recovery_attempts, 0) + 1, updated_at = ?3 \
             WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2 \
             RETURNING recovery_attempts",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(match row {
            Some(row) => row.try_get(0)?,
            None => None,
        })
    }

    async fn adopt_inputs(
        &self,
        id: &str,
        owner: &str,
        inputs: Option<&str>,
    ) -> Result<bool, DbError> {
        let mut tx = self.write().await?;
        let adopted = sqlx::query(
            "UPDATE workflow_status SET serialization = 'portable_json', \
                 inputs = CASE WHEN inputs IS NULL THEN NULL ELSE COALESCE(?3, inputs) END \
             WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2",
        )
        .bind(id)
        .bind(owner)
        .bind(inputs)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if let (true, Some(inputs)) = (adopted, inputs) {
            sqlx::query("UPDATE workflow_input SET inputs = ?2 WHERE workflow_uuid = ?1")
                .bind(id)
                .bind(inputs)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(adopted)
    }
}

//! Dispatch outside claims on Postgres: recovery, taking back a crashed queue actor's
//! workflows, and counting crash restarts.

use async_trait::async_trait;

use super::Postgres;
use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::error::DbError;
use crate::sysdb::claim::in_dispatch_order;
use crate::sysdb::dispatch::{Dispatch, Executor};
use crate::sysdb::rows::all;
use crate::sysdb::Claimed;

const RECOVER: &str = r#"
UPDATE {s}.workflow_status
SET status = 'ENQUEUED', queue_name = COALESCE(queue_name, $4), owner_xid = NULL, updated_at = $5,
    application_name = COALESCE(application_name, $3)
WHERE status = 'PENDING' AND (executor_id = $1 OR $6) AND application_version = $2
  AND (application_name = $3 OR application_name IS NULL)
"#;

const REDISPATCH: &str = r#"
UPDATE {s}.workflow_status w
SET owner_xid = md5($8 || w.workflow_uuid)::uuid::text, updated_at = $5,
    recovery_attempts = COALESCE(w.recovery_attempts, 0) + 1
WHERE w.status = 'PENDING' AND w.executor_id = $1 AND w.application_version = $2
  AND (w.queue_name = $3 OR ($4 AND w.queue_name IS NULL))
  AND NOT (w.workflow_uuid = ANY($6::text[]))
  AND COALESCE(w.updated_at, 0) <= $7
RETURNING w.workflow_uuid, w.name, w.owner_xid, w.recovery_attempts,
    COALESCE((SELECT i.inputs FROM {s}.workflow_input i
              WHERE i.workflow_uuid = w.workflow_uuid), w.inputs),
    w.serialization,
    -- A probe, not EXISTS, which a generic plan may run as a hashed read of every step row.
    (SELECT true FROM {s}.operation_outputs o WHERE o.workflow_uuid = w.workflow_uuid
     LIMIT 1) IS NOT NULL,
    w.priority, w.created_at, w.workflow_deadline_epoch_ms,
    (w.attributes -> 'dbos.otelContext')::text, w.delay_until_epoch_ms
"#;

const BUMP_ATTEMPTS: &str = r#"
UPDATE {s}.workflow_status
SET recovery_attempts = COALESCE(recovery_attempts, 0) + 1, updated_at = $3
WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2
RETURNING recovery_attempts
"#;

/// $1 id, $2 owner, $3 the portable envelope (NULL: inputs left as they are).
const ADOPT_INPUTS: &str = r#"
WITH w AS (
    UPDATE {s}.workflow_status
    SET serialization = 'portable_json',
        inputs = CASE WHEN inputs IS NULL THEN NULL ELSE COALESCE($3::text, inputs) END
    WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2
    RETURNING workflow_uuid
), i AS (
    UPDATE {s}.workflow_input i SET inputs = COALESCE($3::text, i.inputs)
    FROM w WHERE i.workflow_uuid = w.workflow_uuid
    RETURNING 1
)
SELECT count(*) FROM w
"#;

#[async_trait]
impl Dispatch for Postgres {
    /// Every bucket's rows.
    async fn recover(&self, me: &Executor<'_>, any_executor: bool) -> Result<u64, DbError> {
        let mut recovered = 0;
        for sql in self.buckets().iter() {
            let done = sql
                .query(RECOVER)
                .bind(me.executor_id)
                .bind(me.app_version)
                .bind(me.app_name)
                .bind(INTERNAL_QUEUE)
                .bind(now_ms())
                .bind(any_executor)
                .execute(&self.pool)
                .await?;
            recovered += done.rows_affected();
        }
        Ok(recovered)
    }

    async fn redispatch(
        &self,
        me: &Executor<'_>,
        queue: &str,
        with_direct: bool,
        running: &[String],
        decided_ms: i64,
    ) -> Result<Vec<Claimed>, DbError> {
        let mut taken = Vec::new();
        for (b, sql) in self.buckets().iter().enumerate() {
            let rows = sql
                .query(REDISPATCH)
                .bind(me.executor_id)
                .bind(me.app_version)
                .bind(queue)
                .bind(with_direct)
                .bind(now_ms())
                .bind(running)
                .bind(decided_ms)
                .bind(uuid::Uuid::new_v4().to_string())
                .fetch_all(&self.pool)
                .await?;
            for claimed in all(&rows, |r| Claimed::keyed_from_row(r, 0))? {
                self.shards.remember(&claimed.1.id, b as u16);
                taken.push(claimed);
            }
        }
        Ok(in_dispatch_order(taken))
    }

    async fn bump_attempts(&self, id: &str, owner: &str) -> Result<Option<i64>, DbError> {
        Ok(self
            .locate(id)
            .await?
            .query(BUMP_ATTEMPTS)
            .bind(id)
            .bind(owner)
            .bind(now_ms())
            .fetch_optional_scalar::<_, Option<i64>>(&self.pool)
            .await?
            .flatten())
    }

    async fn adopt_inputs(
        &self,
        id: &str,
        owner: &str,
        inputs: Option<&str>,
    ) -> Result<bool, DbError> {
        let adopted: i64 = self
            .locate(id)
            .await?
            .query(ADOPT_INPUTS)
            .bind(id)
            .bind(owner)
            .bind(inputs)
            .fetch_scalar(&self.pool)
            .await?;
        Ok(adopted > 0)
    }
}

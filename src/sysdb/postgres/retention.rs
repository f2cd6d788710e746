//! Garbage collection on Postgres: batches of one statement each, victims locked
//! `FOR UPDATE SKIP LOCKED` so executors collecting at once split the work.

use async_trait::async_trait;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::retention::{Collect, COLLECT_BATCH};

/// One batch: victims are finished rows created before $1, or outside the newest $2 finished
/// rows (by `created_at`, then id, so the cap keeps exactly $2); at most $3 of them.
const COLLECT: &str = r#"
WITH keep AS (
    SELECT workflow_uuid FROM {s}.workflow_status
    WHERE $2::int8 IS NOT NULL
      AND status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
    ORDER BY created_at DESC, workflow_uuid DESC
    LIMIT $2::int8
), victims AS (
    SELECT w.workflow_uuid FROM {s}.workflow_status w
    WHERE w.status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
      AND (($1::int8 IS NOT NULL AND w.created_at < $1::int8)
           OR ($2::int8 IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM keep k WHERE k.workflow_uuid = w.workflow_uuid)))
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), d_steps AS (
    DELETE FROM {s}.operation_outputs o USING victims v WHERE o.workflow_uuid = v.workflow_uuid
), d_input AS (
    DELETE FROM {s}.workflow_input i USING victims v WHERE i.workflow_uuid = v.workflow_uuid
), d_output AS (
    DELETE FROM {s}.workflow_output o USING victims v WHERE o.workflow_uuid = v.workflow_uuid
), d_status AS (
    DELETE FROM {s}.workflow_status w USING victims v WHERE w.workflow_uuid = v.workflow_uuid
    RETURNING 1
)
SELECT count(*) FROM d_status
"#;

#[async_trait]
impl Collect for Postgres {
    async fn garbage_collect(
        &self,
        older_than_ms: Option<i64>,
        keep_newest: Option<i64>,
    ) -> Result<u64, DbError> {
        if older_than_ms.is_none() && keep_newest.is_none() {
            return Ok(0);
        }
        let keep = keep_newest.map(|n| n.max(0));
        let mut total = 0u64;
        loop {
            let deleted: i64 = sqlx::query_scalar(self.sql.get(COLLECT))
                .bind(older_than_ms)
                .bind(keep)
                .bind(COLLECT_BATCH)
                .fetch_one(&self.pool)
                .await?;
            total += deleted.max(0) as u64;
            if deleted < COLLECT_BATCH {
                return Ok(total);
            }
        }
    }
}

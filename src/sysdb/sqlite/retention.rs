//! Garbage collection on SQLite: deletes finished workflows created before a cut-off or beyond
//! the newest N finished ones, with their steps, inputs and outputs (no foreign key on those;
//! events, streams and messages cascade). Never selects `PENDING`, `ENQUEUED` or `DELAYED` rows.
//! Each batch is its own write transaction, so a large collection never holds the writer long.

use async_trait::async_trait;

use super::{json_list, Sqlite};
use crate::error::DbError;
use crate::sysdb::retention::{Collect, COLLECT_BATCH as BATCH};

#[async_trait]
impl Collect for Sqlite {
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
            let mut tx = self.write().await?;
            let victims: Vec<String> = sqlx::query_scalar(VICTIMS)
                .bind(older_than_ms)
                .bind(keep)
                .bind(BATCH)
                .fetch_all(&mut *tx)
                .await?;
            let ids = json_list(&victims);
            for table in TABLES {
                let delete = format!(
                    "DELETE FROM {table} WHERE workflow_uuid IN (SELECT value FROM json_each(?1))"
                );
                sqlx::query(sqlx::AssertSqlSafe(delete))
                    .bind(&ids)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            total += victims.len() as u64;
            if (victims.len() as i64) < BATCH {
                return Ok(total);
            }
        }
    }
}

/// Victims: finished rows created before ?1, or outside the newest ?2 finished rows (by
/// `created_at`, then id, so the cap keeps exactly ?2); at most ?3 of them.
const VICTIMS: &str = r#"
SELECT w.workflow_uuid FROM workflow_status w
WHERE w.status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
  AND ((?1 IS NOT NULL AND w.created_at < ?1)
       OR (?2 IS NOT NULL AND w.workflow_uuid NOT IN (
           SELECT k.workflow_uuid FROM workflow_status k
           WHERE k.status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
           ORDER BY k.created_at DESC, k.workflow_uuid DESC
           LIMIT COALESCE(?2, 0))))
LIMIT CAST(?3 AS INTEGER)
"#;

/// The tables deleted from explicitly, children first.
const TABLES: [&str; 4] = [
    "operation_outputs",
    "workflow_input",
    "workflow_output",
    "workflow_status",
];

//! Cancellation on SQLite: marks a workflow (and, when asked, its descendants) `CANCELLED` in
//! one statement. No NOTIFY: the caller stops the cancelled workflows this process runs.

use async_trait::async_trait;
use sqlx::Row;

use super::Sqlite;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::cancel::{Cancelled, Cancels, HeldRun, LostRun};

/// Held runs (?1: a JSON array of `[id, owner]` pairs) whose row moved on, or whose workflow is
/// paused (reported as `PAUSED` while the row is still theirs, `sysdb::pauses`).
const LOST: &str = r#"
SELECT w.workflow_uuid, json_extract(r.value, '$[1]'),
       CASE WHEN w.status = 'PENDING' AND w.owner_xid IS json_extract(r.value, '$[1]')
            THEN 'PAUSED' ELSE w.status END
FROM json_each(?1) r
JOIN workflow_status w ON w.workflow_uuid = json_extract(r.value, '$[0]')
WHERE w.status <> 'PENDING' OR w.owner_xid IS NOT json_extract(r.value, '$[1]')
   OR EXISTS (SELECT 1 FROM stead_workflow_pauses p WHERE p.workflow_uuid = w.workflow_uuid)
"#;

const CANCEL: &str = r#"
WITH RECURSIVE tree(id) AS (
    SELECT ?1
    UNION
    SELECT w.workflow_uuid FROM workflow_status w JOIN tree t ON w.parent_workflow_id = t.id
    WHERE ?2
)
UPDATE workflow_status
SET status = 'CANCELLED', queue_name = NULL, deduplication_id = NULL, owner_xid = NULL,
    started_at_epoch_ms = NULL, updated_at = ?3, completed_at = ?3
WHERE workflow_uuid IN (SELECT id FROM tree)
  AND status NOT IN ('SUCCESS', 'ERROR')
RETURNING workflow_uuid
"#;

#[async_trait]
impl Cancels for Sqlite {
    async fn cancel(&self, id: &str, cascade: bool) -> Result<Cancelled, DbError> {
        let mut tx = self.write().await?;
        let exists = sqlx::query("SELECT 1 FROM workflow_status WHERE workflow_uuid = ?1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        let rows = sqlx::query(CANCEL)
            .bind(id)
            .bind(cascade)
            .bind(now_ms())
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Cancelled {
            exists,
            ids: rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?,
        })
    }

    async fn lost_runs(&self, runs: &[HeldRun]) -> Result<Vec<LostRun>, DbError> {
        let pairs: Vec<[&str; 2]> = runs.iter().map(|r| [&*r.id, &*r.owner]).collect();
        let pairs = serde_json::to_string(&pairs).map_err(|e| DbError::Query(e.to_string()))?;
        let rows = sqlx::query(LOST)
            .bind(pairs)
            .fetch_all(self.reader())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(LostRun {
                    id: r.try_get(0)?,
                    owner: r.try_get(1)?,
                    status: r.try_get(2)?,
                })
            })
            .collect()
    }
}

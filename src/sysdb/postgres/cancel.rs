//! Cancellation on Postgres: one statement marks the workflow (and, when asked, its
//! descendants) `CANCELLED` and announces each on `stead_cancel_channel`.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::cancel::{Cancelled, Cancels};

const CANCEL: &str = r#"
WITH RECURSIVE tree AS (
    SELECT $1::text AS id
    UNION
    SELECT w.workflow_uuid FROM {s}.workflow_status w JOIN tree t ON w.parent_workflow_id = t.id
    WHERE $2
), done AS (
    UPDATE {s}.workflow_status w
    SET status = 'CANCELLED', queue_name = NULL, deduplication_id = NULL, owner_xid = NULL,
        updated_at = $3
    FROM tree
    WHERE w.workflow_uuid = tree.id AND w.status NOT IN ('SUCCESS', 'ERROR', 'CANCELLED')
    RETURNING w.workflow_uuid
), note AS (
    SELECT pg_notify('stead_cancel_channel', workflow_uuid) FROM done
)
SELECT (SELECT count(*) FROM {s}.workflow_status WHERE workflow_uuid = $1),
       (SELECT count(*) FROM note),
       d.workflow_uuid
FROM (SELECT 1) one LEFT JOIN done d ON true
"#;

#[async_trait]
impl Cancels for Postgres {
    async fn cancel(&self, id: &str, cascade: bool) -> Result<Cancelled, DbError> {
        let rows = sqlx::query(self.sql.get(CANCEL))
            .bind(id)
            .bind(cascade)
            .bind(now_ms())
            .fetch_all(&self.pool)
            .await?;
        let mut out = Cancelled {
            exists: false,
            ids: Vec::new(),
        };
        for row in rows {
            out.exists = row.try_get::<i64, _>(0)? > 0;
            if let Some(id) = row.try_get::<Option<String>, _>(2)? {
                out.ids.push(id);
            }
        }
        Ok(out)
    }
}

//! Cancellation: marks a workflow (and, when asked, its descendants) `CANCELLED` and announces
//! it on `stead_cancel_channel`, so the executor running it stops before its next durable call.

use sqlx::{PgPool, Row};

use super::{now_ms, Sql};
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;

/// The channel a cancel is announced on; the payload is the workflow id.
pub(crate) const CANCEL_CHANNEL: &str = "stead_cancel_channel";

pub(super) const CANCEL: &str = r#"
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

/// What a cancel found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cancelled {
    /// Whether the workflow exists at all.
    pub exists: bool,
    /// The workflows this cancel moved to `CANCELLED` (already final ones are left alone).
    pub ids: Vec<String>,
}

/// Cancels `id`, and every descendant when `cascade`.
pub(crate) async fn cancel(db: &SysDb, id: &str, cascade: bool) -> Result<Cancelled, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => cancel_pg(pool, &db.sql, id, cascade).await,
        Backend::Sqlite(lite) => sqlite::cancel::cancel(lite, id, cascade).await,
    }
}

async fn cancel_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    cascade: bool,
) -> Result<Cancelled, DbError> {
    let rows = sqlx::query(sql.cancel.clone())
        .bind(id)
        .bind(cascade)
        .bind(now_ms())
        .fetch_all(pool)
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

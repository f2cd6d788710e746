//! Cancellation on Postgres: one statement marks the workflow (and, when asked, its
//! descendants) `CANCELLED` and announces each on `stead_cancel_channel`.

use async_trait::async_trait;
use sqlx::Row;

use super::route;
use super::sql::Sql;
use super::Postgres;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::cancel::{Cancelled, Cancels, HeldRun, LostRun};

/// Held runs ($1 ids, $2 owner tokens) whose row moved on, or whose workflow is paused (reported
/// as `PAUSED` while the row is still theirs, `sysdb::pauses`): by primary keys only.
const LOST: &str = r#"
SELECT w.workflow_uuid, r.owner,
       CASE WHEN w.status = 'PENDING' AND w.owner_xid = r.owner THEN 'PAUSED' ELSE w.status END
FROM UNNEST($1::text[], $2::text[]) AS r(id, owner)
JOIN {s}.workflow_status w ON w.workflow_uuid = r.id
WHERE w.status <> 'PENDING' OR w.owner_xid IS DISTINCT FROM r.owner
   OR EXISTS (SELECT 1 FROM {s}.stead_workflow_pauses p WHERE p.workflow_uuid = r.id)
"#;

const CANCEL: &str = r#"
WITH RECURSIVE tree AS (
    SELECT $1::text AS id
    UNION
    SELECT w.workflow_uuid FROM {s}.workflow_status w JOIN tree t ON w.parent_workflow_id = t.id
    WHERE $2
), done AS (
    UPDATE {s}.workflow_status w
    SET status = 'CANCELLED', queue_name = NULL, deduplication_id = NULL, owner_xid = NULL,
        started_at_epoch_ms = NULL, updated_at = $3, completed_at = $3
    FROM tree
    WHERE w.workflow_uuid = tree.id AND w.status NOT IN ('SUCCESS', 'ERROR')
    RETURNING w.workflow_uuid
), note AS (
    SELECT pg_notify('stead_cancel_channel', json_build_array(workflow_uuid)::text)::text FROM done
)
SELECT (SELECT count(*) FROM {s}.workflow_status WHERE workflow_uuid = $1),
       (SELECT count(*) FROM note),
       d.workflow_uuid
FROM (SELECT 1) one LEFT JOIN done d ON true
"#;

#[async_trait]
impl Cancels for Postgres {
    /// On a sharded layout a tree spans buckets: its workflows are found first, then each is
    /// cancelled where it lives.
    async fn cancel(&self, id: &str, cascade: bool) -> Result<Cancelled, DbError> {
        if !(cascade && self.shards.sharded()) {
            return self.cancel_in(&*self.locate(id).await?, id, cascade).await;
        }
        let tree = self.descendants(id).await?;
        let mut out = self.cancel_in(&*self.locate(id).await?, id, false).await?;
        for child in &tree[1..] {
            let done = self
                .cancel_in(&*self.locate(child).await?, child, false)
                .await?;
            out.ids.extend(done.ids);
        }
        Ok(out)
    }

    async fn lost_runs(&self, runs: &[HeldRun]) -> Result<Vec<LostRun>, DbError> {
        let router = self.router();
        let buckets = router
            .locate_all(runs.iter().map(|r| r.id.as_str()))
            .await?;
        let mut lost = Vec::new();
        for (b, _, group) in route::split_by(&runs.iter().collect::<Vec<_>>(), &buckets) {
            lost.extend(self.lost_in(&self.shards.bucket(b), &group).await?);
        }
        Ok(lost)
    }
}

impl Postgres {
    async fn cancel_in(&self, sql: &Sql, id: &str, cascade: bool) -> Result<Cancelled, DbError> {
        let rows = sql
            .query(CANCEL)
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

    async fn lost_in(&self, sql: &Sql, runs: &[&HeldRun]) -> Result<Vec<LostRun>, DbError> {
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        let owners: Vec<&str> = runs.iter().map(|r| r.owner.as_str()).collect();
        let rows = sql
            .query(LOST)
            .bind(ids)
            .bind(owners)
            .fetch_all(&self.pool)
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

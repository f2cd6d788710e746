//! Continue-as-new on Postgres: one transaction that finishes the old run with the marker,
//! creates the next run from the old row, links them and announces an enqueued next run
//! (`sysdb::continuations` for the rules).

use async_trait::async_trait;
use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::Postgres;
use crate::base::continuation::{marker, next_id};
use crate::error::DbError;
use crate::sysdb::continuations::{place_in_chain, runs_here, Continuations};
use crate::sysdb::{ContinueOutcome, ContinueWrite, Continued};

const PREVIOUS: &str = "SELECT root_id, generation FROM {s}.stead_continuations WHERE to_id = $1";

/// The next run an earlier attempt of this continuation made, if one did.
const MADE: &str = r#"
SELECT l.to_id, w.queue_name, w.workflow_deadline_epoch_ms, w.attributes::text
FROM {s}.stead_continuations l JOIN {s}.workflow_status w ON w.workflow_uuid = l.to_id
WHERE l.from_id = $1
"#;

const EXISTS: &str = "SELECT 1 FROM {s}.workflow_status WHERE workflow_uuid = $1";

/// The old run's end, as any success (`sysdb::finish`), with the marker as its output.
const FINISH: &str = r#"
UPDATE {s}.workflow_status
SET status = 'SUCCESS', owner_xid = NULL, deduplication_id = NULL, completed_at = $3,
    updated_at = $3, output = $4, error = NULL
WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2
RETURNING queue_name
"#;

/// A payload row an earlier run left (DBOS writes one) would shadow the marker.
const OUTPUT: &str =
    "UPDATE {s}.workflow_output SET output = $2, error = NULL WHERE workflow_uuid = $1";

/// The next run, copied from the old row: `$3` says whether it runs here at once.
const CREATE: &str = r#"
INSERT INTO {s}.workflow_status (
    workflow_uuid, status, name, class_name, config_name, queue_name, owner_xid, executor_id,
    application_version, application_name, authenticated_user, assumed_role,
    authenticated_roles, serialization, recovery_attempts, priority, queue_partition_key,
    created_at, updated_at, started_at_epoch_ms, workflow_timeout_ms,
    workflow_deadline_epoch_ms, parent_workflow_id, attributes, inputs)
SELECT $2, CASE WHEN $3 THEN 'PENDING' ELSE 'ENQUEUED' END, name, class_name, config_name,
    CASE WHEN $3 THEN NULL ELSE queue_name END, CASE WHEN $3 THEN $4 END,
    CASE WHEN $3 THEN $5 END, application_version, application_name, authenticated_user,
    assumed_role, authenticated_roles, 'portable_json', CASE WHEN $3 THEN 1 ELSE 0 END,
    priority, queue_partition_key, $6, $7, CASE WHEN $3 THEN $7 END, workflow_timeout_ms,
    CASE WHEN $3 THEN $7 + workflow_timeout_ms END, parent_workflow_id, attributes, $8
FROM {s}.workflow_status WHERE workflow_uuid = $1
RETURNING queue_name, workflow_deadline_epoch_ms, attributes::text
"#;

const LINK: &str = "INSERT INTO {s}.stead_continuations \
    (from_id, to_id, root_id, generation, created_at) VALUES ($1, $2, $3, $4, $5)";

const STATUS: &str = "SELECT status FROM {s}.workflow_status WHERE workflow_uuid = $1";

#[async_trait]
impl Continuations for Postgres {
    async fn continue_as_new(&self, w: &ContinueWrite) -> Result<ContinueOutcome, DbError> {
        let mut tx = self.pool.begin().await?;
        let outcome = self.continue_in(&mut tx, w).await?;
        if matches!(outcome, ContinueOutcome::Continued(_)) {
            tx.commit().await?;
        }
        Ok(outcome)
    }
}

impl Postgres {
    async fn continue_in(
        &self,
        tx: &mut PgConnection,
        w: &ContinueWrite,
    ) -> Result<ContinueOutcome, DbError> {
        let bucket = self.router().locate(&w.workflow_id).await?;
        let at = self.shards.bucket(bucket);
        let id = &w.workflow_id;
        if let Some(row) = at.query(MADE).bind(id).fetch_optional(&mut *tx).await? {
            return Ok(ContinueOutcome::Continued(Continued::from_row(
                row.try_get(0)?,
                &row,
                1,
            )?));
        }
        let previous = at.query(PREVIOUS).bind(id).fetch_optional(&mut *tx).await?;
        let previous = match previous {
            Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
            None => None,
        };
        let (root, generation) = place_in_chain(id, previous);
        let next = next_id(&root, generation);
        // The next run's id may be taken in another bucket (by a workflow under another key).
        if self.shards.sharded() {
            let found = self.router().find(&next).await?;
            if found.is_some_and(|b| b != bucket) {
                return Ok(ContinueOutcome::Exists(next));
            }
        }
        if at
            .query(EXISTS)
            .bind(&next)
            .fetch_optional(&mut *tx)
            .await?
            .is_some()
        {
            return Ok(ContinueOutcome::Exists(next));
        }
        let output = marker(&next);
        let finished = at
            .query(FINISH)
            .bind(id)
            .bind(&w.owner)
            .bind(w.now)
            .bind(&output)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(finished) = finished else {
            let status = at.query(STATUS).bind(id).fetch_optional(&mut *tx).await?;
            let status: Option<String> = status.map(|r| r.try_get(0)).transpose()?.flatten();
            return Ok(ContinueOutcome::refused(status.as_deref()));
        };
        let queue: Option<String> = finished.try_get(0)?;
        let here = runs_here(queue.as_deref());
        at.query(OUTPUT)
            .bind(id)
            .bind(&output)
            .execute(&mut *tx)
            .await?;
        let made = at
            .query(CREATE)
            .bind(id)
            .bind(&next)
            .bind(here)
            .bind(&w.next_owner)
            .bind(&w.executor_id)
            .bind(w.created_at)
            .bind(w.now)
            .bind(&w.inputs)
            .fetch_one(&mut *tx)
            .await?;
        at.query(LINK)
            .bind(id)
            .bind(&next)
            .bind(&root)
            .bind(generation)
            .bind(w.now)
            .execute(&mut *tx)
            .await?;
        // The next run lives where its chain does.
        self.shards.remember(&next, bucket);
        let made = Continued::from_row(next, &made, 0)?;
        if let Some(queue) = &made.queue {
            at.query("SELECT pg_notify('stead_queue_channel', $1)::text")
                .bind(queue)
                .execute(&mut *tx)
                .await?;
        }
        Ok(ContinueOutcome::Continued(made))
    }
}

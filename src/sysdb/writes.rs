//! Batched writes: step checkpoints, workflow outcomes, and the batched read of recorded steps
//! (starts and enqueues are in `start`). Each batch is one statement (and so one commit) however many rows it carries;
//! rows are passed as arrays and expanded with `UNNEST`.
//!
//! Every write is idempotent, so the database actor may resend a batch after a connection loss:
//! a retried row that already committed is recognised, not written twice.

use std::collections::HashMap;

use futures::future::BoxFuture;
use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::reads::StepRow;
use super::{now_ms, Sql};
use crate::error::DbError;

/// A kind of request the database actor batches: many go out as one statement on a connection
/// the actor keeps for that kind.
pub(crate) trait BatchWrite: Send + Sync + 'static {
    /// What each caller gets back.
    type Out: Send + 'static;
    /// Lane name, for metrics and logs.
    const LANE: &'static str;
    /// The most requests one flush carries.
    const MAX_BATCH: usize = usize::MAX;
    /// Runs the whole batch; the result has one entry per request, in order.
    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<Self::Out>, DbError>>
    where
        Self: Sized;
}

// ---------------------------------------------------------------------------------------------
// Step checkpoints

/// One step's outcome to record, valid only while the workflow is `PENDING` under `owner`.
#[derive(Debug, Clone)]
pub(crate) struct StepWrite {
    pub workflow_id: String,
    pub owner: String,
    pub function_id: u32,
    pub name: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub started_at: i64,
    pub completed_at: i64,
    pub app_name: Option<String>,
}

/// What recording a step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StepOutcome {
    /// Our row is committed.
    Recorded,
    /// A row for this step already existed (our earlier attempt, or a competing execution):
    /// its values are authoritative.
    AlreadyRecorded {
        output: Option<String>,
        error: Option<String>,
    },
    /// The workflow was cancelled; nothing was written.
    Cancelled,
    /// The workflow is no longer `PENDING` under this owner; nothing was written.
    NotOwner,
}

pub(super) const RECORD_STEPS: &str = r#"
INSERT INTO {s}.operation_outputs AS o (
    workflow_uuid, function_id, function_name, output, error, child_workflow_id,
    started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name)
SELECT r.id, r.fid, r.name, r.output, r.error, r.child, r.started, r.completed,
    'portable_json', r.app
FROM UNNEST($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::int8[], $8::int8[], $9::text[], $10::text[])
    AS r(id, fid, name, output, error, child, started, completed, app, owner)
CROSS JOIN LATERAL (
    -- LIMIT keeps the status checks out of the lookup: one primary-key probe per row.
    SELECT status, owner_xid FROM {s}.workflow_status w WHERE w.workflow_uuid = r.id LIMIT 1
) w
WHERE w.status = 'PENDING' AND w.owner_xid = r.owner
ON CONFLICT (workflow_uuid, function_id) DO NOTHING
RETURNING o.workflow_uuid, o.function_id
"#;

pub(super) const CLASSIFY_STEPS: &str = r#"
SELECT r.id, r.fid, o.function_name, o.output, o.error, w.status
FROM UNNEST($1::text[], $2::int4[]) WITH ORDINALITY AS r(id, fid, n)
LEFT JOIN {s}.operation_outputs o ON o.workflow_uuid = r.id AND o.function_id = r.fid
LEFT JOIN {s}.workflow_status w ON w.workflow_uuid = r.id
ORDER BY r.n
"#;

impl BatchWrite for StepWrite {
    type Out = StepOutcome;
    const LANE: &'static str = "checkpoint";

    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<StepOutcome>, DbError>> {
        Box::pin(async move {
            let ids: Vec<&str> = batch.iter().map(|s| s.workflow_id.as_str()).collect();
            let fids: Vec<i32> = batch.iter().map(|s| s.function_id as i32).collect();
            let written = sqlx::query(sql.record_steps.clone())
                .bind(&ids)
                .bind(&fids)
                .bind(batch.iter().map(|s| s.name.as_str()).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|s| s.output.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(batch.iter().map(|s| s.error.as_deref()).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|s| s.child_workflow_id.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(batch.iter().map(|s| s.started_at).collect::<Vec<_>>())
                .bind(batch.iter().map(|s| s.completed_at).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|s| s.app_name.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(batch.iter().map(|s| s.owner.as_str()).collect::<Vec<_>>())
                .fetch_all(&mut *conn)
                .await?;
            let mut outcomes = vec![StepOutcome::Recorded; batch.len()];
            if written.len() == batch.len() {
                return Ok(outcomes);
            }
            let mut done = std::collections::HashSet::with_capacity(written.len());
            for row in written {
                done.insert((row.try_get::<String, _>(0)?, row.try_get::<i32, _>(1)?));
            }
            // The rare path: find out why the missing rows were not written.
            let missing: Vec<usize> = (0..batch.len())
                .filter(|&i| !done.contains(&(ids[i].to_owned(), fids[i])))
                .collect();
            let rows = sqlx::query(sql.classify_steps.clone())
                .bind(missing.iter().map(|&i| ids[i]).collect::<Vec<_>>())
                .bind(missing.iter().map(|&i| fids[i]).collect::<Vec<_>>())
                .fetch_all(&mut *conn)
                .await?;
            for (&i, row) in missing.iter().zip(rows) {
                let recorded_name: Option<String> = row.try_get(2)?;
                let status: Option<String> = row.try_get(5)?;
                outcomes[i] = match recorded_name {
                    Some(name) if name == batch[i].name => StepOutcome::AlreadyRecorded {
                        output: row.try_get(3)?,
                        error: row.try_get(4)?,
                    },
                    _ if status.as_deref() == Some("CANCELLED") => StepOutcome::Cancelled,
                    _ => StepOutcome::NotOwner,
                };
            }
            Ok(outcomes)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Workflow outcomes

/// A workflow's final status and payload, valid only while it is `PENDING` under `owner`.
#[derive(Debug, Clone)]
pub(crate) struct FinishWrite {
    pub workflow_id: String,
    pub owner: String,
    /// `SUCCESS`, `ERROR` or `MAX_RECOVERY_ATTEMPTS_EXCEEDED`.
    pub status: &'static str,
    pub output: Option<String>,
    pub error: Option<String>,
}

/// What finishing a workflow found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FinishOutcome {
    /// Our outcome is committed (now, or by an earlier attempt of this same write).
    Finished,
    /// The workflow was cancelled meanwhile.
    Cancelled,
    /// Another execution owns the workflow now.
    NotOwner,
}

pub(super) const FINISH: &str = r#"
WITH r AS (
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
        AS r(id, owner, status, output, error)
), upd AS (
    UPDATE {s}.workflow_status w
    SET status = r.status, owner_xid = NULL, deduplication_id = NULL,
        completed_at = $6, updated_at = $6
    FROM r
    -- Not `status = 'PENDING'`: that would let the partial index of PENDING rows drive the
    -- join, a scan of every running workflow per batch. This form leaves only the primary key.
    WHERE w.workflow_uuid = r.id AND w.status IS NOT DISTINCT FROM 'PENDING'
      AND w.owner_xid = r.owner
    RETURNING w.workflow_uuid
), out AS (
    INSERT INTO {s}.workflow_output (workflow_uuid, output, error, retention_timestamp)
    SELECT r.id, r.output, r.error, $6 FROM r JOIN upd ON upd.workflow_uuid = r.id
    WHERE r.status <> 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
    ON CONFLICT (workflow_uuid) DO UPDATE SET output = EXCLUDED.output, error = EXCLUDED.error
)
SELECT workflow_uuid FROM upd
"#;

pub(super) const CLASSIFY_FINISH: &str = r#"
SELECT workflow_uuid, status FROM {s}.workflow_status WHERE workflow_uuid = ANY($1::text[])
"#;

impl BatchWrite for FinishWrite {
    type Out = FinishOutcome;
    const LANE: &'static str = "finish";

    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<FinishOutcome>, DbError>> {
        Box::pin(async move {
            let ids: Vec<&str> = batch.iter().map(|f| f.workflow_id.as_str()).collect();
            let updated: Vec<String> = sqlx::query_scalar(sql.finish.clone())
                .bind(&ids)
                .bind(batch.iter().map(|f| f.owner.as_str()).collect::<Vec<_>>())
                .bind(batch.iter().map(|f| f.status).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|f| f.output.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(batch.iter().map(|f| f.error.as_deref()).collect::<Vec<_>>())
                .bind(now_ms())
                .fetch_all(&mut *conn)
                .await?;
            if updated.len() == batch.len() {
                return Ok(vec![FinishOutcome::Finished; batch.len()]);
            }
            let updated: std::collections::HashSet<String> = updated.into_iter().collect();
            let missing: Vec<&str> = ids
                .iter()
                .copied()
                .filter(|id| !updated.contains(*id))
                .collect();
            let status: HashMap<String, Option<String>> = sqlx::query(sql.classify_finish.clone())
                .bind(&missing)
                .fetch_all(&mut *conn)
                .await?
                .into_iter()
                .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                .collect::<Result<_, sqlx::Error>>()?;
            Ok(batch
                .iter()
                .map(|f| {
                    if updated.contains(&f.workflow_id) {
                        return FinishOutcome::Finished;
                    }
                    match status.get(&f.workflow_id).cloned().flatten().as_deref() {
                        Some("CANCELLED") => FinishOutcome::Cancelled,
                        // Already final with no owner: an earlier attempt of this write landed
                        // before the connection dropped.
                        Some(s) if s == f.status => FinishOutcome::Finished,
                        _ => FinishOutcome::NotOwner,
                    }
                })
                .collect())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Recorded steps (a read, batched like the writes because recovery asks for many at once)

/// A request for one workflow's recorded steps.
#[derive(Debug, Clone)]
pub(crate) struct LoadSteps(pub String);

impl BatchWrite for LoadSteps {
    type Out = Vec<StepRow>;
    const LANE: &'static str = "load_steps";

    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<Vec<StepRow>>, DbError>> {
        Box::pin(async move {
            let ids: Vec<&str> = batch.iter().map(|l| l.0.as_str()).collect();
            let mut by_id: HashMap<String, Vec<StepRow>> = HashMap::new();
            for row in sqlx::query(sql.load_steps.clone())
                .bind(&ids)
                .fetch_all(&mut *conn)
                .await?
            {
                let step = StepRow::from_row(&row)?;
                by_id
                    .entry(step.workflow_id.clone())
                    .or_default()
                    .push(step);
            }
            Ok(batch
                .iter()
                .map(|l| by_id.get(&l.0).cloned().unwrap_or_default())
                .collect())
        })
    }
}

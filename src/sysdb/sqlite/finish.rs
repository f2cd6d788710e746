//! Workflow outcomes on SQLite: the final status with the payload (after the held-back last step
//! some carry), applied only while the workflow is `PENDING` under the writer's owner token.

use sqlx::sqlite::SqliteConnection;

use super::steps;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::{FinishOutcome, FinishWrite, StepOutcome};

/// Finishes the batch; one outcome per request, in order.
pub(super) async fn run(
    tx: &mut SqliteConnection,
    batch: &[&FinishWrite],
) -> Result<Vec<FinishOutcome>, DbError> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for f in batch {
        outcomes.push(finish_one(tx, f).await?);
    }
    Ok(outcomes)
}

async fn finish_one(tx: &mut SqliteConnection, f: &FinishWrite) -> Result<FinishOutcome, DbError> {
    if let Some(step) = &f.step {
        // Recorded first, in the same transaction; a record of another attempt stops the finish.
        if let Some(StepOutcome::AlreadyRecorded { .. }) = steps::record(tx, &[step]).await?.pop() {
            return Ok(FinishOutcome::StepConflict);
        }
    }
    let now = now_ms();
    let updated = sqlx::query(
        "UPDATE workflow_status SET status = ?3, owner_xid = NULL, deduplication_id = NULL, \
             completed_at = ?4, updated_at = ?4, \
             output = CASE WHEN ?5 THEN ?6 ELSE output END, \
             error = CASE WHEN ?5 THEN ?7 ELSE error END, \
             started_at_epoch_ms = CASE WHEN ?3 = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' \
                 THEN NULL ELSE started_at_epoch_ms END, \
             queue_name = CASE WHEN ?3 = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' \
                 THEN NULL ELSE queue_name END \
         WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2",
    )
    .bind(&f.workflow_id)
    .bind(&f.owner)
    .bind(f.status)
    .bind(now)
    .bind(f.has_output())
    .bind(&f.output)
    .bind(&f.error)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if updated {
        if f.has_output() {
            // A payload row an earlier run left (DBOS writes one) would shadow the new outcome.
            sqlx::query(
                "UPDATE workflow_output SET output = ?2, error = ?3 WHERE workflow_uuid = ?1",
            )
            .bind(&f.workflow_id)
            .bind(&f.output)
            .bind(&f.error)
            .execute(&mut *tx)
            .await?;
        }
        return Ok(FinishOutcome::Finished);
    }
    let status: Option<Option<String>> =
        sqlx::query_scalar("SELECT status FROM workflow_status WHERE workflow_uuid = ?1")
            .bind(&f.workflow_id)
            .fetch_optional(&mut *tx)
            .await?;
    Ok(match status.flatten().as_deref() {
        Some("CANCELLED") => FinishOutcome::Cancelled,
        Some(s) if s == f.status => FinishOutcome::Finished,
        _ => FinishOutcome::NotOwner,
    })
}

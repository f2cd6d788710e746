//! Creating workflow rows on SQLite: one insert per request inside the flush's transaction, so
//! a later request of the batch sees an earlier one's row, and a signal-with-start's message
//! commits with its row.

use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

use super::ops;
use crate::base::codec::PORTABLE_JSON;
use crate::error::DbError;
use crate::sysdb::{NewWorkflow, StartOutcome};

const INSERT: &str = r#"
INSERT INTO workflow_status (
    workflow_uuid, status, name, owner_xid, executor_id, application_version, application_name,
    queue_name, priority, deduplication_id, queue_partition_key, delay_until_epoch_ms,
    recovery_attempts, serialization, created_at, updated_at, started_at_epoch_ms,
    workflow_timeout_ms, workflow_deadline_epoch_ms, parent_workflow_id, attributes, inputs)
VALUES (?1, ?2, ?3, ?4, CASE WHEN ?4 IS NOT NULL THEN ?5 END, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
    CASE WHEN ?4 IS NOT NULL THEN 1 ELSE 0 END, ?13, ?14, ?14,
    CASE WHEN ?4 IS NOT NULL THEN ?14 END, ?15, ?16, ?17, ?18, ?19)
ON CONFLICT DO NOTHING
"#;

/// Creates the batch's rows; one outcome per request, in order.
pub(super) async fn run(
    tx: &mut SqliteConnection,
    batch: &[&NewWorkflow],
) -> Result<Vec<StartOutcome>, DbError> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for w in batch {
        let outcome = start_one(tx, w).await?;
        // Signal-with-start: the message goes in the start's transaction.
        if let (true, Some(m)) = (w.delivers_message(&outcome), &w.message) {
            ops::insert_message(tx, m).await?;
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

async fn start_one(tx: &mut SqliteConnection, w: &NewWorkflow) -> Result<StartOutcome, DbError> {
    let created = w.created_at;
    let inserted = sqlx::query(INSERT)
        .bind(&w.id)
        .bind(w.status())
        .bind(&w.name)
        .bind(&w.owner)
        .bind(&w.executor_id)
        .bind(&w.app_version)
        .bind(&w.app_name)
        .bind(&w.queue)
        .bind(w.priority)
        .bind(&w.dedup_id)
        .bind(&w.partition_key)
        .bind(w.delay_until)
        .bind(PORTABLE_JSON)
        .bind(created)
        .bind(w.timeout_ms)
        .bind(w.deadline)
        .bind(&w.parent)
        .bind(&w.attributes)
        .bind(&w.inputs)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1;
    if inserted {
        return Ok(StartOutcome::Created);
    }
    let existing =
        sqlx::query("SELECT name, status, owner_xid FROM workflow_status WHERE workflow_uuid = ?1")
            .bind(&w.id)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(row) = existing {
        let owner: Option<String> = row.try_get(2)?;
        if w.owner.is_some() && owner == w.owner {
            return Ok(StartOutcome::Created);
        }
        return Ok(StartOutcome::Existing {
            name: row.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
            status: row.try_get::<Option<String>, _>(1)?.unwrap_or_default(),
        });
    }
    let holder: Option<String> = sqlx::query_scalar(
        "SELECT workflow_uuid FROM workflow_status WHERE queue_name = ?1 AND deduplication_id = ?2",
    )
    .bind(&w.queue)
    .bind(&w.dedup_id)
    .fetch_optional(&mut *tx)
    .await?;
    holder
        .map(|holder| StartOutcome::Duplicate { holder })
        .ok_or_else(|| DbError::Query(format!("start of {} found nothing", w.id)))
}

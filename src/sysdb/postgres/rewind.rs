//! Rewinding a finished workflow on Postgres: one transaction of the statements below.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::rewind::{is_active, Rewind, Rewinds, Rewound, STREAM_CLOSED};

const STATUS: &str = "SELECT status FROM {s}.workflow_status WHERE workflow_uuid = $1 FOR UPDATE";

/// Events published at or past the cut go; those published before it come back from the
/// history (DBOS's undo log), then the history and checkpoints past the cut go.
const DROP_EVENTS: &str = r#"
DELETE FROM {s}.workflow_events e WHERE e.workflow_uuid = $1 AND EXISTS (
    SELECT 1 FROM {s}.workflow_events_history d
    WHERE d.workflow_uuid = $1 AND d.key = e.key AND d.function_id >= $2)
"#;

const RESTORE_EVENTS: &str = r#"
INSERT INTO {s}.workflow_events (workflow_uuid, key, value, serialization)
SELECT workflow_uuid, key, value, serialization FROM (
    SELECT h.workflow_uuid, h.key, h.value, h.serialization,
           row_number() OVER (PARTITION BY h.key ORDER BY h.function_id DESC) AS rn
    FROM {s}.workflow_events_history h
    WHERE h.workflow_uuid = $1 AND h.function_id < $2 AND EXISTS (
        SELECT 1 FROM {s}.workflow_events_history d
        WHERE d.workflow_uuid = $1 AND d.key = h.key AND d.function_id >= $2)
) s WHERE rn = 1
"#;

const DROP_CLOSE: &str = "DELETE FROM {s}.streams WHERE workflow_uuid = $1 AND function_id >= $2 \
     AND value = $3 AND serialization = 'portable_json'";
const DROP_STEPS: &str =
    "DELETE FROM {s}.operation_outputs WHERE workflow_uuid = $1 AND function_id >= $2";
const DROP_HISTORY: &str =
    "DELETE FROM {s}.workflow_events_history WHERE workflow_uuid = $1 AND function_id >= $2";
const DROP_MESSAGES: &str = "DELETE FROM {s}.notifications WHERE destination_uuid = $1 \
     AND (consumed_by_function_id >= $2 OR consumed = false)";
const DROP_OUTPUT: &str = "DELETE FROM {s}.workflow_output WHERE workflow_uuid = $1";

const REQUEUE: &str = r#"
UPDATE {s}.workflow_status
SET status = 'ENQUEUED', owner_xid = NULL, application_version = COALESCE($3, application_version),
    queue_name = $4, queue_partition_key = NULL, recovery_attempts = 0,
    workflow_deadline_epoch_ms = NULL, deduplication_id = NULL, started_at_epoch_ms = NULL,
    updated_at = $5, completed_at = NULL, output = NULL, error = NULL
WHERE workflow_uuid = $1 AND status = $2
"#;

#[async_trait]
impl Rewinds for Postgres {
    async fn rewind(&self, r: &Rewind) -> Result<Rewound, DbError> {
        let at = self.locate(&r.id).await?;
        let mut tx = self.pool.begin().await?;
        let Some(row) = at
            .query(STATUS)
            .bind(&r.id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(Rewound::NotFound);
        };
        let status: String = row.try_get(0)?;
        if is_active(&status) {
            return Ok(Rewound::Active { status });
        }
        let step = i32::try_from(r.from_step).unwrap_or(i32::MAX);
        for statement in [DROP_EVENTS, RESTORE_EVENTS] {
            at.query(statement)
                .bind(&r.id)
                .bind(step)
                .execute(&mut *tx)
                .await?;
        }
        at.query(DROP_CLOSE)
            .bind(&r.id)
            .bind(step)
            .bind(STREAM_CLOSED)
            .execute(&mut *tx)
            .await?;
        for statement in [DROP_STEPS, DROP_HISTORY, DROP_MESSAGES] {
            at.query(statement)
                .bind(&r.id)
                .bind(step)
                .execute(&mut *tx)
                .await?;
        }
        at.query(DROP_OUTPUT).bind(&r.id).execute(&mut *tx).await?;
        at.query(REQUEUE)
            .bind(&r.id)
            .bind(&status)
            .bind(&r.app_version)
            .bind(&r.queue)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        at.query("SELECT pg_notify('stead_queue_channel', $1)::text")
            .bind(&r.queue)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Rewound::Requeued)
    }
}

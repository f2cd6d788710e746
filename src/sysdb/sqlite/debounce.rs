//! Debouncing on SQLite, in one write transaction: push back the `DELAYED` debounced workflow
//! that holds the key (its new delay capped at its debounce deadline) and replace its input, or,
//! when none holds it, create one. The one writer orders concurrent callers; the unique index on
//! `(queue_name, deduplication_id)` still decides between the key and the chosen id.

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

use super::Sqlite;
use crate::base::codec::PORTABLE_JSON;
use crate::error::DbError;
use crate::sysdb::debounce::Debounce;
use crate::sysdb::{Bounce, Bounced};

const BOUNCE: &str = r#"
UPDATE workflow_status
SET delay_until_epoch_ms = CASE
        WHEN debounce_deadline_epoch_ms IS NOT NULL AND debounce_deadline_epoch_ms < ?4
        THEN debounce_deadline_epoch_ms ELSE ?4 END,
    updated_at = ?6,
    application_name = COALESCE(application_name, ?5)
WHERE queue_name = ?2 AND deduplication_id = ?3 AND name = ?1
  AND status = 'DELAYED' AND is_debounced
  AND (application_name = ?5 OR application_name IS NULL)
RETURNING workflow_uuid
"#;

const FRESH: &str = r#"
INSERT INTO workflow_status (
    workflow_uuid, status, name, queue_name, deduplication_id, delay_until_epoch_ms,
    debounce_deadline_epoch_ms, is_debounced, application_version, application_name,
    serialization, created_at, updated_at, recovery_attempts, priority, workflow_timeout_ms)
VALUES (?1, 'DELAYED', ?2, ?3, ?4, min(?5, COALESCE(?6, ?5)), ?6, 1, ?7, ?8, ?9, ?10, ?10, 0, 0,
    ?11)
-- Either key: the id, or the debounce key another caller took.
ON CONFLICT DO NOTHING
"#;

/// The input of a pushed-back workflow replaces its last one.
const REPLACE_INPUT: &str = "INSERT INTO workflow_input (workflow_uuid, inputs, \
    retention_timestamp) VALUES (?1, ?2, ?3) \
    ON CONFLICT (workflow_uuid) DO UPDATE SET inputs = excluded.inputs";

/// A new workflow's input.
const NEW_INPUT: &str = "INSERT INTO workflow_input (workflow_uuid, inputs, retention_timestamp) \
    VALUES (?1, ?2, ?3) ON CONFLICT (workflow_uuid) DO NOTHING";

#[async_trait]
impl Debounce for Sqlite {
    async fn bounce(&self, b: &Bounce) -> Result<Bounced, DbError> {
        let mut tx = self.write().await?;
        let out = bounce_in(&mut tx, b).await?;
        tx.commit().await?;
        Ok(out)
    }
}

async fn bounce_in(tx: &mut SqliteConnection, b: &Bounce) -> Result<Bounced, DbError> {
    let pushed: Option<String> = sqlx::query_scalar(BOUNCE)
        .bind(&b.workflow)
        .bind(&b.queue)
        .bind(&b.dedup_id)
        .bind(b.run_at)
        .bind(&b.app_name)
        .bind(b.now)
        .fetch_optional(&mut *tx)
        .await?;
    if let Some(id) = pushed {
        input(tx, REPLACE_INPUT, &id, b).await?;
        return Ok(Bounced::Extended(id));
    }
    let created = sqlx::query(FRESH)
        .bind(&b.id)
        .bind(&b.workflow)
        .bind(&b.queue)
        .bind(&b.dedup_id)
        .bind(b.run_at)
        .bind(b.deadline)
        .bind(&b.app_version)
        .bind(&b.app_name)
        .bind(PORTABLE_JSON)
        .bind(b.now)
        .bind(b.timeout_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1;
    if created {
        input(tx, NEW_INPUT, &b.id, b).await?;
        return Ok(Bounced::Created(b.id.clone()));
    }
    let holder = sqlx::query(
        "SELECT workflow_uuid, is_debounced, name FROM workflow_status \
         WHERE queue_name = ?1 AND deduplication_id = ?2",
    )
    .bind(&b.queue)
    .bind(&b.dedup_id)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(h) = holder {
        return Ok(Bounced::Conflict {
            holder: h.try_get(0)?,
            debounced: h.try_get::<Option<bool>, _>(1)?.unwrap_or(false),
            name: h.try_get(2)?,
        });
    }
    let existing = sqlx::query("SELECT name FROM workflow_status WHERE workflow_uuid = ?1")
        .bind(&b.id)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(match existing {
        Some(row) => Bounced::Existing {
            name: row.try_get(0)?,
        },
        None => Bounced::Retry,
    })
}

/// Writes the call's input for `id` with `statement` (`NEW_INPUT` or `REPLACE_INPUT`).
async fn input(
    tx: &mut SqliteConnection,
    statement: &'static str,
    id: &str,
    b: &Bounce,
) -> Result<(), DbError> {
    sqlx::query(statement)
        .bind(id)
        .bind(&b.inputs)
        .bind(b.now)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

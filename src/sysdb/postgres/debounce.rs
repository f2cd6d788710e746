//! Debouncing on Postgres, in one statement: the update of the holder (its row lock orders
//! concurrent callers: the last committed call wins) or the insert of a new row, and the
//! announcement of a new one.

use async_trait::async_trait;
use sqlx::Row;

use super::shards;
use super::Postgres;
use crate::error::DbError;
use crate::sysdb::debounce::Debounce;
use crate::sysdb::{Bounce, Bounced};

const BOUNCE: &str = r#"
WITH bounce AS (
    UPDATE {s}.workflow_status w
    SET delay_until_epoch_ms = CASE
            WHEN w.debounce_deadline_epoch_ms IS NOT NULL AND w.debounce_deadline_epoch_ms < $5
            THEN w.debounce_deadline_epoch_ms ELSE $5 END,
        updated_at = $11,
        application_name = COALESCE(w.application_name, $10)
    WHERE w.queue_name = $3 AND w.deduplication_id = $4 AND w.name = $2
      AND w.status = 'DELAYED' AND w.is_debounced
      AND (w.application_name = $10 OR w.application_name IS NULL)
    RETURNING w.workflow_uuid
), bounce_input AS (
    INSERT INTO {s}.workflow_input (workflow_uuid, inputs, retention_timestamp)
    SELECT workflow_uuid, $7, $11 FROM bounce
    ON CONFLICT (workflow_uuid) DO UPDATE SET inputs = EXCLUDED.inputs
), fresh AS (
    INSERT INTO {s}.workflow_status AS w (
        workflow_uuid, status, name, queue_name, deduplication_id, delay_until_epoch_ms,
        debounce_deadline_epoch_ms, is_debounced, application_version, application_name,
        serialization, created_at, updated_at, recovery_attempts, priority, workflow_timeout_ms)
    SELECT $1, 'DELAYED', $2, $3, $4, LEAST($5, COALESCE($6, $5)), $6, true, $9, $10,
           'portable_json', $11, $11, 0, 0, $8
    WHERE NOT EXISTS (SELECT 1 FROM bounce)
    -- Either key: the id, or the debounce key another caller just took.
    ON CONFLICT DO NOTHING
    RETURNING w.workflow_uuid
), fresh_input AS (
    INSERT INTO {s}.workflow_input (workflow_uuid, inputs, retention_timestamp)
    SELECT workflow_uuid, $7, $11 FROM fresh
    ON CONFLICT (workflow_uuid) DO NOTHING
), note AS (
    SELECT pg_notify('stead_queue_channel', $3)::text FROM fresh
)
SELECT (SELECT workflow_uuid FROM bounce), (SELECT workflow_uuid FROM fresh),
       (SELECT count(*) FROM note), h.workflow_uuid, h.is_debounced, h.name,
       (SELECT i.name FROM {s}.workflow_status i WHERE i.workflow_uuid = $1),
       EXISTS (SELECT 1 FROM {s}.workflow_status i WHERE i.workflow_uuid = $1)
FROM (SELECT 1) one
LEFT JOIN {s}.workflow_status h ON h.queue_name = $3 AND h.deduplication_id = $4
"#;

#[async_trait]
impl Debounce for Postgres {
    /// On a sharded layout a debounce key's workflow lives under the key: every call with it
    /// meets the same bucket's deduplication index.
    async fn bounce(&self, b: &Bounce) -> Result<Bounced, DbError> {
        let at = shards::bucket_of(&b.dedup_id, self.shards.count());
        let row = self
            .shards
            .bucket(at)
            .query(BOUNCE)
            .bind(&b.id)
            .bind(&b.workflow)
            .bind(&b.queue)
            .bind(&b.dedup_id)
            .bind(b.run_at)
            .bind(b.deadline)
            .bind(&b.inputs)
            .bind(b.timeout_ms)
            .bind(&b.app_version)
            .bind(&b.app_name)
            .bind(b.now)
            .fetch_one(&self.pool)
            .await?;
        if let Some(id) = row.try_get::<Option<String>, _>(0)? {
            self.shards.remember(&id, at);
            return Ok(Bounced::Extended(id));
        }
        if let Some(id) = row.try_get::<Option<String>, _>(1)? {
            self.shards.remember(&id, at);
            return Ok(Bounced::Created(id));
        }
        Ok(match row.try_get::<Option<String>, _>(3)? {
            Some(holder) => Bounced::Conflict {
                holder,
                debounced: row.try_get::<Option<bool>, _>(4)?.unwrap_or(false),
                name: row.try_get(5)?,
            },
            None if row.try_get::<bool, _>(7)? => Bounced::Existing {
                name: row.try_get(6)?,
            },
            None => Bounced::Retry,
        })
    }
}

//! Management on SQLite: listing workflows and their steps, resuming, forking, deleting and
//! changing a delay, each one write transaction. Wake-ups are the caller's (no NOTIFY): these
//! functions never signal anything.

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Row};

use super::{json_list, Sqlite};
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::manage::{Fork, Forked, Manage};
use crate::sysdb::rows::{all, bind_filters, link_columns, STATUS_COLUMNS};
use crate::sysdb::{
    AttributesUpdate, Delayed, ListQuery, ListedRow, Resumed, StatusCount, StepListing, StepQuery,
};

#[async_trait]
impl Manage for Sqlite {
    async fn list_workflows(&self, q: &ListQuery) -> Result<Vec<ListedRow>, DbError> {
        // The ids and statuses are lists: JSON arrays here, arrays on Postgres.
        let query = sqlx::query(AssertSqlSafe(list_sql(q.newest_first, self.links())))
            .bind(q.ids.as_deref().map(json_list))
            .bind(q.statuses.as_deref().map(json_list));
        let rows = bind_filters(query, q).fetch_all(self.reader()).await?;
        rows.iter().map(ListedRow::from_row).collect()
    }

    async fn count_workflows(&self, q: &ListQuery) -> Result<Vec<StatusCount>, DbError> {
        // ?12, ?14 and ?15 (payloads and paging) are bound but unused: a count has neither.
        let sql = format!(
            "SELECT w.status, count(*) FROM workflow_status w WHERE {LIST_WHERE} \
             GROUP BY w.status"
        );
        let query = sqlx::query(AssertSqlSafe(sql))
            .bind(q.ids.as_deref().map(json_list))
            .bind(q.statuses.as_deref().map(json_list));
        let rows = bind_filters(query, q).fetch_all(self.reader()).await?;
        all(&rows, StatusCount::from_row)
    }

    async fn list_steps(&self, id: &str, q: &StepQuery) -> Result<Vec<StepListing>, DbError> {
        // Without outputs only their sizes are read (`octet_length` skips overflow pages).
        let payloads = if q.outputs {
            "output, error"
        } else {
            "NULL, NULL"
        };
        let sql = format!(
            "SELECT function_id, function_name, {payloads}, child_workflow_id, \
                 started_at_epoch_ms, completed_at_epoch_ms, serialization, \
                 octet_length(output), octet_length(error) \
             FROM operation_outputs WHERE workflow_uuid = ?1 AND function_id > ?2 \
             ORDER BY function_id LIMIT COALESCE(?3, -1)"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(q.after)
            .bind(q.limit)
            .fetch_all(self.reader())
            .await?;
        all(&rows, StepListing::from_row)
    }

    async fn resume(&self, id: &str, queue: &str) -> Result<Resumed, DbError> {
        let mut tx = self.write().await?;
        let Some(old) =
            sqlx::query("SELECT owner_xid FROM workflow_status WHERE workflow_uuid = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(Resumed {
                exists: false,
                requeued: false,
                previous_owner: None,
            });
        };
        let requeued = sqlx::query(
            "UPDATE workflow_status \
             SET status = 'ENQUEUED', owner_xid = NULL, queue_name = ?2, recovery_attempts = 0, \
                 workflow_deadline_epoch_ms = NULL, deduplication_id = NULL, \
                 started_at_epoch_ms = NULL, completed_at = NULL, updated_at = ?3 \
             WHERE workflow_uuid = ?1 AND status NOT IN ('SUCCESS', 'ERROR')",
        )
        .bind(id)
        .bind(queue)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        tx.commit().await?;
        Ok(Resumed {
            exists: true,
            requeued,
            previous_owner: old.try_get(0)?,
        })
    }

    async fn fork(&self, f: &Fork) -> Result<Forked, DbError> {
        let (id, new_id, from_step) = (f.id.as_str(), f.new_id.as_str(), f.from_step);
        let mut tx = self.write().await?;
        let exists = sqlx::query("SELECT 1 FROM workflow_status WHERE workflow_uuid = ?1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        let made = exists
            && sqlx::query(
                "INSERT INTO workflow_status (
                    workflow_uuid, status, name, class_name, config_name, queue_name,
                    application_version, application_name, authenticated_user, assumed_role,
                    authenticated_roles, serialization, forked_from, recovery_attempts, priority,
                    created_at, updated_at, workflow_timeout_ms, inputs, attributes)
                 SELECT ?2, 'ENQUEUED', name, class_name, config_name, ?3,
                    COALESCE(?4, application_version), application_name, authenticated_user,
                    assumed_role, authenticated_roles, serialization, ?1, 0, 0, ?5, ?5,
                    workflow_timeout_ms, inputs, attributes
                 FROM workflow_status WHERE workflow_uuid = ?1
                 ON CONFLICT (workflow_uuid) DO NOTHING",
            )
            .bind(id)
            .bind(new_id)
            .bind(&f.queue)
            .bind(&f.app_version)
            // A new row: stamped like every row this process creates, so it sorts after them.
            .bind(crate::sysdb::next_created_at())
            .execute(&mut *tx)
            .await?
            .rows_affected()
                > 0;
        if made {
            copy_history(&mut tx, id, new_id, from_step).await?;
        }
        tx.commit().await?;
        Ok(Forked { exists, made })
    }

    async fn delete_workflow(&self, id: &str, cascade: bool) -> Result<Vec<String>, DbError> {
        let mut tx = self.write().await?;
        let tree: Vec<String> = sqlx::query_scalar(
            "WITH RECURSIVE tree(id) AS ( \
                 SELECT ?1 \
                 UNION \
                 SELECT w.workflow_uuid FROM workflow_status w JOIN tree t \
                     ON w.parent_workflow_id = t.id WHERE ?2) \
             SELECT id FROM tree",
        )
        .bind(id)
        .bind(cascade)
        .fetch_all(&mut *tx)
        .await?;
        let gone = delete_rows(&mut tx, &json_list(&tree)).await?;
        tx.commit().await?;
        Ok(gone)
    }

    async fn update_attributes(
        &self,
        id: &str,
        update: &AttributesUpdate,
    ) -> Result<bool, DbError> {
        // The write transaction holds the file's write lock, so reading, merging here and
        // writing back is as atomic as Postgres's one statement.
        let mut tx = self.write().await?;
        let Some(stored) = sqlx::query_scalar::<_, Option<String>>(
            "SELECT attributes FROM workflow_status WHERE workflow_uuid = ?1",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(false);
        };
        let value = match update {
            AttributesUpdate::Replace(value) => value.clone(),
            AttributesUpdate::Merge(patch) => Some(merged(stored.as_deref(), patch)?),
        };
        sqlx::query(
            "UPDATE workflow_status SET attributes = ?2, updated_at = ?3 WHERE workflow_uuid = ?1",
        )
        .bind(id)
        .bind(value)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn set_delay(&self, id: &str, until: i64) -> Result<Option<Delayed>, DbError> {
        let mut tx = self.write().await?;
        sqlx::query(
            "UPDATE workflow_status SET delay_until_epoch_ms = ?2, updated_at = ?3 \
             WHERE workflow_uuid = ?1 AND status = 'DELAYED'",
        )
        .bind(id)
        .bind(until)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        let row =
            sqlx::query("SELECT status, queue_name FROM workflow_status WHERE workflow_uuid = ?1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(row.as_ref().map(Delayed::from_row).transpose()?)
    }
}

/// Deletes the workflows `ids` (a JSON array) with every row that belongs to them; returns the
/// ids deleted.
pub(super) async fn delete_rows(
    tx: &mut SqliteConnection,
    ids: &str,
) -> Result<Vec<String>, DbError> {
    for table in ["operation_outputs", "workflow_input", "workflow_output"] {
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE workflow_uuid IN (SELECT value FROM json_each(?1))"
        )))
        .bind(ids)
        .execute(&mut *tx)
        .await?;
    }
    Ok(sqlx::query_scalar(
        "DELETE FROM workflow_status WHERE workflow_uuid IN (SELECT value FROM json_each(?1)) \
         RETURNING workflow_uuid",
    )
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?)
}

/// `patch`'s top-level keys set over `stored`'s (a stored value that is not an object, or is
/// not JSON, counts as `{}`).
fn merged(stored: Option<&str>, patch: &str) -> Result<String, DbError> {
    let mut base = match stored.and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok()) {
        Some(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let patch: serde_json::Map<String, serde_json::Value> = serde_json::from_str(patch)
        .map_err(|e| DbError::Query(format!("attributes to merge are not a JSON object: {e}")))?;
    base.extend(patch);
    Ok(serde_json::Value::Object(base).to_string())
}

/// JSON arrays for the id and status lists, and a negative limit (no bound) for a missing one.
fn list_sql(newest_first: bool, links: bool) -> String {
    let order = if newest_first { "DESC" } else { "ASC" };
    let links = link_columns(links, "");
    format!(
        "SELECT {STATUS_COLUMNS}, w.serialization, \
           CASE WHEN ?12 THEN COALESCE(i.inputs, w.inputs) END, \
           CASE WHEN ?12 THEN COALESCE(o.output, w.output) END, \
           CASE WHEN ?12 THEN COALESCE(o.error, w.error) END, {links} \
         FROM workflow_status w \
         LEFT JOIN stead_workflow_pauses wp ON wp.workflow_uuid = w.workflow_uuid \
         LEFT JOIN workflow_input i ON ?12 AND i.workflow_uuid = w.workflow_uuid \
         LEFT JOIN workflow_output o ON ?12 AND o.workflow_uuid = w.workflow_uuid \
         WHERE {LIST_WHERE} \
         ORDER BY w.created_at {order}, w.workflow_uuid {order} \
         LIMIT COALESCE(?14, -1) OFFSET ?15"
    )
}

/// The filters of a listing, over `workflow_status w`, in `bind_filters` order after the ids
/// (`?1`) and statuses (`?2`).
pub(super) const LIST_WHERE: &str =
    "(?1 IS NULL OR w.workflow_uuid IN (SELECT value FROM json_each(?1))) \
    AND (?2 IS NULL OR w.status IN (SELECT value FROM json_each(?2))) \
    AND (?3 IS NULL OR w.name = ?3) \
    AND (?4 IS NULL OR w.queue_name = ?4) \
    AND (?5 IS NULL OR w.application_version = ?5) \
    AND (?6 IS NULL OR w.application_name = ?6) \
    AND (?7 IS NULL OR w.created_at >= ?7) \
    AND (?8 IS NULL OR w.created_at < ?8) \
    AND (?9 IS NULL OR w.parent_workflow_id = ?9) \
    AND (?10 IS NULL OR w.forked_from = ?10) \
    AND (?11 IS NULL OR w.executor_id = ?11) \
    AND (?16 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?16) f \
         WHERE (w.attributes -> f.fullkey) IS NOT (?16 -> f.fullkey))) \
    AND (NOT ?13 OR (w.queue_name IS NOT NULL \
         AND w.status IN ('ENQUEUED', 'PENDING', 'DELAYED')))";

/// The fork's copies: input, the calls before `from_step`, the events they set (the latest
/// value of each key) and their stream values; then marks the original as forked.
async fn copy_history(
    tx: &mut SqliteConnection,
    id: &str,
    new_id: &str,
    from_step: i32,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO workflow_input (workflow_uuid, inputs) \
         SELECT ?2, inputs FROM workflow_input WHERE workflow_uuid = ?1",
    )
    .bind(id)
    .bind(new_id)
    .execute(&mut *tx)
    .await?;
    const CALLS: [&str; 4] = [
        "INSERT INTO operation_outputs (workflow_uuid, function_id, function_name, output, \
             error, child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms, \
             serialization, application_name) \
         SELECT ?2, function_id, function_name, output, error, child_workflow_id, \
             started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name \
         FROM operation_outputs WHERE workflow_uuid = ?1 AND function_id < ?3",
        "INSERT INTO workflow_events_history (workflow_uuid, function_id, key, value, \
             serialization) \
         SELECT ?2, function_id, key, value, serialization FROM workflow_events_history \
         WHERE workflow_uuid = ?1 AND function_id < ?3",
        "INSERT INTO workflow_events (workflow_uuid, key, value, serialization) \
         SELECT ?2, key, value, serialization FROM ( \
             SELECT key, value, serialization, row_number() OVER ( \
                 PARTITION BY key ORDER BY function_id DESC) AS latest \
             FROM workflow_events_history WHERE workflow_uuid = ?1 AND function_id < ?3) \
         WHERE latest = 1",
        r#"INSERT INTO streams (workflow_uuid, key, value, "offset", function_id, serialization)
           SELECT ?2, key, value, "offset", function_id, serialization FROM streams
           WHERE workflow_uuid = ?1 AND function_id < ?3"#,
    ];
    for sql in CALLS {
        sqlx::query(sql)
            .bind(id)
            .bind(new_id)
            .bind(from_step)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("UPDATE workflow_status SET was_forked_from = true WHERE workflow_uuid = ?1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

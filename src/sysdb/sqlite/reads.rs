//! Reads on SQLite: a workflow's status row with its outcome, events and stream values.

use async_trait::async_trait;
use sqlx::Row;

use super::Sqlite;
use crate::error::DbError;
use crate::sysdb::reads::Reads;
use crate::sysdb::rows::{all, link_columns, STATUS_COLUMNS};
use crate::sysdb::{StatusRow, StreamRow};

#[async_trait]
impl Reads for Sqlite {
    async fn status(&self, id: &str) -> Result<Option<StatusRow>, DbError> {
        let links = link_columns(self.links(), "");
        let sql = format!(
            "SELECT {STATUS_COLUMNS}, w.serialization, COALESCE(o.output, w.output), \
               COALESCE(o.error, w.error), {links} \
             FROM workflow_status w \
             LEFT JOIN stead_workflow_pauses wp ON wp.workflow_uuid = w.workflow_uuid \
             LEFT JOIN workflow_output o ON o.workflow_uuid = w.workflow_uuid \
             WHERE w.workflow_uuid = ?1"
        );
        let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(self.reader())
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(StatusRow::from_row(&row)?))
    }

    async fn workflow_owner(&self, id: &str) -> Result<Option<String>, DbError> {
        let row = sqlx::query("SELECT owner_xid FROM workflow_status WHERE workflow_uuid = ?1")
            .bind(id)
            .fetch_optional(self.reader())
            .await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?.flatten())
    }

    async fn get_event(
        &self,
        id: &str,
        key: &str,
    ) -> Result<Option<(String, Option<String>)>, DbError> {
        let row = sqlx::query(
            "SELECT value, serialization FROM workflow_events WHERE workflow_uuid = ?1 AND key = ?2",
        )
        .bind(id)
        .bind(key)
        .fetch_optional(self.reader())
        .await?;
        Ok(match row {
            Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
            None => None,
        })
    }

    async fn read_stream(
        &self,
        id: &str,
        key: &str,
        offset: i32,
        limit: i64,
    ) -> Result<Vec<StreamRow>, DbError> {
        let rows = sqlx::query(
            r#"SELECT "offset", value, serialization FROM streams
               WHERE workflow_uuid = ?1 AND key = ?2 AND "offset" >= ?3
               ORDER BY "offset" LIMIT CAST(?4 AS INTEGER)"#,
        )
        .bind(id)
        .bind(key)
        .bind(offset)
        .bind(limit)
        .fetch_all(self.reader())
        .await?;
        all(&rows, StreamRow::from_row)
    }
}

//! Reads of one workflow on Postgres: its status row with its outcome, its events and its
//! stream values (the recorded steps are read on a lane, see `steps`).

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::reads::Reads;
use crate::sysdb::rows::{all, link_columns, STATUS_COLUMNS};
use crate::sysdb::{StatusRow, StreamRow};

/// Built once per process; `Sql::get` splices the schema in. Without the chain links where
/// `stead_continuations` is missing (`Postgres::links`).
static STATUS: LazyLock<String> = LazyLock::new(|| status_sql(true));
static STATUS_NO_LINKS: LazyLock<String> = LazyLock::new(|| status_sql(false));

// The payload tables are authoritative; the legacy columns are a read fallback, as in DBOS.
fn status_sql(links: bool) -> String {
    let links = link_columns(links, "{s}.");
    format!(
        "SELECT {STATUS_COLUMNS}, w.serialization, COALESCE(o.output, w.output), \
           COALESCE(o.error, w.error), {links} \
         FROM {{s}}.workflow_status w \
         LEFT JOIN {{s}}.stead_workflow_pauses wp ON wp.workflow_uuid = w.workflow_uuid \
         LEFT JOIN {{s}}.workflow_output o ON o.workflow_uuid = w.workflow_uuid \
         WHERE w.workflow_uuid = $1"
    )
}

const GET_EVENT: &str =
    "SELECT value, serialization FROM {s}.workflow_events WHERE workflow_uuid = $1 AND key = $2";

const OWNER: &str = "SELECT owner_xid FROM {s}.workflow_status WHERE workflow_uuid = $1";

const READ_STREAM: &str = r#"
SELECT "offset", value, serialization FROM {s}.streams
WHERE workflow_uuid = $1 AND key = $2 AND "offset" >= $3
ORDER BY "offset" LIMIT $4
"#;

#[async_trait]
impl Reads for Postgres {
    async fn status(&self, id: &str) -> Result<Option<StatusRow>, DbError> {
        let statement: &'static str = match self.links() {
            true => &STATUS,
            false => &STATUS_NO_LINKS,
        };
        let row = self
            .locate(id)
            .await?
            .query(statement)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(StatusRow::from_row).transpose()
    }

    async fn workflow_owner(&self, id: &str) -> Result<Option<String>, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(OWNER)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?.flatten())
    }

    async fn get_event(
        &self,
        id: &str,
        key: &str,
    ) -> Result<Option<(String, Option<String>)>, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(GET_EVENT)
            .bind(id)
            .bind(key)
            .fetch_optional(&self.pool)
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
        let rows = self
            .locate(id)
            .await?
            .query(READ_STREAM)
            .bind(id)
            .bind(key)
            .bind(offset)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        all(&rows, StreamRow::from_row)
    }
}

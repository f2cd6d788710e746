//! Batch pages on SQLite: in one write transaction (the file's one writer, so nothing moves
//! between the read and the write), the page's matches are read by the keyset on
//! `(created_at, workflow_uuid)` with each one's rule, then those it names are changed by id.
//! A dry run only reads. No NOTIFY: the caller stops runs and wakes queues of this process.

use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Executor, Row};

use super::manage::{delete_rows, LIST_WHERE};
use super::{json_list, Sqlite};
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::batch::{BatchAction, BatchPage, BatchRow, Batches};
use crate::sysdb::rows::bind_batch;
use crate::sysdb::ListQuery;

/// Each action's rule (`sysdb::batch`), over `workflow_status w`; `?20` is the action's text.
fn rule(action: &BatchAction) -> &'static str {
    match action {
        BatchAction::Cancel => "w.status NOT IN ('SUCCESS', 'ERROR', 'CANCELLED')",
        BatchAction::Resume(_) => "w.status IN ('CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')",
        BatchAction::Delete => "1",
        BatchAction::Move(_) => {
            "w.status IN ('ENQUEUED', 'DELAYED', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED') \
             AND w.application_version IS NOT ?20"
        }
    }
}

/// The change of the rows `?1` (a JSON array of ids) at time `?2`, with the action's text `?3`.
fn change(action: &BatchAction) -> Option<&'static str> {
    match action {
        BatchAction::Cancel => Some(
            "UPDATE workflow_status \
             SET status = 'CANCELLED', queue_name = NULL, deduplication_id = NULL, \
                 owner_xid = NULL, started_at_epoch_ms = NULL, updated_at = ?2, completed_at = ?2 \
             WHERE workflow_uuid IN (SELECT value FROM json_each(?1))",
        ),
        BatchAction::Resume(_) => Some(
            "UPDATE workflow_status \
             SET status = 'ENQUEUED', owner_xid = NULL, queue_name = ?3, recovery_attempts = 0, \
                 workflow_deadline_epoch_ms = NULL, deduplication_id = NULL, \
                 started_at_epoch_ms = NULL, completed_at = NULL, updated_at = ?2 \
             WHERE workflow_uuid IN (SELECT value FROM json_each(?1))",
        ),
        BatchAction::Move(_) => Some(
            "UPDATE workflow_status SET application_version = ?3, updated_at = ?2 \
             WHERE workflow_uuid IN (SELECT value FROM json_each(?1))",
        ),
        BatchAction::Delete => None,
    }
}

/// One match of a page as read: whether the rule names it, its status, queue and owner.
struct Match {
    row: BatchRow,
    hit: bool,
    status: Option<String>,
    queue: Option<String>,
    owner: Option<String>,
}

impl Match {
    fn from_row(row: &SqliteRow) -> Result<Match, sqlx::Error> {
        Ok(Match {
            row: BatchRow {
                created_at: row.try_get(0)?,
                id: row.try_get(1)?,
                changed: false,
                queue: None,
                owner: None,
            },
            hit: row.try_get(2)?,
            status: row.try_get(3)?,
            queue: row.try_get(4)?,
            owner: row.try_get(5)?,
        })
    }

    /// The row as reported after the action changed it (or, on a dry run, would).
    fn changed(self, action: &BatchAction) -> BatchRow {
        let queue = match action {
            BatchAction::Resume(queue) => Some(queue.clone()),
            BatchAction::Move(_) if self.status.as_deref() == Some("ENQUEUED") => self.queue,
            _ => None,
        };
        let owner = match action {
            BatchAction::Resume(_) => self.owner,
            _ => None,
        };
        BatchRow {
            changed: true,
            queue,
            owner,
            ..self.row
        }
    }
}

/// The page's matches, read on `conn`.
async fn read_page<'c, E>(page: &BatchPage, conn: E) -> Result<Vec<Match>, DbError>
where
    E: Executor<'c, Database = sqlx::Sqlite>,
{
    let sql = format!(
        "SELECT w.created_at, w.workflow_uuid, COALESCE({}, 0), w.status, w.queue_name, \
             w.owner_xid \
         FROM workflow_status w \
         WHERE {LIST_WHERE} \
           AND (w.created_at, w.workflow_uuid) > (?17, ?18) \
         ORDER BY w.created_at, w.workflow_uuid LIMIT CAST(?14 AS INTEGER)",
        rule(&page.action)
    );
    let q: ListQuery = ListQuery {
        limit: Some(page.size),
        offset: 0,
        ..page.filter.clone()
    };
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(q.ids.as_deref().map(json_list))
        .bind(q.statuses.as_deref().map(json_list));
    let rows = bind_batch(query, &q, page).fetch_all(conn).await?;
    Ok(rows.iter().map(Match::from_row).collect::<Result<_, _>>()?)
}

/// Applies the action to the `hits` of a page; returns the ids changed.
async fn apply(
    tx: &mut SqliteConnection,
    action: &BatchAction,
    hits: &[&str],
) -> Result<Vec<String>, DbError> {
    let ids = json_list(hits);
    let Some(sql) = change(action) else {
        return delete_rows(tx, &ids).await;
    };
    sqlx::query(sql)
        .bind(&ids)
        .bind(now_ms())
        .bind(action.argument())
        .execute(&mut *tx)
        .await?;
    if matches!(action, BatchAction::Resume(_)) {
        // A resume lifts a pause (`sysdb::pauses`), as a single resume does.
        sqlx::query(
            "DELETE FROM stead_workflow_pauses \
             WHERE workflow_uuid IN (SELECT value FROM json_each(?1))",
        )
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    }
    Ok(hits.iter().map(|id| (*id).to_owned()).collect())
}

#[async_trait]
impl Batches for Sqlite {
    async fn batch_page(&self, page: &BatchPage) -> Result<Vec<BatchRow>, DbError> {
        if page.dry_run {
            let found = read_page(page, self.reader()).await?;
            return Ok(found
                .into_iter()
                .map(|m| match m.hit {
                    true => m.changed(&page.action),
                    false => m.row,
                })
                .collect());
        }
        let mut tx = self.write().await?;
        let found = read_page(page, &mut *tx).await?;
        let hits: Vec<&str> = found
            .iter()
            .filter(|m| m.hit)
            .map(|m| m.row.id.as_str())
            .collect();
        let changed: HashSet<String> = if hits.is_empty() {
            HashSet::new()
        } else {
            apply(&mut tx, &page.action, &hits)
                .await?
                .into_iter()
                .collect()
        };
        tx.commit().await?;
        Ok(found
            .into_iter()
            .map(|m| match changed.contains(&m.row.id) {
                true => m.changed(&page.action),
                false => m.row,
            })
            .collect())
    }
}

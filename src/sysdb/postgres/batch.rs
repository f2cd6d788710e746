//! Batch pages on Postgres: one statement per page. It locks the page's matches (`FOR UPDATE`,
//! keyset on `(created_at, workflow_uuid)`), applies the action to those its rule names, and
//! announces what a single operation announces (cancels and takeovers on
//! `stead_cancel_channel`, new work on `stead_queue_channel`). A dry run reads the page only.

use std::sync::LazyLock;

use async_trait::async_trait;

use super::manage::LIST_WHERE;
use super::sql::Sql;
use super::Postgres;
use crate::error::DbError;
use crate::sysdb::batch::{BatchAction, BatchPage, BatchRow, Batches};
use crate::sysdb::rows::{all, bind_batch};
use crate::sysdb::ListQuery;

/// Matches after the cursor (`$17`, `$18`): a range of the `created_at` index.
const AFTER: &str = "(w.created_at, w.workflow_uuid) > ($17::int8, $18::text)";

/// Each action's rule (`sysdb::batch`), over `workflow_status w`; `$20` is the action's text.
fn rule(action: usize) -> &'static str {
    [
        "w.status NOT IN ('SUCCESS', 'ERROR', 'CANCELLED')",
        "w.status IN ('CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')",
        "true",
        "w.status IN ('ENQUEUED', 'DELAYED', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED') \
         AND w.application_version IS DISTINCT FROM $20::text",
    ][action]
}

/// Each action's change of the page's `hit` rows (`done`, returning id, queue, owner), its
/// announcements, and a count of them the final select reads (a CTE nothing reads never runs;
/// nor does a subquery whose column nothing reads, so the count is an output column).
fn change(action: usize) -> (&'static str, &'static str, &'static str) {
    match action {
        0 => (
            "UPDATE {s}.workflow_status w \
             SET status = 'CANCELLED', queue_name = NULL, deduplication_id = NULL, \
                 owner_xid = NULL, started_at_epoch_ms = NULL, updated_at = $19, \
                 completed_at = $19 \
             FROM page WHERE w.workflow_uuid = page.workflow_uuid AND page.hit \
             RETURNING w.workflow_uuid, NULL::text AS queue, NULL::text AS owner",
            ", note AS (SELECT pg_notify('stead_cancel_channel', \
                 json_build_array(workflow_uuid)::text)::text FROM done)",
            "(SELECT count(*) FROM note)",
        ),
        1 => (
            "UPDATE {s}.workflow_status w \
             SET status = 'ENQUEUED', owner_xid = NULL, queue_name = $20, recovery_attempts = 0, \
                 workflow_deadline_epoch_ms = NULL, deduplication_id = NULL, \
                 started_at_epoch_ms = NULL, completed_at = NULL, updated_at = $19 \
             FROM page WHERE w.workflow_uuid = page.workflow_uuid AND page.hit \
             RETURNING w.workflow_uuid, $20::text AS queue, page.owner_xid AS owner",
            ", taken AS (SELECT pg_notify('stead_cancel_channel', \
                 json_build_array(workflow_uuid, owner)::text)::text FROM done \
                 WHERE owner IS NOT NULL) \
             , wake AS (SELECT pg_notify('stead_queue_channel', $20)::text \
                 FROM (SELECT 1 FROM done LIMIT 1) one) \
             , unpaused AS (DELETE FROM {s}.stead_workflow_pauses \
                 WHERE workflow_uuid IN (SELECT workflow_uuid FROM done))",
            "(SELECT count(*) FROM taken) + (SELECT count(*) FROM wake)",
        ),
        2 => (
            "DELETE FROM {s}.workflow_status w USING page \
             WHERE w.workflow_uuid = page.workflow_uuid \
             RETURNING w.workflow_uuid, NULL::text AS queue, NULL::text AS owner",
            ", calls AS (DELETE FROM {s}.operation_outputs \
                 WHERE workflow_uuid IN (SELECT workflow_uuid FROM page)) \
             , inputs AS (DELETE FROM {s}.workflow_input \
                 WHERE workflow_uuid IN (SELECT workflow_uuid FROM page)) \
             , outputs AS (DELETE FROM {s}.workflow_output \
                 WHERE workflow_uuid IN (SELECT workflow_uuid FROM page))",
            "0",
        ),
        _ => (
            "UPDATE {s}.workflow_status w SET application_version = $20, updated_at = $19 \
             FROM page WHERE w.workflow_uuid = page.workflow_uuid AND page.hit \
             RETURNING w.workflow_uuid, \
                 CASE WHEN w.status = 'ENQUEUED' THEN w.queue_name END AS queue, \
                 NULL::text AS owner",
            ", wake AS (SELECT pg_notify('stead_queue_channel', q)::text \
                 FROM (SELECT DISTINCT queue AS q FROM done WHERE queue IS NOT NULL) x)",
            "(SELECT count(*) FROM wake)",
        ),
    }
}

/// The page's matches with each one's rule, locked when `lock`.
fn page_sql(action: usize, lock: bool) -> String {
    let rule = rule(action);
    let lock = if lock { " FOR UPDATE" } else { "" };
    format!(
        "SELECT w.created_at, w.workflow_uuid, COALESCE({rule}, false) AS hit, w.owner_xid \
         FROM {{s}}.workflow_status w \
         WHERE {LIST_WHERE} AND {AFTER} \
         ORDER BY w.created_at, w.workflow_uuid LIMIT $14{lock}"
    )
}

/// A dry run's statement for `action`: the page and whether each row would change.
fn dry_sql(action: usize) -> String {
    format!(
        "SELECT p.created_at, p.workflow_uuid, p.hit, NULL::text, NULL::text FROM ({}) p \
         ORDER BY p.created_at, p.workflow_uuid",
        page_sql(action, false)
    )
}

/// The statement that applies `action` to one page.
fn apply_sql(action: usize) -> String {
    let (dml, notes, counted) = change(action);
    format!(
        "WITH page AS ({}), done AS ({dml}){notes} \
         SELECT p.created_at, p.workflow_uuid, d.workflow_uuid IS NOT NULL, d.queue, d.owner, \
             {counted} \
         FROM page p LEFT JOIN done d ON d.workflow_uuid = p.workflow_uuid \
         ORDER BY p.created_at, p.workflow_uuid",
        page_sql(action, true)
    )
}

/// Built once per process, by action (cancel, resume, delete, move): applying, then dry.
/// `Sql::get` splices the schema in.
pub(super) static STATEMENTS: LazyLock<[[String; 2]; 4]> =
    LazyLock::new(|| [0, 1, 2, 3].map(|a| [apply_sql(a), dry_sql(a)]));

fn index(action: &BatchAction) -> usize {
    match action {
        BatchAction::Cancel => 0,
        BatchAction::Resume(_) => 1,
        BatchAction::Delete => 2,
        BatchAction::Move(_) => 3,
    }
}

#[async_trait]
impl Batches for Postgres {
    async fn batch_page(&self, page: &BatchPage) -> Result<Vec<BatchRow>, DbError> {
        let statement: &'static str = &STATEMENTS[index(&page.action)][usize::from(page.dry_run)];
        let mut q = page.filter.clone();
        (q.limit, q.offset) = (Some(page.size), 0);
        if !self.shards.sharded() {
            return self.page_in(&self.sql, statement, &q, page).await;
        }
        // A page across buckets: each bucket's first rows after the cursor (read, not
        // changed), merged into the page's `size` first; then each bucket applies its share of
        // the page, no more, so a page changes exactly the rows it reports (this fans out).
        let dry: &'static str = &STATEMENTS[index(&page.action)][1];
        let mut seen = Vec::new();
        for (b, sql) in self.buckets().iter().enumerate() {
            for row in self.page_in(sql, dry, &q, page).await? {
                seen.push((b, row));
            }
        }
        seen.sort_by(|x, y| (x.1.created_at, &x.1.id).cmp(&(y.1.created_at, &y.1.id)));
        seen.truncate(usize::try_from(page.size).unwrap_or(0));
        if page.dry_run {
            return Ok(seen.into_iter().map(|(_, row)| row).collect());
        }
        let mut done = Vec::new();
        for (b, sql) in self.buckets().iter().enumerate() {
            let share = seen.iter().filter(|(of, _)| *of == b).count();
            if share > 0 {
                let mut mine = q.clone();
                mine.limit = Some(share as i64);
                done.extend(self.page_in(sql, statement, &mine, page).await?);
            }
        }
        done.sort_by(|x, y| (x.created_at, &x.id).cmp(&(y.created_at, &y.id)));
        Ok(done)
    }
}

impl Postgres {
    /// One bucket's page of `q` (its `limit` rows after the page's cursor).
    async fn page_in(
        &self,
        sql: &Sql,
        statement: &'static str,
        q: &ListQuery,
        page: &BatchPage,
    ) -> Result<Vec<BatchRow>, DbError> {
        let query = sql.query(statement).bind(&q.ids).bind(&q.statuses);
        let rows = bind_batch(query, q, page).fetch_all(&self.pool).await?;
        all(&rows, BatchRow::from_row)
    }
}

//! Management on Postgres: listing workflows and their steps, and resuming, forking, deleting
//! and changing a delay, each one statement (announcing requeued work on
//! `stead_queue_channel`, and a takeover on `stead_cancel_channel`).

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::manage::{Fork, Forked, Manage};
use crate::sysdb::rows::{all, bind_filters, link_columns, STATUS_COLUMNS};
use crate::sysdb::{
    AttributesUpdate, Delayed, ListQuery, ListedRow, Resumed, StatusCount, StepListing, StepQuery,
};

/// Built once per process; `Sql::get` splices the schema in.
pub(super) static LIST_DESC: LazyLock<String> = LazyLock::new(|| list_sql(true, true));

/// Built once per process; `Sql::get` splices the schema in.
static LIST_ASC: LazyLock<String> = LazyLock::new(|| list_sql(false, true));

/// The listings without the chain links, where `stead_continuations` is missing.
static LIST_DESC_NO_LINKS: LazyLock<String> = LazyLock::new(|| list_sql(true, false));
static LIST_ASC_NO_LINKS: LazyLock<String> = LazyLock::new(|| list_sql(false, false));

/// Built once per process; `Sql::get` splices the schema in.
static COUNT: LazyLock<String> = LazyLock::new(|| {
    // $12, $14 and $15 (payloads and paging) are bound but unused: a count has neither.
    format!(
        "SELECT w.status, count(*) FROM {{s}}.workflow_status w WHERE {LIST_WHERE} \
         GROUP BY w.status"
    )
});

fn list_sql(newest_first: bool, links: bool) -> String {
    let order = if newest_first { "DESC" } else { "ASC" };
    let links = link_columns(links, "{s}.");
    format!(
        "SELECT {STATUS_COLUMNS}, w.serialization, \
           CASE WHEN $12 THEN COALESCE(i.inputs, w.inputs) END, \
           CASE WHEN $12 THEN COALESCE(o.output, w.output) END, \
           CASE WHEN $12 THEN COALESCE(o.error, w.error) END, {links} \
         FROM {{s}}.workflow_status w \
         LEFT JOIN {{s}}.stead_workflow_pauses wp ON wp.workflow_uuid = w.workflow_uuid \
         LEFT JOIN {{s}}.workflow_input i ON $12 AND i.workflow_uuid = w.workflow_uuid \
         LEFT JOIN {{s}}.workflow_output o ON $12 AND o.workflow_uuid = w.workflow_uuid \
         WHERE {LIST_WHERE} \
         ORDER BY w.created_at {order}, w.workflow_uuid {order} \
         LIMIT $14 OFFSET $15"
    )
}

/// The filters of a listing, over `workflow_status w`, in `bind_filters` order after the ids
/// (`$1`) and statuses (`$2`). The in-flight statuses are split so the in-flight and delayed
/// partial indexes can serve them together; one `IN` list matches neither (a scan of history).
pub(super) const LIST_WHERE: &str = "($1::text[] IS NULL OR w.workflow_uuid = ANY($1)) \
    AND ($2::text[] IS NULL OR w.status = ANY($2)) \
    AND ($3::text IS NULL OR w.name = $3) \
    AND ($4::text IS NULL OR w.queue_name = $4) \
    AND ($5::text IS NULL OR w.application_version = $5) \
    AND ($6::text IS NULL OR w.application_name = $6) \
    AND ($7::int8 IS NULL OR w.created_at >= $7) \
    AND ($8::int8 IS NULL OR w.created_at < $8) \
    AND ($9::text IS NULL OR w.parent_workflow_id = $9) \
    AND ($10::text IS NULL OR w.forked_from = $10) \
    AND ($11::text IS NULL OR w.executor_id = $11) \
    AND ($16::jsonb IS NULL OR w.attributes @> $16::jsonb) \
    AND (NOT $13 OR (w.queue_name IS NOT NULL \
         AND (w.status IN ('ENQUEUED', 'PENDING') OR w.status = 'DELAYED')))";

/// Built once per process; `Sql::get` splices the schema in.
static STEPS: LazyLock<String> = LazyLock::new(|| steps_sql("output, error"));

/// Built once per process; `Sql::get` splices the schema in.
static STEPS_BARE: LazyLock<String> = LazyLock::new(|| steps_sql("NULL::text, NULL::text"));

/// A page of `$1`'s calls above function id `$2` (at most `$3`, all when NULL), with `payloads`
/// as the output and error columns: without them, only their sizes are read.
fn steps_sql(payloads: &str) -> String {
    format!(
        "SELECT function_id, function_name, {payloads}, child_workflow_id, \
           started_at_epoch_ms, completed_at_epoch_ms, serialization, \
           octet_length(output)::int8, octet_length(error)::int8 \
         FROM {{s}}.operation_outputs WHERE workflow_uuid = $1 AND function_id > $2 \
         ORDER BY function_id LIMIT $3"
    )
}

/// Puts workflow `id` back on `queue` from its last checkpoint, whatever its state (unless it
/// finished), and announces the takeover so the execution that owned it stops.
const RESUME: &str = r#"
WITH old AS (
    SELECT workflow_uuid, owner_xid, status FROM {s}.workflow_status
    WHERE workflow_uuid = $1 FOR UPDATE
), upd AS (
    UPDATE {s}.workflow_status w
    SET status = 'ENQUEUED', owner_xid = NULL, queue_name = $2, recovery_attempts = 0,
        workflow_deadline_epoch_ms = NULL, deduplication_id = NULL, started_at_epoch_ms = NULL,
        completed_at = NULL, updated_at = $3
    FROM old
    WHERE w.workflow_uuid = old.workflow_uuid AND old.status NOT IN ('SUCCESS', 'ERROR')
    RETURNING w.workflow_uuid
), taken AS (
    SELECT pg_notify('stead_cancel_channel', json_build_array(old.workflow_uuid, old.owner_xid)::text)::text
    FROM old JOIN upd ON upd.workflow_uuid = old.workflow_uuid WHERE old.owner_xid IS NOT NULL
), wake AS (
    SELECT pg_notify('stead_queue_channel', $2)::text FROM upd
)
SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM upd), (SELECT owner_xid FROM old),
       (SELECT count(*) FROM taken), (SELECT count(*) FROM wake)
"#;

/// A copy of workflow `$1` as `$2`, enqueued on `$3` (app version `$4`, or the original's),
/// with the original's recorded calls before `$5`, so it replays them and runs the rest.
const FORK: &str = r#"
WITH src AS (
    SELECT * FROM {s}.workflow_status WHERE workflow_uuid = $1
), made AS (
    INSERT INTO {s}.workflow_status (
        workflow_uuid, status, name, class_name, config_name, queue_name, application_version,
        application_name, authenticated_user, assumed_role, authenticated_roles, serialization,
        forked_from, recovery_attempts, priority, created_at, updated_at, workflow_timeout_ms,
        inputs, attributes)
    SELECT $2, 'ENQUEUED', name, class_name, config_name, $3, COALESCE($4, application_version),
        application_name, authenticated_user, assumed_role, authenticated_roles, serialization,
        $1, 0, 0, $6, $6, workflow_timeout_ms, inputs, attributes
    FROM src
    ON CONFLICT (workflow_uuid) DO NOTHING
    RETURNING workflow_uuid
), input AS (
    INSERT INTO {s}.workflow_input (workflow_uuid, inputs)
    SELECT $2, i.inputs FROM {s}.workflow_input i JOIN made ON true WHERE i.workflow_uuid = $1
), calls AS (
    INSERT INTO {s}.operation_outputs (workflow_uuid, function_id, function_name, output, error,
        child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms, serialization,
        application_name)
    SELECT $2, o.function_id, o.function_name, o.output, o.error, o.child_workflow_id,
        o.started_at_epoch_ms, o.completed_at_epoch_ms, o.serialization, o.application_name
    FROM {s}.operation_outputs o JOIN made ON true
    WHERE o.workflow_uuid = $1 AND o.function_id < $5
), history AS (
    INSERT INTO {s}.workflow_events_history (workflow_uuid, function_id, key, value, serialization)
    SELECT $2, h.function_id, h.key, h.value, h.serialization
    FROM {s}.workflow_events_history h JOIN made ON true
    WHERE h.workflow_uuid = $1 AND h.function_id < $5
), events AS (
    INSERT INTO {s}.workflow_events (workflow_uuid, key, value, serialization)
    SELECT DISTINCT ON (h.key) $2, h.key, h.value, h.serialization
    FROM {s}.workflow_events_history h JOIN made ON true
    WHERE h.workflow_uuid = $1 AND h.function_id < $5
    ORDER BY h.key, h.function_id DESC
), stream AS (
    INSERT INTO {s}.streams (workflow_uuid, key, value, "offset", function_id, serialization)
    SELECT $2, s.key, s.value, s."offset", s.function_id, s.serialization
    FROM {s}.streams s JOIN made ON true
    WHERE s.workflow_uuid = $1 AND s.function_id < $5
), mark AS (
    UPDATE {s}.workflow_status SET was_forked_from = true
    WHERE workflow_uuid = $1 AND EXISTS (SELECT 1 FROM made)
), wake AS (
    SELECT pg_notify('stead_queue_channel', $3)::text FROM made
)
SELECT (SELECT count(*) FROM src), (SELECT count(*) FROM made), (SELECT count(*) FROM wake)
"#;

/// [`FORK`]'s Citus form (`migrations/postgres/citus.sql`).
const CITUS_FORK: &str = "SELECT * FROM {s}.stead_fork($1::text, $2::text, $3::text, $4::text, \
    $5::int4, $6::int8)";

/// Deletes workflow `$1` (and its descendants when `$2`) with every row that belongs to it.
const DELETE: &str = r#"
WITH RECURSIVE tree AS (
    SELECT $1::text AS id
    UNION
    SELECT w.workflow_uuid FROM {s}.workflow_status w JOIN tree t ON w.parent_workflow_id = t.id
    WHERE $2
), calls AS (
    DELETE FROM {s}.operation_outputs WHERE workflow_uuid IN (SELECT id FROM tree)
), inputs AS (
    DELETE FROM {s}.workflow_input WHERE workflow_uuid IN (SELECT id FROM tree)
), outputs AS (
    DELETE FROM {s}.workflow_output WHERE workflow_uuid IN (SELECT id FROM tree)
), gone AS (
    DELETE FROM {s}.workflow_status WHERE workflow_uuid IN (SELECT id FROM tree)
    RETURNING workflow_uuid
)
SELECT workflow_uuid FROM gone
"#;

/// Replaces (`$3` false) or merges top-level keys into (`$3` true) the attributes of `$1`; a
/// stored value that is not an object merges as `{}`, as in DBOS.
const UPDATE_ATTRIBUTES: &str = r#"
UPDATE {s}.workflow_status
SET attributes = CASE WHEN $3 THEN
        (CASE WHEN jsonb_typeof(attributes) = 'object' THEN attributes ELSE '{}'::jsonb END)
        || $2::jsonb
    ELSE $2::jsonb END,
    updated_at = $4
WHERE workflow_uuid = $1
"#;

const SET_DELAY: &str = r#"
WITH upd AS (
    UPDATE {s}.workflow_status SET delay_until_epoch_ms = $2, updated_at = $3
    WHERE workflow_uuid = $1 AND status = 'DELAYED' RETURNING queue_name
), wake AS (
    SELECT pg_notify('stead_queue_channel', queue_name)::text FROM upd WHERE queue_name IS NOT NULL
)
SELECT w.status, w.queue_name, (SELECT count(*) FROM wake)
FROM {s}.workflow_status w WHERE w.workflow_uuid = $1
"#;

#[async_trait]
impl Manage for Postgres {
    async fn list_workflows(&self, q: &ListQuery) -> Result<Vec<ListedRow>, DbError> {
        let statement: &'static str = match (q.newest_first, self.links()) {
            (true, true) => &LIST_DESC,
            (false, true) => &LIST_ASC,
            (true, false) => &LIST_DESC_NO_LINKS,
            (false, false) => &LIST_ASC_NO_LINKS,
        };
        if !self.shards.sharded() {
            let query = self.sql.query(statement).bind(&q.ids).bind(&q.statuses);
            let rows = bind_filters(query, q).fetch_all(&self.pool).await?;
            return rows.iter().map(ListedRow::from_row).collect();
        }
        // Every bucket's first offset + limit rows, merged in the listing's order: a page costs
        // a read per bucket (this fans out).
        let each = ListQuery {
            limit: q.limit.map(|l| l.saturating_add(q.offset)),
            offset: 0,
            ..q.clone()
        };
        let mut listed = Vec::new();
        for sql in self.buckets().iter() {
            let query = sql.query(statement).bind(&each.ids).bind(&each.statuses);
            for row in bind_filters(query, &each).fetch_all(&self.pool).await? {
                listed.push(ListedRow::from_row(&row)?);
            }
        }
        listed.sort_by(|a, b| {
            let key = |r: &ListedRow| (r.status.created_at_ms, r.status.id.clone());
            match q.newest_first {
                true => key(b).cmp(&key(a)),
                false => key(a).cmp(&key(b)),
            }
        });
        let skip = usize::try_from(q.offset).unwrap_or(0);
        let take = q
            .limit
            .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(0));
        Ok(listed.into_iter().skip(skip).take(take).collect())
    }

    /// Every bucket's counts, added up (this fans out).
    async fn count_workflows(&self, q: &ListQuery) -> Result<Vec<StatusCount>, DbError> {
        let mut counts: Vec<StatusCount> = Vec::new();
        for sql in self.buckets().iter() {
            let query = sql.query(&COUNT).bind(&q.ids).bind(&q.statuses);
            let rows = bind_filters(query, q).fetch_all(&self.pool).await?;
            for count in all(&rows, StatusCount::from_row)? {
                match counts.iter_mut().find(|c| c.status == count.status) {
                    Some(c) => c.count += count.count,
                    None => counts.push(count),
                }
            }
        }
        Ok(counts)
    }

    async fn list_steps(&self, id: &str, q: &StepQuery) -> Result<Vec<StepListing>, DbError> {
        let statement: &'static str = if q.outputs { &STEPS } else { &STEPS_BARE };
        let rows = self
            .locate(id)
            .await?
            .query(statement)
            .bind(id)
            .bind(q.after)
            .bind(q.limit)
            .fetch_all(&self.pool)
            .await?;
        all(&rows, StepListing::from_row)
    }

    async fn resume(&self, id: &str, queue: &str) -> Result<Resumed, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(RESUME)
            .bind(id)
            .bind(queue)
            .bind(now_ms())
            .fetch_one(&self.pool)
            .await?;
        Ok(Resumed {
            exists: row.try_get::<i64, _>(0)? > 0,
            requeued: row.try_get::<i64, _>(1)? > 0,
            previous_owner: row.try_get(2)?,
        })
    }

    /// A fork lives in its original's bucket (under its shard key).
    async fn fork(&self, f: &Fork) -> Result<Forked, DbError> {
        let sql = self.locate(&f.id).await?;
        let row = sql
            .query(sql.dialect(FORK, CITUS_FORK))
            .bind(&f.id)
            .bind(&f.new_id)
            .bind(&f.queue)
            .bind(&f.app_version)
            .bind(f.from_step)
            // A new row: stamped like every row this process creates, so it sorts after them.
            .bind(crate::sysdb::next_created_at())
            .fetch_one(&self.pool)
            .await?;
        let forked = Forked {
            exists: row.try_get::<i64, _>(0)? > 0,
            made: row.try_get::<i64, _>(1)? > 0,
        };
        if forked.made && self.shards.sharded() {
            let b = self.router().locate(&f.id).await?;
            self.shards.remember(&f.new_id, b);
        }
        Ok(forked)
    }

    /// On a sharded layout a tree spans buckets: its workflows are found first, then each is
    /// deleted where it lives.
    async fn delete_workflow(&self, id: &str, cascade: bool) -> Result<Vec<String>, DbError> {
        let tree = match cascade && self.shards.sharded() {
            true => self.descendants(id).await?,
            false => vec![id.to_owned()],
        };
        let mut gone = Vec::new();
        for one in &tree {
            let deleted: Vec<String> = self
                .locate(one)
                .await?
                .query(DELETE)
                .bind(one)
                .bind(cascade && !self.shards.sharded())
                .fetch_scalars(&self.pool)
                .await?;
            for id in &deleted {
                self.shards.forget(id);
            }
            gone.extend(deleted);
        }
        Ok(gone)
    }

    async fn update_attributes(
        &self,
        id: &str,
        update: &AttributesUpdate,
    ) -> Result<bool, DbError> {
        let (value, merge) = match update {
            AttributesUpdate::Replace(value) => (value.as_deref(), false),
            AttributesUpdate::Merge(value) => (Some(value.as_str()), true),
        };
        let done = self
            .locate(id)
            .await?
            .query(UPDATE_ATTRIBUTES)
            .bind(id)
            .bind(value)
            .bind(merge)
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn set_delay(&self, id: &str, until: i64) -> Result<Option<Delayed>, DbError> {
        let row = self
            .locate(id)
            .await?
            .query(SET_DELAY)
            .bind(id)
            .bind(until)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(Delayed::from_row).transpose()?)
    }
}

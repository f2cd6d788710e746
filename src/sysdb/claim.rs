//! Claiming: one round trip takes a batch of a queue's enqueued workflows, sized to the smallest
//! of the caller's free slots, the queue's global concurrency and its rate limit (and, for a
//! partitioned queue, each partition's limits), marks them `PENDING` under fresh owner tokens,
//! and promotes due `DELAYED` rows to `ENQUEUED`.
//!
//! Claims that count a limit shared by every executor run in a transaction that first takes a
//! per-queue advisory lock, so two executors never count the same free slot; other claims are a
//! single `FOR UPDATE SKIP LOCKED` statement.

use futures::future::BoxFuture;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use super::rows::AnyRow;
use super::{BatchWrite, Sql};
use crate::clock::millis;
use crate::error::DbError;
use crate::queue::Queue;

/// A claim of up to `limit` workflows of `queue` for this executor.
#[derive(Debug, Clone)]
pub(crate) struct ClaimRequest {
    pub queue: Queue,
    pub limit: i64,
    /// Also count the queue's depth (done on the polling timer only: it scans the backlog).
    pub with_depth: bool,
    pub executor_id: String,
    pub app_version: String,
    pub app_name: Option<String>,
    pub now: i64,
}

/// A workflow this executor now owns and must run.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub recovery_attempts: i64,
    pub inputs: Option<String>,
    pub serialization: Option<String>,
    /// False when the workflow has never recorded a step: nothing to load before running it.
    pub has_steps: bool,
    /// When the workflow's time runs out, if it has a timeout.
    pub deadline: Option<i64>,
}

impl Claimed {
    /// Reads the columns of `RETURNING claimed_columns!()` starting at `at`.
    pub(super) fn from_row(row: &impl AnyRow, at: usize) -> Result<Claimed, sqlx::Error> {
        Ok(Claimed {
            id: row.at(at)?,
            name: row.at::<Option<String>>(at + 1)?.unwrap_or_default(),
            owner: row.at(at + 2)?,
            recovery_attempts: row.at::<Option<i64>>(at + 3)?.unwrap_or(0),
            inputs: row.at(at + 4)?,
            serialization: row.at(at + 5)?,
            has_steps: row.at(at + 6)?,
            deadline: row.at(at + 9)?,
        })
    }

    /// The dispatch order key of a row read by `from_row` at `at`: (priority, created_at).
    pub(super) fn order_key(row: &impl AnyRow, at: usize) -> Result<(i32, i64), sqlx::Error> {
        Ok((row.at(at + 7)?, row.at(at + 8)?))
    }
}

/// What a claim found besides the workflows it took.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimOutcome {
    /// In priority, then FIFO order.
    pub claimed: Vec<Claimed>,
    /// How many wanted rows the shared limits allowed (the claim may take fewer: locked rows,
    /// or none enqueued).
    pub allowed: i64,
    /// The rate limit (not the caller's slots) was what stopped the claim.
    pub rate_limited: bool,
    /// `DELAYED` rows that became due and are now `ENQUEUED`.
    pub promoted: i64,
    /// The earliest future due time of this queue's `DELAYED` rows.
    pub next_due: Option<i64>,
    /// `ENQUEUED` rows left, when asked for.
    pub depth: Option<i64>,
    /// `ENQUEUED` rows seen before the claim, counted up to one more than the claim could take:
    /// more than it took means work is still waiting.
    pub seen: i64,
    /// When rate-limited: when the oldest start leaves the window, freeing a start.
    pub rate_free_at: Option<i64>,
}

/// Budget: $4 free slots here, $7 global concurrency, $8/$9 rate limit (count, period ms).
const BUDGET: &str = r#"
WITH pending AS (
    SELECT count(*) AS n FROM {s}.workflow_status WHERE queue_name = $1 AND status = 'PENDING'
        AND $7::int8 IS NOT NULL
), recent AS (
    SELECT count(*) AS n FROM {s}.workflow_status
    WHERE queue_name = $1 AND rate_limited AND started_at_epoch_ms > $6 - $9::int8
        AND $8::int8 IS NOT NULL
), budget AS (
    SELECT GREATEST(0, LEAST($4::int8,
               COALESCE($7::int8 - (SELECT n FROM pending), $4::int8))) AS slots,
           GREATEST(0, COALESCE($8::int8 - (SELECT n FROM recent), $4::int8)) AS rate
), allowed AS (
    SELECT LEAST(slots, rate) AS n, rate < slots AS rate_limited FROM budget
)"#;

/// Candidates of an unpartitioned queue: the oldest enqueued rows by priority.
const PICK: &str = r#", c AS (
    SELECT workflow_uuid FROM {s}.workflow_status
    WHERE queue_name = $1 AND status = 'ENQUEUED'
      AND (application_version = $2 OR (application_version IS NULL AND NOT EXISTS {NEWER}))
      AND (application_name = $3 OR application_name IS NULL)
    ORDER BY priority, created_at
    LIMIT (SELECT n FROM allowed)
    FOR UPDATE SKIP LOCKED
)"#;

/// Candidates of a partitioned queue: per partition key, as many as its limits allow
/// ($11 concurrency, $12 worker concurrency, $13/$14 rate limit), oldest first.
const PICK_PARTITIONED: &str = r#", part_pending AS (
    SELECT queue_partition_key AS k, count(*) AS n,
           count(*) FILTER (WHERE executor_id = $5) AS mine
    FROM {s}.workflow_status WHERE queue_name = $1 AND status = 'PENDING' GROUP BY 1
), part_recent AS (
    SELECT queue_partition_key AS k, count(*) AS n FROM {s}.workflow_status
    WHERE queue_name = $1 AND rate_limited AND started_at_epoch_ms > $6 - $14::int8
        AND $13::int8 IS NOT NULL
    GROUP BY 1
), ranked AS (
    SELECT workflow_uuid, queue_partition_key AS k, priority, created_at,
           row_number() OVER (PARTITION BY queue_partition_key ORDER BY priority, created_at) AS rn
    FROM {s}.workflow_status
    WHERE queue_name = $1 AND status = 'ENQUEUED'
      AND (application_version = $2 OR (application_version IS NULL AND NOT EXISTS {NEWER}))
      AND (application_name = $3 OR application_name IS NULL)
), cand AS (
    SELECT r.workflow_uuid FROM ranked r
    LEFT JOIN part_pending p ON p.k = r.k
    LEFT JOIN part_recent x ON x.k = r.k
    WHERE r.rn <= COALESCE($11::int8 - COALESCE(p.n, 0), r.rn)
      AND r.rn <= COALESCE($12::int8 - COALESCE(p.mine, 0), r.rn)
      AND r.rn <= COALESCE($13::int8 - COALESCE(x.n, 0), r.rn)
    ORDER BY r.priority, r.created_at
    LIMIT (SELECT n FROM allowed)
), c AS (
    SELECT workflow_uuid FROM {s}.workflow_status
    WHERE workflow_uuid IN (SELECT workflow_uuid FROM cand) AND status = 'ENQUEUED'
    FOR UPDATE SKIP LOCKED
)"#;

/// Takes the candidates; promotes due delayed rows; reports the rest. One row at least (the
/// report); claimed workflows fill the remaining columns of each row.
const TAKE: &str = r#", claimed AS (
    UPDATE {s}.workflow_status w
    SET status = 'PENDING', owner_xid = gen_random_uuid()::text, executor_id = $5,
        application_version = $2, started_at_epoch_ms = $6, updated_at = $6,
        recovery_attempts = COALESCE(w.recovery_attempts, 0) + 1,
        rate_limited = ($8::int8 IS NOT NULL OR $13::int8 IS NOT NULL),
        workflow_deadline_epoch_ms = CASE
            WHEN w.workflow_timeout_ms IS NOT NULL AND w.workflow_deadline_epoch_ms IS NULL
            THEN $6 + w.workflow_timeout_ms ELSE w.workflow_deadline_epoch_ms END
    FROM c WHERE w.workflow_uuid = c.workflow_uuid
    RETURNING w.workflow_uuid, w.name, w.owner_xid, w.recovery_attempts,
        COALESCE((SELECT i.inputs FROM {s}.workflow_input i
                  WHERE i.workflow_uuid = w.workflow_uuid), w.inputs),
        w.serialization,
        EXISTS (SELECT 1 FROM {s}.operation_outputs o WHERE o.workflow_uuid = w.workflow_uuid),
        w.priority, w.created_at, w.workflow_deadline_epoch_ms
), promoted AS (
    -- A debounced row releases its debounce key as it leaves DELAYED: later calls start anew.
    UPDATE {s}.workflow_status SET status = 'ENQUEUED', updated_at = $6,
        deduplication_id = CASE WHEN is_debounced THEN NULL ELSE deduplication_id END
    WHERE status = 'DELAYED' AND delay_until_epoch_ms <= $6 AND queue_name = $1
    RETURNING 1
)
SELECT a.n, a.rate_limited, (SELECT count(*) FROM promoted),
       (SELECT min(delay_until_epoch_ms) FROM {s}.workflow_status
        WHERE status = 'DELAYED' AND queue_name = $1 AND delay_until_epoch_ms > $6),
       CASE WHEN $10 THEN (SELECT count(*) FROM {s}.workflow_status
                           WHERE queue_name = $1 AND status = 'ENQUEUED') END,
       (SELECT count(*) FROM (SELECT 1 FROM {s}.workflow_status
                              WHERE queue_name = $1 AND status = 'ENQUEUED'
                              LIMIT $4::int8 + 1) seen),
       CASE WHEN a.rate_limited THEN
           COALESCE((SELECT min(started_at_epoch_ms) FROM {s}.workflow_status
                     WHERE queue_name = $1 AND rate_limited
                       AND started_at_epoch_ms > $6 - $9::int8), $6) + $9::int8 END,
       claimed.*
FROM allowed a LEFT JOIN claimed ON true
"#;

/// A version of my application newer than mine ($2): then workflows enqueued without a version
/// are not mine to run. Uncorrelated, so Postgres evaluates it once per claim.
const NEWER: &str = "(SELECT 1 FROM {s}.application_versions me \
    JOIN {s}.application_versions v ON v.application_name IS NOT DISTINCT FROM me.application_name \
    WHERE me.version_name = $2 AND me.application_name IS NOT DISTINCT FROM $3 \
      AND v.version_timestamp > me.version_timestamp)";

pub(super) fn claim_sql() -> String {
    format!("{BUDGET}{PICK}{TAKE}").replace("{NEWER}", NEWER)
}

pub(super) fn claim_partitioned_sql() -> String {
    format!("{BUDGET}{PICK_PARTITIONED}{TAKE}").replace("{NEWER}", NEWER)
}

/// A stable 64-bit key for the queue's advisory lock (FNV-1a of schema and name).
fn lock_key(schema: &str, queue: &str) -> i64 {
    let key = format!("stead.claim:{schema}:{queue}");
    crate::hash::fnv1a(key.bytes()) as i64
}

async fn run_claim(
    sql: &Sql,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    let q = &r.queue;
    let statement = if q.partitioned {
        &sql.claim_partitioned
    } else {
        &sql.claim
    };
    let opt = |n: Option<u32>| n.map(i64::from);
    let rows = sqlx::query(statement.clone())
        .bind(&q.name)
        .bind(&r.app_version)
        .bind(&r.app_name)
        .bind(r.limit)
        .bind(&r.executor_id)
        .bind(r.now)
        .bind(opt(q.concurrency))
        .bind(q.rate_limit.map(|l| i64::from(l.limit)))
        .bind(q.rate_limit.map(|l| millis(l.period)))
        .bind(r.with_depth)
        .bind(opt(q.partition_concurrency))
        .bind(opt(q.partition_worker_concurrency))
        .bind(q.partition_rate_limit.map(|l| i64::from(l.limit)))
        .bind(q.partition_rate_limit.map(|l| millis(l.period)))
        .fetch_all(&mut *conn)
        .await?;
    let mut out = ClaimOutcome::default();
    let mut keyed = Vec::with_capacity(rows.len());
    for row in &rows {
        out.allowed = row.try_get(0)?;
        out.rate_limited = row.try_get(1)?;
        out.promoted = row.try_get(2)?;
        out.next_due = row.try_get(3)?;
        out.depth = row.try_get(4)?;
        out.seen = row.try_get(5)?;
        out.rate_free_at = row.try_get(6)?;
        if row.try_get::<Option<String>, _>(7)?.is_some() {
            let key = Claimed::order_key(row, 7)?;
            keyed.push((key, Claimed::from_row(row, 7)?));
        }
    }
    keyed.sort_by_key(|(key, _)| *key);
    out.claimed = keyed.into_iter().map(|(_, c)| c).collect();
    Ok(out)
}

/// A claim under the queue's advisory lock, so its counts of shared limits are exact.
async fn run_locked(
    sql: &Sql,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    let key = lock_key(&sql.schema, &r.queue.name);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN; SELECT pg_advisory_xact_lock({key})"
    )))
    .execute(&mut *conn)
    .await?;
    match run_claim(sql, conn, r).await {
        Ok(out) => {
            sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            Ok(out)
        }
        Err(e) => {
            // Leave the connection clean for the next flush (a lost one is dropped anyway).
            let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
            Err(e)
        }
    }
}

impl BatchWrite for ClaimRequest {
    type Out = ClaimOutcome;
    const LANE: &'static str = "claim";
    /// One claim per flush: a claim commits on its own, so a failure must not be retried as
    /// part of a batch (its neighbours' rows would be claimed twice).
    const MAX_BATCH: usize = 1;

    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<ClaimOutcome>, DbError>> {
        Box::pin(async move {
            let mut outs = Vec::with_capacity(batch.len());
            for r in batch {
                outs.push(if r.queue.shared_limits() {
                    run_locked(sql, conn, r).await?
                } else {
                    run_claim(sql, conn, r).await?
                });
            }
            Ok(outs)
        })
    }

    fn execute_lite<'a>(
        tx: &'a mut sqlx::sqlite::SqliteConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<ClaimOutcome>, DbError>> {
        Box::pin(super::sqlite::claim::execute(tx, batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_differ_by_queue_and_schema_and_are_stable() {
        assert_eq!(lock_key("dbos", "orders"), lock_key("dbos", "orders"));
        assert_ne!(lock_key("dbos", "orders"), lock_key("dbos", "mail"));
        assert_ne!(lock_key("dbos", "orders"), lock_key("tenant", "orders"));
    }
}

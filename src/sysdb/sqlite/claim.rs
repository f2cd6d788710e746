//! Claiming on SQLite, by the rules in `sysdb::claim`. The flush's write transaction already
//! excludes every other writer, so the counts of shared limits are exact without a lock of
//! their own, and the claim can be done step by step: promote due delayed rows, size the
//! budget, pick, take, report, promote. A claim's floor is ignored (no head is reported): one
//! writer leaves no row versions for a scan to pass.

use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::base::clock::millis;
use crate::error::DbError;
use crate::sysdb::claim::in_dispatch_order;
use crate::sysdb::{ClaimOutcome, ClaimRequest, Claimed};

/// Workflows enqueued without a version are run only by the latest version of the app.
const VERSION_FILTER: &str = "(application_version = ?2 OR (application_version IS NULL \
    AND NOT EXISTS (SELECT 1 FROM application_versions me \
        JOIN application_versions v ON v.application_name IS me.application_name \
        WHERE me.version_name = ?2 AND me.application_name IS ?3 \
          AND v.version_timestamp > me.version_timestamp))) \
    AND (application_name = ?3 OR application_name IS NULL) AND {UNPAUSED}";

/// Not a paused workflow (`sysdb::pauses`).
const UNPAUSED: &str = "NOT EXISTS (SELECT 1 FROM stead_workflow_pauses wp \
    WHERE wp.workflow_uuid = workflow_status.workflow_uuid)";

/// The columns a taken workflow reports, in the order `Claimed::keyed_from_row` reads them.
const CLAIMED_COLUMNS: &str = "w.workflow_uuid, w.name, w.owner_xid, \
    w.recovery_attempts, COALESCE((SELECT i.inputs FROM workflow_input i \
        WHERE i.workflow_uuid = w.workflow_uuid), w.inputs), \
    w.serialization, EXISTS (SELECT 1 FROM operation_outputs o \
        WHERE o.workflow_uuid = w.workflow_uuid), \
    w.priority, w.created_at, w.workflow_deadline_epoch_ms, \
    CASE WHEN json_valid(w.attributes) THEN w.attributes -> '$.\"dbos.otelContext\"' END, \
    w.delay_until_epoch_ms";

/// Claims by `r` inside the flush's write transaction.
pub(super) async fn run(
    tx: &mut SqliteConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    let q = &r.queue;
    let mut out = ClaimOutcome::default();

    // The shared limits: running workflows of the queue, and starts within the rate window.
    let (mut slots, mut rate) = (r.limit, r.limit);
    let window_start = q.rate_limit.map_or(0, |l| r.now - millis(l.period));
    if q.concurrency.is_some() || q.rate_limit.is_some() {
        let (pending, recent): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'PENDING'), \
                    count(*) FILTER (WHERE rate_limited AND started_at_epoch_ms > ?2) \
             FROM workflow_status WHERE queue_name = ?1",
        )
        .bind(&q.name)
        .bind(window_start)
        .fetch_one(&mut *tx)
        .await?;
        if let Some(global) = q.concurrency {
            slots = slots.min(i64::from(global) - pending);
        }
        if let Some(limit) = q.rate_limit {
            rate = i64::from(limit.limit) - recent;
        }
    }
    slots = slots.max(0);
    rate = rate.max(0);
    // A paused queue allows nothing (`sysdb::pauses`); its due delayed rows are still promoted.
    let paused = sqlx::query("SELECT 1 FROM stead_queue_pauses WHERE queue_name = ?1")
        .bind(&q.name)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    out.paused = paused;
    out.allowed = if paused { 0 } else { slots.min(rate) };
    out.rate_limited = rate < slots;

    let ids = pick(tx, r, out.allowed).await?;
    let mut keyed = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(row) = take(tx, r, &id).await? {
            keyed.push(Claimed::keyed_from_row(&row, 0)?);
        }
    }
    out.claimed = in_dispatch_order(keyed);
    report(tx, r, window_start, &mut out).await?;
    // Last, as Postgres's one statement does: rows promoted now are taken by the next claim.
    out.promoted = promote(tx, r).await?;
    Ok(out)
}

/// Moves the queue's due `DELAYED` rows to `ENQUEUED`. A debounced row releases its debounce
/// key as it leaves `DELAYED`: later calls start anew.
async fn promote(tx: &mut SqliteConnection, r: &ClaimRequest) -> Result<i64, DbError> {
    let promoted = sqlx::query(
        "UPDATE workflow_status SET status = 'ENQUEUED', updated_at = ?2, \
             deduplication_id = CASE WHEN is_debounced THEN NULL ELSE deduplication_id END \
         WHERE status = 'DELAYED' AND delay_until_epoch_ms <= ?2 AND queue_name = ?1",
    )
    .bind(&r.queue.name)
    .bind(r.now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(promoted as i64)
}

/// The ids to take, oldest first by priority; for a partitioned queue, per partition key as
/// many as its limits allow.
async fn pick(
    tx: &mut SqliteConnection,
    r: &ClaimRequest,
    allowed: i64,
) -> Result<Vec<String>, DbError> {
    if allowed <= 0 {
        return Ok(Vec::new());
    }
    let q = &r.queue;
    if !q.partitioned {
        let sql = format!(
            "SELECT workflow_uuid FROM workflow_status \
             WHERE queue_name = ?1 AND status = 'ENQUEUED' AND {VERSION_FILTER} \
             ORDER BY priority, created_at LIMIT CAST(?4 AS INTEGER)"
        )
        .replace("{UNPAUSED}", UNPAUSED);
        return Ok(sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(&q.name)
            .bind(&r.app_version)
            .bind(&r.app_name)
            .bind(allowed)
            .fetch_all(&mut *tx)
            .await?);
    }
    let sql = format!(
        "WITH part_pending AS ( \
            SELECT queue_partition_key AS k, count(*) AS n, \
                   count(*) FILTER (WHERE executor_id = ?5) AS mine \
            FROM workflow_status WHERE queue_name = ?1 AND status = 'PENDING' GROUP BY 1 \
         ), part_recent AS ( \
            SELECT queue_partition_key AS k, count(*) AS n FROM workflow_status \
            WHERE queue_name = ?1 AND rate_limited AND started_at_epoch_ms > ?6 - ?9 \
              AND ?8 IS NOT NULL GROUP BY 1 \
         ), ranked AS ( \
            SELECT workflow_uuid, queue_partition_key AS k, priority, created_at, \
                   row_number() OVER (PARTITION BY queue_partition_key \
                                      ORDER BY priority, created_at) AS rn \
            FROM workflow_status \
            WHERE queue_name = ?1 AND status = 'ENQUEUED' AND {VERSION_FILTER} \
         ) \
         SELECT r.workflow_uuid FROM ranked r \
         LEFT JOIN part_pending p ON p.k IS r.k LEFT JOIN part_recent x ON x.k IS r.k \
         WHERE r.rn <= COALESCE(?10 - COALESCE(p.n, 0), r.rn) \
           AND r.rn <= COALESCE(?7 - COALESCE(p.mine, 0), r.rn) \
           AND r.rn <= COALESCE(?8 - COALESCE(x.n, 0), r.rn) \
         ORDER BY r.priority, r.created_at LIMIT CAST(?4 AS INTEGER)"
    )
    .replace("{UNPAUSED}", UNPAUSED);
    let opt = |n: Option<u32>| n.map(i64::from);
    Ok(sqlx::query_scalar(AssertSqlSafe(sql))
        .bind(&q.name)
        .bind(&r.app_version)
        .bind(&r.app_name)
        .bind(allowed)
        .bind(&r.executor_id)
        .bind(r.now)
        .bind(opt(q.partition_worker_concurrency))
        .bind(q.partition_rate_limit.map(|l| i64::from(l.limit)))
        .bind(q.partition_rate_limit.map(|l| millis(l.period)))
        .bind(opt(q.partition_concurrency))
        .fetch_all(&mut *tx)
        .await?)
}

/// Marks `id` `PENDING` under a fresh owner token for this executor.
async fn take(
    tx: &mut SqliteConnection,
    r: &ClaimRequest,
    id: &str,
) -> Result<Option<SqliteRow>, DbError> {
    let taken = sqlx::query(
        "UPDATE workflow_status \
         SET status = 'PENDING', owner_xid = ?2, executor_id = ?3, application_version = ?4, \
             started_at_epoch_ms = ?5, updated_at = ?5, \
             recovery_attempts = COALESCE(recovery_attempts, 0) + 1, rate_limited = ?6, \
             application_name = COALESCE(application_name, ?7), \
             workflow_deadline_epoch_ms = CASE \
                 WHEN workflow_timeout_ms IS NOT NULL AND workflow_deadline_epoch_ms IS NULL \
                 THEN ?5 + workflow_timeout_ms ELSE workflow_deadline_epoch_ms END \
         WHERE workflow_uuid = ?1 AND status = 'ENQUEUED'",
    )
    .bind(id)
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(&r.executor_id)
    .bind(&r.app_version)
    .bind(r.now)
    .bind(r.rate_limited())
    .bind(&r.app_name)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !taken {
        return Ok(None);
    }
    Ok(Some(claimed_row(tx, id).await?))
}

/// What a taken workflow reports (read after the update: SQLite's `RETURNING` cannot name the
/// table through an alias, which the correlated subqueries need).
pub(super) async fn claimed_row(tx: &mut SqliteConnection, id: &str) -> Result<SqliteRow, DbError> {
    let sql = format!("SELECT {CLAIMED_COLUMNS} FROM workflow_status w WHERE w.workflow_uuid = ?1");
    Ok(sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?)
}

/// What remains after the claim (before its promotion): the next due delayed row, whether work
/// waits, and when a rate-limited queue frees its next start.
async fn report(
    tx: &mut SqliteConnection,
    r: &ClaimRequest,
    window_start: i64,
    out: &mut ClaimOutcome,
) -> Result<(), DbError> {
    let q = &r.queue;
    let row = sqlx::query(
        "SELECT (SELECT min(delay_until_epoch_ms) FROM workflow_status \
                 WHERE status = 'DELAYED' AND queue_name = ?1 AND delay_until_epoch_ms > ?2), \
                (SELECT count(*) FROM (SELECT 1 FROM workflow_status \
                 WHERE queue_name = ?1 AND status = 'ENQUEUED' AND NOT EXISTS \
                   (SELECT 1 FROM stead_workflow_pauses wp \
                    WHERE wp.workflow_uuid = workflow_status.workflow_uuid) LIMIT ?3 + 1)), \
                (SELECT min(started_at_epoch_ms) FROM workflow_status \
                 WHERE queue_name = ?1 AND rate_limited AND started_at_epoch_ms > ?4)",
    )
    .bind(&q.name)
    .bind(r.now)
    .bind(r.limit)
    .bind(window_start)
    .fetch_one(&mut *tx)
    .await?;
    out.next_due = row.try_get(0)?;
    // As seen before the claim: what is left plus what was taken, capped as Postgres counts it.
    let left: i64 = row.try_get(1)?;
    out.seen = (left + out.claimed.len() as i64).min(r.limit + 1);
    if out.rate_limited {
        let period = q.rate_limit.map(|l| millis(l.period)).unwrap_or(0);
        let oldest: Option<i64> = row.try_get(2)?;
        out.rate_free_at = Some(oldest.unwrap_or(r.now) + period);
    }
    Ok(())
}

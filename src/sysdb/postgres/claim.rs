//! Claiming on Postgres: one statement takes a batch of a queue's enqueued workflows by the
//! rules in `sysdb::claim` (budget, pick, take, promote, report as CTEs: one round trip).
//!
//! A claim that counts a limit shared by every executor runs in a transaction that first takes
//! a per-queue advisory lock, so two executors never count the same free slot; other claims are
//! the single `FOR UPDATE SKIP LOCKED` statement.
//!
//! **Round trips.** The locked claim is `BEGIN; pg_advisory_xact_lock` in one round trip, then the
//! claim, then `COMMIT`: 3 round trips, paid only by queues with a shared limit (global
//! concurrency, rate limits, partition limits); worker concurrency is counted in the caller's slot
//! permits. Each claim also reports the next due time of a `DELAYED` row (the actor wakes then),
//! whether work remains (`seen`), and, when rate-limited, when the window frees a start (the actor
//! retries then, not at the next poll). The claim updates its candidates by an array of ids: joined
//! to them (a count the planner cannot know) it hashed the whole status table and every step row on
//! each claim of a deep backlog, 310 ms at 44,000 claimed against 4.9 ms now.
//!
//! **Floors.** An unpartitioned queue's pick and its `seen` count each read two index ranges:
//! rows more urgent than the floor's priority, and rows at or above the floor (a row comparison
//! the index scan starts at). A queue of one priority finds the first range empty at once. Rows
//! the urgent and the floored range both lock beyond the first `n` are left enqueued.

use std::sync::LazyLock;

use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use super::sql::Sql;
use crate::base::clock::millis;
use crate::error::DbError;
use crate::sysdb::claim::in_dispatch_order;
use crate::sysdb::{ClaimOutcome, ClaimRequest, Claimed, QueueKey};

/// Built once per process; `Sql::get` splices the schema in.
static CLAIM_PARTITIONED: LazyLock<String> = LazyLock::new(claim_partitioned_sql);

/// Built once per process; `Sql::get` splices the schema in.
pub(super) static CLAIM: LazyLock<String> = LazyLock::new(claim_sql);

/// Budget: $4 free slots here, $7 global concurrency, $8/$9 rate limit (count, period ms);
/// none while the queue is paused.
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
    -- A paused queue allows nothing (`sysdb::pauses`): a key probe, once per claim.
    SELECT CASE WHEN p.paused THEN 0 ELSE LEAST(slots, rate) END AS n,
           rate < slots AS rate_limited, p.paused
    FROM budget,
         (SELECT EXISTS (SELECT 1 FROM {s}.stead_queue_pauses WHERE queue_name = $1) AS paused) p
)"#;

/// Candidates of an unpartitioned queue: the oldest enqueued rows by priority, from two index
/// ranges: rows more urgent than the floor's priority, and rows at or above the floor.
const PICK: &str = r#", c_urgent AS (
    SELECT workflow_uuid, priority, created_at FROM {s}.workflow_status
    WHERE queue_name = $1 AND status = 'ENQUEUED' AND priority < {FLOOR_P} AND {RUNNABLE}
    ORDER BY priority, created_at
    LIMIT (SELECT n FROM allowed)
    FOR UPDATE SKIP LOCKED
), c_rest AS (
    SELECT workflow_uuid, priority, created_at FROM {s}.workflow_status
    WHERE queue_name = $1 AND status = 'ENQUEUED' AND {FLOOR} AND {RUNNABLE}
    ORDER BY priority, created_at
    LIMIT (SELECT n FROM allowed)
    FOR UPDATE SKIP LOCKED
), c AS (
    -- Rows locked here but not among the first `n` stay enqueued (unlocked at the end).
    SELECT workflow_uuid FROM (SELECT * FROM c_urgent UNION ALL SELECT * FROM c_rest) x
    ORDER BY priority, created_at
    LIMIT (SELECT n FROM allowed)
)"#;

/// Candidates of a partitioned queue: per partition key, as many as its limits allow
/// ($10 concurrency, $11 worker concurrency, $12/$13 rate limit), oldest first.
const PICK_PARTITIONED: &str = r#", part_pending AS (
    SELECT queue_partition_key AS k, count(*) AS n,
           count(*) FILTER (WHERE executor_id = $5) AS mine
    FROM {s}.workflow_status WHERE queue_name = $1 AND status = 'PENDING' GROUP BY 1
), part_recent AS (
    SELECT queue_partition_key AS k, count(*) AS n FROM {s}.workflow_status
    WHERE queue_name = $1 AND rate_limited AND started_at_epoch_ms > $6 - $13::int8
        AND $12::int8 IS NOT NULL
    GROUP BY 1
), ranked AS (
    SELECT workflow_uuid, queue_partition_key AS k, priority, created_at,
           row_number() OVER (PARTITION BY queue_partition_key ORDER BY priority, created_at) AS rn
    FROM {s}.workflow_status
    WHERE queue_name = $1 AND status = 'ENQUEUED' AND {RUNNABLE}
), cand AS (
    SELECT r.workflow_uuid FROM ranked r
    LEFT JOIN part_pending p ON p.k = r.k
    LEFT JOIN part_recent x ON x.k = r.k
    WHERE r.rn <= COALESCE($10::int8 - COALESCE(p.n, 0), r.rn)
      AND r.rn <= COALESCE($11::int8 - COALESCE(p.mine, 0), r.rn)
      AND r.rn <= COALESCE($12::int8 - COALESCE(x.n, 0), r.rn)
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
    SET status = 'PENDING', owner_xid = {FRESH_OWNER}, executor_id = $5,
        application_version = $2, started_at_epoch_ms = $6, updated_at = $6,
        recovery_attempts = COALESCE(w.recovery_attempts, 0) + 1,
        -- An unowned row becomes this application's once it runs here.
        application_name = COALESCE(w.application_name, $3),
        rate_limited = ($8::int8 IS NOT NULL OR $12::int8 IS NOT NULL),
        workflow_deadline_epoch_ms = CASE
            WHEN w.workflow_timeout_ms IS NOT NULL AND w.workflow_deadline_epoch_ms IS NULL
            THEN $6 + w.workflow_timeout_ms ELSE w.workflow_deadline_epoch_ms END
    -- By an array of ids: joined to `c`, whose size the planner cannot know (its LIMIT is a
    -- subquery), it may hash the whole table and every step row per claim (W6).
    WHERE w.workflow_uuid = ANY(ARRAY(SELECT workflow_uuid FROM c))
    RETURNING w.workflow_uuid, w.name, w.owner_xid, w.recovery_attempts,
        COALESCE((SELECT i.inputs FROM {s}.workflow_input i
                  WHERE i.workflow_uuid = w.workflow_uuid), w.inputs),
        w.serialization,
        -- A probe, not EXISTS: a lane's generic plan, made while the table was small, ran
        -- EXISTS as a hashed subplan that read every step row on each claim (W6).
        (SELECT true FROM {s}.operation_outputs o WHERE o.workflow_uuid = w.workflow_uuid
         LIMIT 1) IS NOT NULL,
        w.priority, w.created_at, w.workflow_deadline_epoch_ms,
        (w.attributes -> 'dbos.otelContext')::text, w.delay_until_epoch_ms
), promoted AS (
    -- A debounced row releases its debounce key as it leaves DELAYED: later calls start anew.
    UPDATE {s}.workflow_status SET status = 'ENQUEUED', updated_at = $6,
        deduplication_id = CASE WHEN is_debounced THEN NULL ELSE deduplication_id END
    WHERE status = 'DELAYED' AND delay_until_epoch_ms <= $6 AND queue_name = $1
    RETURNING 1
), seen AS (
    -- In the index's order: unordered, a planner that thinks the queue deep picks a heap scan
    -- that passes every row claimed since (the deep-backlog workload, W6).
    SELECT priority, created_at FROM (
        (SELECT priority, created_at FROM {s}.workflow_status
         WHERE queue_name = $1 AND status = 'ENQUEUED' AND priority < {FLOOR_P} AND {UNPAUSED}
         ORDER BY priority, created_at LIMIT $4::int8 + 1)
        UNION ALL
        (SELECT priority, created_at FROM {s}.workflow_status
         WHERE queue_name = $1 AND status = 'ENQUEUED' AND {FLOOR} AND {UNPAUSED}
         ORDER BY priority, created_at LIMIT $4::int8 + 1)
    ) x
    ORDER BY priority, created_at
    LIMIT $4::int8 + 1
)
SELECT a.n, a.rate_limited, (SELECT count(*) FROM promoted),
       (SELECT min(delay_until_epoch_ms) FROM {s}.workflow_status
        WHERE status = 'DELAYED' AND queue_name = $1 AND delay_until_epoch_ms > $6),
       (SELECT count(*) FROM seen),
       CASE WHEN a.rate_limited THEN
           COALESCE((SELECT min(started_at_epoch_ms) FROM {s}.workflow_status
                     WHERE queue_name = $1 AND rate_limited
                       AND started_at_epoch_ms > $6 - $9::int8), $6) + $9::int8 END,
       head.priority, head.created_at, a.paused,
       claimed.*
FROM allowed a
LEFT JOIN (SELECT priority, created_at FROM seen ORDER BY priority, created_at LIMIT 1) head
    ON true
LEFT JOIN claimed ON true
"#;

/// A version of my application newer than mine ($2): then workflows enqueued without a version
/// are not mine to run. Uncorrelated, so Postgres evaluates it once per claim.
const NEWER: &str = "(SELECT 1 FROM {s}.application_versions me \
    JOIN {s}.application_versions v ON v.application_name IS NOT DISTINCT FROM me.application_name \
    WHERE me.version_name = $2 AND me.application_name IS NOT DISTINCT FROM $3 \
      AND v.version_timestamp > me.version_timestamp)";

/// Rows this executor may run: of its version, or of none while no newer version is registered;
/// of its application, or of none; not paused.
const RUNNABLE: &str = "(application_version = $2 OR (application_version IS NULL \
    AND NOT EXISTS {NEWER})) AND (application_name = $3 OR application_name IS NULL) \
    AND {UNPAUSED}";

/// Not a paused workflow (`sysdb::pauses`): a key probe of a table that is usually empty.
const UNPAUSED: &str = "NOT EXISTS (SELECT 1 FROM {s}.stead_workflow_pauses wp \
    WHERE wp.workflow_uuid = workflow_status.workflow_uuid)";

/// The claim's floor: $14 priority, $15 `created_at` (none: below every row).
const FLOOR_P: &str = "COALESCE($14::int4, (-2147483648)::int4)";
const FLOOR_T: &str = "COALESCE($15::int8, (-9223372036854775808)::int8)";

/// At or above the floor, as a row comparison: the index scan starts there instead of passing
/// what lies below.
const FLOOR: &str = "(priority, created_at) >= ({FLOOR_P}, {FLOOR_T})";

/// Each claimed row's owner token: fresh per claim ($16, a random UUID) and per workflow. Not
/// `gen_random_uuid()`, which Citus refuses in a write.
const FRESH_OWNER: &str = "md5($16 || w.workflow_uuid)::uuid::text";

/// Splices the shared fragments into a claim statement.
pub(super) fn spliced(sql: String) -> String {
    sql.replace("{FRESH_OWNER}", FRESH_OWNER)
        .replace("{RUNNABLE}", RUNNABLE)
        .replace("{UNPAUSED}", UNPAUSED)
        .replace("{NEWER}", NEWER)
        .replace("{FLOOR}", FLOOR)
        .replace("{FLOOR_P}", FLOOR_P)
        .replace("{FLOOR_T}", FLOOR_T)
}

fn claim_sql() -> String {
    spliced(format!("{BUDGET}{PICK}{TAKE}"))
}

/// A partitioned queue's pick ranks every enqueued row per key, so it takes no floor.
fn claim_partitioned_sql() -> String {
    spliced(format!("{BUDGET}{PICK_PARTITIONED}{TAKE}"))
}

/// A stable 64-bit key for the queue's advisory lock (FNV-1a of schema and name).
pub(super) fn lock_key(schema: &str, queue: &str) -> i64 {
    let key = format!("stead.claim:{schema}:{queue}");
    crate::base::hash::fnv1a(key.bytes()) as i64
}

pub(super) async fn run_claim(
    sql: &Sql,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    let (mut out, keyed) = run_claim_keyed(sql, conn, r).await?;
    out.claimed = in_dispatch_order(keyed);
    Ok(out)
}

/// [`run_claim`], its claimed workflows left with their dispatch keys (for a claim across
/// buckets, which orders them all).
pub(super) async fn run_claim_keyed(
    sql: &Sql,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<(ClaimOutcome, Vec<(QueueKey, Claimed)>), DbError> {
    let q = &r.queue;
    let statement: &'static str = if q.partitioned {
        &CLAIM_PARTITIONED
    } else {
        &CLAIM
    };
    let opt = |n: Option<u32>| n.map(i64::from);
    let rows = sql
        .query(statement)
        .bind(&q.name)
        .bind(&r.app_version)
        .bind(&r.app_name)
        .bind(r.limit)
        .bind(&r.executor_id)
        .bind(r.now)
        .bind(opt(q.concurrency))
        .bind(q.rate_limit.map(|l| i64::from(l.limit)))
        .bind(q.rate_limit.map(|l| millis(l.period)))
        .bind(opt(q.partition_concurrency))
        .bind(opt(q.partition_worker_concurrency))
        .bind(q.partition_rate_limit.map(|l| i64::from(l.limit)))
        .bind(q.partition_rate_limit.map(|l| millis(l.period)))
        .bind(r.floor.map(|f| f.0))
        .bind(r.floor.map(|f| f.1))
        .bind(uuid::Uuid::new_v4().to_string())
        .fetch_all(&mut *conn)
        .await?;
    let mut out = ClaimOutcome::default();
    let mut keyed = Vec::with_capacity(rows.len());
    for row in &rows {
        out.allowed = row.try_get(0)?;
        out.rate_limited = row.try_get(1)?;
        out.promoted = row.try_get(2)?;
        out.next_due = row.try_get(3)?;
        out.seen = row.try_get(4)?;
        out.rate_free_at = row.try_get(5)?;
        let head: (Option<i32>, Option<i64>) = (row.try_get(6)?, row.try_get(7)?);
        out.head = head.0.zip(head.1);
        out.paused = row.try_get(8)?;
        if row.try_get::<Option<String>, _>(9)?.is_some() {
            keyed.push(Claimed::keyed_from_row(row, 9)?);
        }
    }
    Ok((out, keyed))
}

/// A claim under the queue's advisory lock, so its counts of shared limits are exact.
async fn run_locked(
    sql: &Sql,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    let key = lock_key(&sql.schema, &r.queue.name);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN; SELECT pg_advisory_xact_lock({key}){}",
        anchor(sql)
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

/// Where an advisory lock is taken: on Citus, through a table of the schema (`FROM`), so the
/// lock is taken on the schema's node whichever node this connection is on (an advisory lock is
/// per node); on Postgres, nothing.
pub(super) fn anchor(sql: &Sql) -> String {
    match sql.is_citus() {
        true => format!(", count(*) FROM \"{}\".dbos_migrations", sql.schema),
        false => String::new(),
    }
}

/// Claims by `r`: under the queue's advisory lock when it counts a shared limit.
pub(super) async fn run(
    sql: &Sql,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    if r.queue.shared_limits() {
        run_locked(sql, conn, r).await
    } else {
        run_claim(sql, conn, r).await
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

//! Claims on a sharded layout (`shards.rs`): one queue spread over buckets, claimed without a
//! lock across nodes and with every rule of `sysdb::claim` kept across them.
//!
//! **A round.** Each bucket is surveyed (one read: its first waiting rows this executor may run,
//! by priority then age, at or above the claim's floor; whether it has delayed rows due or later,
//! and whether the queue is paused); the surveys are merged into the queue's order, and the
//! request's first rows decide each bucket's share; then each bucket with a share (or delayed
//! rows to promote) claims that many, by the claim statement of one bucket. So priority and FIFO
//! order hold across buckets as on one database (rows locked by another claimer are passed over,
//! as `SKIP LOCKED` passes them), and the floor and head work as there.
//!
//! **Shared limits.** A queue with a global concurrency or rate limit claims under its lock,
//! anchored in the home (so on Citus it is one lock for every node), counts each bucket's
//! running workflows and recent starts first, and gives each bucket's claim the queue's limits
//! less what the others hold: exact across buckets. Partition limits are counted in each
//! bucket; a workflow on a partitioned queue lives under its partition key (`shards.rs`), so a
//! partition's workflows share a bucket and its limits are exact too, unless a caller gave
//! them other shard keys.

use std::sync::{Arc, LazyLock};

use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use super::claim::{anchor, lock_key, run_claim_keyed, spliced};
use super::route::Router;
use super::sql::Sql;
use crate::base::clock::millis;
use crate::error::DbError;
use crate::sysdb::claim::in_dispatch_order;
use crate::sysdb::{ClaimOutcome, ClaimRequest, QueueKey};

/// A bucket's survey: its first $4 + 1 waiting rows this executor may run (priority, age),
/// urgent ones and those at or above the floor ($5, $6), as a claim's pick ranges them; then
/// (on every row, or one row of NULLs when none waits) whether delayed rows are due ($7 now),
/// the earliest later due time, and whether the queue is paused.
pub(super) static SURVEY: LazyLock<String> = LazyLock::new(|| {
    let rows = "(SELECT priority, created_at FROM {s}.workflow_status \
         WHERE queue_name = $1 AND status = 'ENQUEUED' AND priority < {FLOOR_P} AND {RUNNABLE} \
         ORDER BY priority, created_at LIMIT $4::int8 + 1) \
         UNION ALL \
         (SELECT priority, created_at FROM {s}.workflow_status \
         WHERE queue_name = $1 AND status = 'ENQUEUED' AND {FLOOR} AND {RUNNABLE} \
         ORDER BY priority, created_at LIMIT $4::int8 + 1)";
    spliced(format!(
        "SELECT x.priority, x.created_at, \
           EXISTS (SELECT 1 FROM {{s}}.workflow_status WHERE status = 'DELAYED' \
                   AND queue_name = $1 AND delay_until_epoch_ms <= $7), \
           (SELECT min(delay_until_epoch_ms) FROM {{s}}.workflow_status \
            WHERE status = 'DELAYED' AND queue_name = $1 AND delay_until_epoch_ms > $7), \
           EXISTS (SELECT 1 FROM {{s}}.stead_queue_pauses WHERE queue_name = $1) \
         FROM (SELECT 1) one \
         LEFT JOIN (SELECT * FROM ({rows}) r ORDER BY priority, created_at \
                    LIMIT $4::int8 + 1) x ON true"
    ))
    .replace("$14", "$5")
    .replace("$15", "$6")
});

/// A bucket's share of queue $1's shared limits: its running workflows, its starts within the
/// rate limit's window ($2 now, $3 period ms), and the oldest of those.
const SHARE: &str = "SELECT count(*) FILTER (WHERE status = 'PENDING'), \
    count(*) FILTER (WHERE rate_limited AND started_at_epoch_ms > $2 - $3::int8), \
    min(started_at_epoch_ms) FILTER (WHERE rate_limited AND started_at_epoch_ms > $2 - $3::int8) \
    FROM {s}.workflow_status \
    WHERE queue_name = $1 AND (status = 'PENDING' OR (rate_limited AND $3::int8 IS NOT NULL))";

/// One bucket's survey.
struct Survey {
    rows: Vec<QueueKey>,
    due: bool,
    next_due: Option<i64>,
    paused: bool,
}

/// What the buckets hold against the queue's shared limits.
#[derive(Default, Clone, Copy)]
struct Share {
    running: i64,
    recent: i64,
    oldest_recent: Option<i64>,
}

/// Claims by `r` across the buckets (see the module's doc).
pub(super) async fn run(
    router: &Router,
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<ClaimOutcome, DbError> {
    let buckets = router.shards.all();
    let shared = r.queue.shared_limits();
    if shared {
        let key = lock_key(&buckets[0].schema, &r.queue.name);
        sqlx::raw_sql(AssertSqlSafe(format!(
            "BEGIN; SELECT pg_advisory_xact_lock({key}){}",
            anchor(&buckets[0])
        )))
        .execute(&mut *conn)
        .await?;
    }
    let claimed = round(router, &buckets, conn, r, shared).await;
    if shared {
        let end = if claimed.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        let ended = sqlx::raw_sql(end).execute(&mut *conn).await;
        if claimed.is_ok() {
            ended?;
        }
    }
    claimed
}

async fn round(
    router: &Router,
    buckets: &[Arc<Sql>],
    conn: &mut PgConnection,
    r: &ClaimRequest,
    shared: bool,
) -> Result<ClaimOutcome, DbError> {
    let shares = match shared {
        true => shares(buckets, conn, r).await?,
        false => vec![Share::default(); buckets.len()],
    };
    let mut surveys = Vec::with_capacity(buckets.len());
    for sql in buckets {
        surveys.push(survey(sql, conn, r).await?);
    }
    let paused = surveys.iter().any(|s| s.paused);
    let (allowed, rate_limited) = budget(r, &shares, paused);
    let mut waiting: Vec<(QueueKey, usize)> = surveys
        .iter()
        .enumerate()
        .flat_map(|(b, s)| s.rows.iter().map(move |k| (*k, b)))
        .collect();
    waiting.sort();
    let mut out = ClaimOutcome {
        allowed,
        rate_limited,
        paused,
        seen: (waiting.len() as i64).min(r.limit + 1),
        head: waiting.first().map(|(k, _)| *k),
        next_due: surveys.iter().filter_map(|s| s.next_due).min(),
        ..ClaimOutcome::default()
    };
    if rate_limited {
        let oldest = shares.iter().filter_map(|s| s.oldest_recent).min();
        let period = r.queue.rate_limit.map(|l| millis(l.period)).unwrap_or(0);
        out.rate_free_at = Some(oldest.unwrap_or(r.now) + period);
    }
    let take = usize::try_from(allowed).unwrap_or(0).min(waiting.len());
    let mut claimed = Vec::new();
    for (b, sql) in buckets.iter().enumerate() {
        let share = waiting[..take].iter().filter(|(_, of)| *of == b).count() as i64;
        if share == 0 && !surveys[b].due {
            continue;
        }
        let elsewhere = shares.iter().enumerate().filter(|(o, _)| *o != b);
        let (running, recent) =
            elsewhere.fold((0, 0), |a, (_, s)| (a.0 + s.running, a.1 + s.recent));
        let request = ClaimRequest {
            queue: r.queue.less(running, recent),
            limit: share,
            ..r.clone()
        };
        let (got, keyed) = run_claim_keyed(sql, conn, &request).await?;
        for (_, c) in &keyed {
            router.shards.remember(&c.id, b as u16);
        }
        out.promoted += got.promoted;
        claimed.extend(keyed);
    }
    out.claimed = in_dispatch_order(claimed);
    Ok(out)
}

/// How many rows the queue's limits allow now, and whether the rate limit is what binds.
fn budget(r: &ClaimRequest, shares: &[Share], paused: bool) -> (i64, bool) {
    if paused {
        return (0, false);
    }
    let running: i64 = shares.iter().map(|s| s.running).sum();
    let recent: i64 = shares.iter().map(|s| s.recent).sum();
    let slots = match r.queue.concurrency {
        Some(c) => r.limit.min(i64::from(c) - running).max(0),
        None => r.limit,
    };
    let rate = match r.queue.rate_limit {
        Some(l) => (i64::from(l.limit) - recent).max(0),
        None => r.limit,
    };
    (slots.min(rate), rate < slots)
}

async fn shares(
    buckets: &[Arc<Sql>],
    conn: &mut PgConnection,
    r: &ClaimRequest,
) -> Result<Vec<Share>, DbError> {
    let period = r.queue.rate_limit.map(|l| millis(l.period));
    let mut shares = Vec::with_capacity(buckets.len());
    for sql in buckets {
        let row = sql
            .query(SHARE)
            .bind(&r.queue.name)
            .bind(r.now)
            .bind(period)
            .fetch_one(&mut *conn)
            .await?;
        shares.push(Share {
            running: row.try_get(0)?,
            recent: row.try_get(1)?,
            oldest_recent: row.try_get(2)?,
        });
    }
    Ok(shares)
}

async fn survey(sql: &Sql, conn: &mut PgConnection, r: &ClaimRequest) -> Result<Survey, DbError> {
    let rows = sql
        .query(&SURVEY)
        .bind(&r.queue.name)
        .bind(&r.app_version)
        .bind(&r.app_name)
        .bind(r.limit)
        .bind(r.floor.map(|f| f.0))
        .bind(r.floor.map(|f| f.1))
        .bind(r.now)
        .fetch_all(&mut *conn)
        .await?;
    let mut survey = Survey {
        rows: Vec::with_capacity(rows.len()),
        due: false,
        next_due: None,
        paused: false,
    };
    for row in &rows {
        let key: (Option<i32>, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
        if let (Some(p), Some(c)) = key {
            survey.rows.push((p, c));
        }
        survey.due = row.try_get(2)?;
        survey.next_due = row.try_get(3)?;
        survey.paused = row.try_get(4)?;
    }
    Ok(survey)
}

//! W9, a held snapshot: a producer `Client` enqueues at a fixed `--rate` (workflows/s) onto queue
//! `heldq` (worker concurrency `--conc`, default 8), each workflow one step sleeping 1 ms, served by
//! a runtime in this process. After `--clean-s` seconds another connection runs `BEGIN; SELECT
//! txid_current();` and stays idle for `--hold-s` seconds (vacuum can then remove nothing newer),
//! then commits; the run goes on for `--after-s` seconds more.
//!
//! Reports per 10 s slice: completions/s, claim latency (enqueue → step start) p50/p99 of the
//! steps started in it, and the backlog (acknowledged enqueues not yet finished) at its end; and at
//! each phase's end the dead tuples, updates (HOT among them) and sizes of the system tables and
//! their indexes. The enqueue time travels as the input, so the latency needs no query.
//!
//! The producer keeps offering at the rate whatever the queue does (up to 5,000 enqueues in
//! flight; `shed` counts offers it dropped beyond that). Run it with autovacuum on:
//! `benches/w9.sh` makes a cluster of its own for that (the shared server has it off).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sqlx::Connection;
use stead::{Client, Context, Queue, Runtime, WorkflowOptions};

use crate::Args;

const QUEUE: &str = "heldq";
const SLICE_MS: u64 = 10_000;
const MAX_IN_FLIGHT: u64 = 5_000;

/// Steps started: (ms since the run began, enqueue → start in µs).
static STARTS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
/// Workflows finished: ms since the run began.
static DONE: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static BEGAN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn since_start_ms() -> u64 {
    BEGAN.get().map_or(0, |b| b.elapsed().as_millis() as u64)
}

fn push<T>(v: &Mutex<Vec<T>>, x: T) {
    if let Ok(mut v) = v.lock() {
        v.push(x);
    }
}

/// One step sleeping 1 ms; its input is the producer's clock at the enqueue (µs).
async fn job(ctx: Context, enqueued_us: u64) -> stead::Result<()> {
    ctx.step("sleep", || async move {
        push(
            &STARTS,
            (since_start_ms(), now_us().saturating_sub(enqueued_us)),
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    })
    .await?;
    push(&DONE, since_start_ms());
    Ok(())
}

/// Offers `rate` enqueues per second until `until`; returns (acknowledged counter, shed).
fn produce(client: Client, rate: u64, until: Instant) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
    let acked = Arc::new(AtomicU64::new(0));
    let shed = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(AtomicU64::new(0));
    let (a, s) = (acked.clone(), shed.clone());
    tokio::spawn(async move {
        let began = Instant::now();
        let mut offered = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        while Instant::now() < until {
            tick.tick().await;
            let due = began.elapsed().as_micros() as u64 * rate / 1_000_000;
            while offered < due {
                offered += 1;
                if in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
                    s.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                in_flight.fetch_add(1, Ordering::Relaxed);
                let (client, a, f) = (client.clone(), a.clone(), in_flight.clone());
                tokio::spawn(async move {
                    let sent = client
                        .enqueue(QUEUE, "job", now_us(), WorkflowOptions::default())
                        .await;
                    f.fetch_sub(1, Ordering::Relaxed);
                    match sent {
                        Ok(_) => {
                            a.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => eprintln!("enqueue failed: {e}"),
                    }
                });
            }
        }
    });
    (acked, shed)
}

/// A relation's name, kind, bytes, dead tuples, updates and HOT updates.
type Relation = (String, String, i64, Option<i64>, Option<i64>, Option<i64>);

/// Sizes, dead tuples and updates of the schema's tables and indexes over 1 MB (or with dead).
async fn tables(pool: &sqlx::PgPool) -> Result<Value, sqlx::Error> {
    let rows: Vec<Relation> = sqlx::query_as(
        "SELECT c.relname::text, c.relkind::text, pg_relation_size(c.oid), s.n_dead_tup, \
                s.n_tup_upd, s.n_tup_hot_upd \
         FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid \
         WHERE c.relnamespace = 'dbos'::regnamespace AND c.relkind IN ('r', 'i') \
           AND (pg_relation_size(c.oid) > 1048576 OR s.n_dead_tup > 0) \
         ORDER BY pg_relation_size(c.oid) DESC",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(name, kind, bytes, dead, upd, hot)| {
            json!({"name": name, "kind": kind, "mb": bytes as f64 / 1048576.0,
                   "dead": dead, "upd": upd, "hot_upd": hot})
        })
        .collect())
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Per 10 s slice: completions/s, claim p50/p99 (ms), backlog at its end.
fn slices(total_ms: u64, backlog: &[(u64, i64)], clean_ms: u64, hold_end_ms: u64) -> Vec<Value> {
    let starts = STARTS.lock().map(|s| s.clone()).unwrap_or_default();
    let done = DONE.lock().map(|d| d.clone()).unwrap_or_default();
    (0..total_ms / SLICE_MS)
        .map(|i| {
            let (lo, hi) = (i * SLICE_MS, (i + 1) * SLICE_MS);
            let n = done.iter().filter(|t| (lo..hi).contains(*t)).count();
            let mut lat: Vec<u64> = starts
                .iter()
                .filter(|(t, _)| (lo..hi).contains(t))
                .map(|(_, us)| *us)
                .collect();
            lat.sort_unstable();
            let phase = if hi <= clean_ms {
                "clean"
            } else if hi <= hold_end_ms {
                "hold"
            } else {
                "after"
            };
            let b = backlog
                .iter()
                .rfind(|(t, _)| *t <= hi)
                .map_or(0, |(_, b)| *b);
            json!({"slice_s": hi / 1000, "phase": phase,
                   "done_per_s": n as f64 / (SLICE_MS as f64 / 1000.0),
                   "claim_p50_ms": percentile(&lat, 0.5) as f64 / 1000.0,
                   "claim_p99_ms": percentile(&lat, 0.99) as f64 / 1000.0,
                   "backlog": b})
        })
        .collect()
}

pub async fn run(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    crate::recreate(&a.db).await?;
    let rt = Runtime::builder()
        .database_url(&a.db)
        .app_version("bench-1")
        .queue(Queue::new(QUEUE).worker_concurrency(a.conc))
        .workflow("job", job)
        .launch()
        .await?;
    let client = Client::connect(&a.db).await?;
    let stats = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&a.db)
        .await?;
    let (clean, hold, after) = (a.clean_s * 1000, a.hold_s * 1000, a.after_s * 1000);
    let total = clean + hold + after;
    let began = *BEGAN.get_or_init(Instant::now);
    let (acked, shed) = produce(client, a.rate, began + Duration::from_millis(total));
    let done = || DONE.lock().map_or(0, |d| d.len()) as i64;
    let mut backlog = Vec::new();
    let mut phases = Vec::new();
    let mut holder: Option<sqlx::PgConnection> = None;
    let mut held_xid = None;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let t = since_start_ms();
        backlog.push((t, acked.load(Ordering::Relaxed) as i64 - done()));
        if t >= clean && holder.is_none() && held_xid.is_none() {
            phases
                .push(json!({"phase": "clean", "at_s": t / 1000, "tables": tables(&stats).await?}));
            let mut c = sqlx::PgConnection::connect(&a.db).await?;
            sqlx::raw_sql("BEGIN").execute(&mut c).await?;
            let xid: i64 = sqlx::query_scalar("SELECT txid_current()")
                .fetch_one(&mut c)
                .await?;
            held_xid = Some(xid);
            holder = Some(c);
        }
        if t >= clean + hold {
            if let Some(mut c) = holder.take() {
                phases.push(
                    json!({"phase": "hold", "at_s": t / 1000, "tables": tables(&stats).await?}),
                );
                sqlx::raw_sql("COMMIT").execute(&mut c).await?;
            }
        }
        if t >= total {
            break;
        }
    }
    phases.push(json!({"phase": "after", "at_s": since_start_ms() / 1000,
                       "tables": tables(&stats).await?}));
    let out = slices(total, &backlog, clean, clean + hold);
    for s in &out {
        eprintln!("{s}");
    }
    let final_backlog = acked.load(Ordering::Relaxed) as i64 - done();
    rt.shutdown(Duration::from_secs(5)).await?;
    Ok(
        json!({"peer": "stead", "workload": "w9", "rate": a.rate, "conc": a.conc,
              "clean_s": a.clean_s, "hold_s": a.hold_s, "after_s": a.after_s,
              "acked": acked.load(Ordering::Relaxed), "shed": shed.load(Ordering::Relaxed),
              "final_backlog": final_backlog, "slices": out, "phases": phases}),
    )
}

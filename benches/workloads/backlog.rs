//! W6, a deep backlog: `w6` seeds `--n` `ENQUEUED` workflows on queue `backlog` (priorities
//! 0, 1 and 5; plus 20 on each of ten other queues), drains them with two executor processes
//! (`w6-exec`, this binary again) and reports the claim statement's latency per slice of 10,000
//! claimed workflows against a small backlog's, each process's RSS every 10 s, and whether
//! priorities and FIFO held. Only the seed is SQL; the drain is the runtime's own.
//!
//! **Vacuum where the server does not.** The bench server runs with `autovacuum = off`; a drained
//! queue leaves a dead in-flight index entry per claimed row, which every later claim walks.
//! `--vacuum-s 10` vacuums the status table every 10 s, as autovacuum would; without it the figures
//! show what a server without vacuum pays.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use metrics::{Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata};
use metrics::{Recorder, SharedString, Unit};
use serde_json::{json, Value};
use stead::{Queue, Runtime, WorkflowOptions};

use crate::{child_result, recreate, Args};

/// The queue under test and the ten small ones beside it.
const BACKLOG: &str = "backlog";
const OTHERS: usize = 10;
const PER_OTHER: u64 = 20;
/// Claimed workflows per reported slice.
const SLICE: u64 = 10_000;

/// Every claim statement of `backlog`: (ms since launch, workflows it took, seconds).
static SAMPLES: Mutex<Vec<(u64, u64, f64)>> = Mutex::new(Vec::new());
static START: OnceLock<Instant> = OnceLock::new();

/// The workflows the claim being recorded took: `QueueMetrics::claimed` adds to the counter,
/// then records the histogram, both from the queue's actor.
struct Pending(AtomicU64);

impl CounterFn for Pending {
    fn increment(&self, n: u64) {
        self.0.fetch_add(n, Ordering::SeqCst);
    }
    fn absolute(&self, _: u64) {}
}

struct ClaimTimer(Arc<Pending>);

impl HistogramFn for ClaimTimer {
    fn record(&self, seconds: f64) {
        let n = self.0 .0.swap(0, Ordering::SeqCst);
        let at = START.get().map_or(0, |s| s.elapsed().as_millis() as u64);
        if let Ok(mut s) = SAMPLES.lock() {
            s.push((at, n, seconds));
        }
    }
}

/// A recorder that keeps `backlog`'s claim timings and ignores every other metric.
struct ClaimRecorder(Arc<Pending>);

impl ClaimRecorder {
    fn is_backlog(key: &Key) -> bool {
        key.labels()
            .any(|l| l.key() == "queue" && l.value() == BACKLOG)
    }
}

impl Recorder for ClaimRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == stead::metrics::QUEUE_CLAIMED && Self::is_backlog(key) {
            return Counter::from_arc(self.0.clone());
        }
        Counter::noop()
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if key.name() == stead::metrics::QUEUE_CLAIM_SECONDS && Self::is_backlog(key) {
            return Histogram::from_arc(Arc::new(ClaimTimer(self.0.clone())));
        }
        Histogram::noop()
    }
}

/// This process's resident set in MB (0 where unreadable).
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn queues() -> Vec<String> {
    let mut q = vec![BACKLOG.to_owned()];
    q.extend((0..OTHERS).map(|i| format!("other{i}")));
    q
}

/// Whether any row of `queues` is still waiting or running (a probe, not a count: a count of a
/// deep backlog every 250 ms would be the bench's own load).
async fn in_flight(pool: &sqlx::PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status \
         WHERE status IN ('ENQUEUED', 'PENDING') AND queue_name = ANY($1))",
    )
    .bind(queues())
    .fetch_one(pool)
    .await
}

/// One executor: serves every queue until none has work, then reports its claims and RSS.
pub async fn executor(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    let _ = START.set(Instant::now());
    metrics::set_global_recorder(ClaimRecorder(Arc::new(Pending(AtomicU64::new(0)))))
        .map_err(|e| e.to_string())?;
    let mut builder = Runtime::builder()
        .database_url(&a.db)
        .app_version("bench-1")
        .workflow("work", crate::noop_steps);
    for name in queues() {
        let queue = Queue::new(name)
            .worker_concurrency(a.conc)
            .priority_enabled(true)
            .polling_interval(Duration::from_millis(a.poll_ms));
        builder = builder.queue(queue);
    }
    let rt = builder.launch().await?;
    let poller = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&a.db)
        .await?;
    let (t, mut rss, mut next_print, mut idle) = (Instant::now(), Vec::new(), 0.0, 0);
    while idle < 2 {
        let s = t.elapsed().as_secs_f64();
        if s >= next_print {
            let mb = rss_mb();
            eprintln!(
                "w6-exec pid {}: {s:.0} s, RSS {mb:.1} MB",
                std::process::id()
            );
            rss.push(json!([s.round(), mb]));
            next_print += 10.0;
        }
        if s > 900.0 {
            return Err("the backlog did not drain in 15 minutes".into());
        }
        idle = if in_flight(&poller).await? {
            0
        } else {
            idle + 1
        };
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    rss.push(json!([t.elapsed().as_secs_f64().round(), rss_mb()]));
    rt.shutdown(Duration::from_secs(5)).await?;
    let samples = SAMPLES.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(json!({"peer": "stead", "workload": "w6-exec",
              "epoch_ms_at_launch": epoch_ms() - t.elapsed().as_millis() as u64,
              "samples": samples, "rss_mb": rss}))
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Seeds `n` rows on `backlog` and a few on the others, copies of one enqueued by the runtime
/// (so the input is exactly what stead writes), created 1 ms apart.
async fn seed(a: &Args, n: u64) -> Result<(), Box<dyn std::error::Error>> {
    recreate(&a.db).await?;
    let rt = Runtime::builder()
        .database_url(&a.db)
        .app_version("bench-1")
        .workflow("work", crate::noop_steps)
        .launch()
        .await?;
    let handle = rt
        .enqueue(
            "w6-template",
            "work",
            a.steps,
            WorkflowOptions::default().allow_undefined_queue(),
        )
        .await?;
    let template = handle.id().to_owned();
    rt.shutdown(Duration::from_secs(5)).await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&a.db)
        .await?;
    // Rows 1..=n on the backlog (every tenth priority 1, every twentieth-and-fifth 5), then
    // PER_OTHER on each other queue.
    let others = OTHERS as u64 * PER_OTHER;
    let sql = format!(
        "WITH t AS (SELECT * FROM dbos.workflow_status WHERE workflow_uuid = $1), \
         g AS (SELECT i, CASE WHEN i <= {n} THEN '{BACKLOG}' ELSE 'other' || ((i - {n}) % {OTHERS}) END AS q, \
                      CASE WHEN i > {n} THEN 0 WHEN i % 10 = 0 THEN 1 WHEN i % 20 = 5 THEN 5 ELSE 0 END AS p \
               FROM generate_series(1, {n} + {others}) AS i), \
         ins AS (INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, priority, \
                    application_version, serialization, created_at, updated_at, recovery_attempts) \
                 SELECT 'w6-' || g.i, 'ENQUEUED', t.name, g.q, g.p, t.application_version, \
                        t.serialization, t.created_at + g.i, t.created_at + g.i, 0 \
                 FROM g, t RETURNING workflow_uuid) \
         INSERT INTO dbos.workflow_input (workflow_uuid, inputs) \
         SELECT ins.workflow_uuid, i.inputs FROM ins, dbos.workflow_input i WHERE i.workflow_uuid = $1"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&template)
        .execute(&pool)
        .await?;
    sqlx::query("DELETE FROM dbos.workflow_status WHERE queue_name = 'w6-template'")
        .execute(&pool)
        .await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    pool.close().await;
    Ok(())
}

/// Starts the two executors at once and waits for both results, vacuuming the status table
/// every `--vacuum-s` seconds meanwhile (0: never) where the server's autovacuum is off.
async fn drain(a: &Args) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let spawn = || -> std::io::Result<std::process::Child> {
        std::process::Command::new(std::env::current_exe()?)
            .args(["w6-exec", "--db", &a.db, "--conc", &a.conc.to_string()])
            .args([
                "--poll-ms",
                &a.poll_ms.to_string(),
                "--steps",
                &a.steps.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
    };
    let children = [spawn()?, spawn()?];
    let vacuum = (a.vacuum_s > 0).then(|| {
        let (db, every) = (a.db.clone(), Duration::from_secs(a.vacuum_s));
        tokio::spawn(async move {
            let Ok(pool) = sqlx::PgPool::connect(&db).await else {
                return;
            };
            loop {
                tokio::time::sleep(every).await;
                let _ = sqlx::query("VACUUM dbos.workflow_status")
                    .execute(&pool)
                    .await;
            }
        })
    });
    let waited = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output())
            .collect::<std::io::Result<Vec<_>>>()
    })
    .await??;
    if let Some(v) = vacuum {
        v.abort();
    }
    waited
        .into_iter()
        .map(|out| child_result("w6-exec", out))
        .collect()
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Both executors' claims in time order, as (workflows claimed before it, ms).
fn merged(results: &[Value]) -> Vec<(u64, f64)> {
    let mut all: Vec<(u64, u64, f64)> = Vec::new();
    for r in results {
        let base = r["epoch_ms_at_launch"].as_u64().unwrap_or(0);
        for s in r["samples"].as_array().into_iter().flatten() {
            let f = |i: usize| s[i].as_f64().unwrap_or(0.0);
            all.push((base + f(0) as u64, f(1) as u64, f(2) * 1e3));
        }
    }
    all.sort_by_key(|s| s.0);
    let mut before = 0;
    all.into_iter()
        .filter(|s| s.1 > 0)
        .map(|(_, n, ms)| {
            let at = before;
            before += n;
            (at, ms)
        })
        .collect()
}

/// Priority and FIFO on `backlog` from the rows, per executor (across executors `SKIP LOCKED`
/// lets a claim that began later take older rows first): a row that started more than
/// `slack_ms` before one it should have followed.
async fn order_check(a: &Args, slack_ms: i64) -> Result<Value, Box<dyn std::error::Error>> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&a.db)
        .await?;
    let (done, fifo, prio): (i64, i64, i64) = sqlx::query_as(
        "WITH b AS (SELECT executor_id AS e, priority, created_at, started_at_epoch_ms AS s, \
                           status FROM dbos.workflow_status WHERE queue_name = $1), \
         f AS (SELECT s, max(s) OVER (PARTITION BY e, priority ORDER BY created_at \
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS m \
               FROM b), \
         p AS (SELECT e, priority, min(s) AS lo, max(s) AS hi FROM b GROUP BY e, priority) \
         SELECT (SELECT count(*) FROM b WHERE status = 'SUCCESS'), \
                (SELECT count(*) FROM f WHERE s < m - $2), \
                (SELECT count(*) FROM p x JOIN p y ON y.e = x.e AND y.priority > x.priority \
                 WHERE y.lo < x.hi - $2)",
    )
    .bind(BACKLOG)
    .bind(slack_ms)
    .fetch_one(&pool)
    .await?;
    Ok(
        json!({"succeeded": done, "fifo_violations": fifo, "priority_violations": prio,
              "slack_ms": slack_ms}),
    )
}

/// One phase: seed `n`, drain, and the claim latencies by slice.
async fn phase(a: &Args, n: u64) -> Result<Value, Box<dyn std::error::Error>> {
    seed(a, n).await?;
    let t = Instant::now();
    let results = drain(a).await?;
    let total_s = t.elapsed().as_secs_f64();
    let claims = merged(&results);
    let mut slices = Vec::new();
    let mut from = 0;
    while from < n {
        let ms: Vec<f64> = claims
            .iter()
            .filter(|c| c.0 >= from && c.0 < from + SLICE)
            .map(|c| c.1)
            .collect();
        slices.push(
            json!({"from": from, "claims": ms.len(), "p50_ms": pct(ms.clone(), 0.5),
                           "p99_ms": pct(ms, 0.99)}),
        );
        from += SLICE;
    }
    let all: Vec<f64> = claims.iter().map(|c| c.1).collect();
    let peak = results
        .iter()
        .flat_map(|r| r["rss_mb"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s[1].as_f64())
        .fold(0.0, f64::max);
    Ok(
        json!({"n": n, "drain_s": total_s, "wf_per_s": n as f64 / total_s,
              "claims": all.len(), "p50_ms": pct(all.clone(), 0.5), "p99_ms": pct(all, 0.99),
              "slices": slices, "peak_rss_mb": peak, "order": order_check(a, 5).await?,
              "rss_mb": results.iter().map(|r| r["rss_mb"].clone()).collect::<Vec<_>>()}),
    )
}

/// W6: a small backlog (`--rounds` thousand rows, the near-empty figure), then `--n`.
pub async fn run(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    let small = phase(a, a.rounds * 1000).await?;
    let deep = phase(a, a.n).await?;
    let ratio = |k: &str| -> Vec<f64> {
        let base = small[k].as_f64().unwrap_or(f64::NAN);
        deep["slices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s[k].as_f64().unwrap_or(f64::NAN) / base)
            .collect()
    };
    let worst = |k: &str| ratio(k).into_iter().fold(0.0, f64::max);
    Ok(
        json!({"peer": "stead", "workload": "w6", "n": a.n, "conc": a.conc,
              "poll_ms": a.poll_ms, "steps": a.steps, "small": small, "deep": deep,
              "worst_p50_ratio": worst("p50_ms"), "worst_p99_ratio": worst("p99_ms")}),
    )
}

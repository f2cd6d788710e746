//! W7 (history depth) and W8 (large outputs): one workflow recorded with `--steps` steps of
//! `--output` bytes each, its process killed, then recovered by a fresh process, which reports
//! the replay's time per step and its peak RSS above the process's baseline.
//!
//! **Killed, not seeded.** `replay-record` runs the workflow for real until it waits at its gate
//! (every step recorded by stead itself, as a crash would leave them), then exits without
//! shutting down; `replay-recover` launches a runtime under the same executor id, whose launch
//! recovers the workflow, and times its body from its first poll to its return (`replay_s`,
//! `us_per_step`), and its run from its actor's start (the `workflow` span, before the first page
//! of its history is read: `run_s`, `run_us_per_step`, which also counts the connection's first
//! statements, ~10 ms on Postgres). A 1,000-step history is read whole before the body's first
//! poll (the second page read ahead), so the body figure leaves out its reads. Peak RSS is
//! `VmHWM` after the run minus `VmRSS` before the launch, the peak reset first
//! (`/proc/self/clear_refs`), so the figure includes the runtime's own launch (a few MB).
//!
//! `w7` runs 1,000, 10,000 and 100,000 steps of 16 bytes; `w8` 100 steps of 10 MB; each on a
//! recreated database (a Postgres URL) or a new file (`sqlite://path`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead::{Context, Runtime, WorkflowOptions};

use crate::{child_with, recreate, Args};

/// Open in the recovering process: the body returns after its steps.
static GATE_OPEN: AtomicBool = AtomicBool::new(false);
/// Set once the recording body reached its gate (every step recorded).
static AT_GATE: AtomicBool = AtomicBool::new(false);
/// Step bodies that ran (none should, on replay).
static RAN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// When the body was first polled and when it returned.
static SPAN: Mutex<Option<(Instant, Option<Instant>)>> = Mutex::new(None);
/// When the recovered run's actor opened its `workflow` span, before reading its history.
static RUN_START: Mutex<Option<Instant>> = Mutex::new(None);

/// Notes when the first `workflow` span opens; no other span is enabled.
struct RunStart;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RunStart {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        RUN_START.lock().unwrap().get_or_insert_with(Instant::now);
    }
}

/// Installs [`RunStart`], filtered to the `workflow` span.
fn note_run_start() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let only = tracing_subscriber::filter::filter_fn(|m| m.is_span() && m.name() == "workflow");
    let subscriber = tracing_subscriber::registry().with(RunStart.with_filter(only));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

const ID: &str = "w7-deep";

async fn deep(ctx: Context, (steps, bytes): (u64, u64)) -> stead::Result<u64> {
    SPAN.lock().unwrap().get_or_insert((Instant::now(), None));
    let mut total = 0;
    for _ in 0..steps {
        let out: String = ctx
            .step("s", || async move {
                RAN.fetch_add(1, Ordering::Relaxed);
                Ok("x".repeat(bytes as usize))
            })
            .await?;
        total += out.len() as u64;
    }
    if !GATE_OPEN.load(Ordering::SeqCst) {
        AT_GATE.store(true, Ordering::SeqCst);
        // A durable call: the last step's record is written before it waits.
        let _: Option<u32> = ctx.recv(Some("gate"), Duration::from_secs(86_400)).await?;
    }
    if let Some(span) = SPAN.lock().unwrap().as_mut() {
        span.1 = Some(Instant::now());
    }
    Ok(total)
}

async fn launch(db: &str) -> stead::Result<Runtime> {
    Runtime::builder()
        .database_url(db)
        .app_version("bench-1")
        .executor_id("bench-replay")
        // W7 records 100,000 calls and W8 1 GB in one run: past the default history limits.
        .history_limits(stead::HistoryLimits::unlimited())
        .workflow("deep", deep)
        .launch()
        .await
}

/// A `/proc/self/status` figure, in MB.
fn status_mb(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The child that records: runs the workflow to its gate, then dies without shutting down.
pub async fn record(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    let rt = launch(&a.db).await?;
    let t = Instant::now();
    rt.start("deep", (a.steps, a.n), WorkflowOptions::with_id(ID))
        .await?;
    while !AT_GATE.load(Ordering::SeqCst) {
        if t.elapsed() > Duration::from_secs(1800) {
            return Err("the workflow did not reach its gate".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "RESULT {}",
        json!({"peer": "stead", "workload": "replay-record", "steps": a.steps,
               "record_s": t.elapsed().as_secs_f64()})
    );
    std::process::exit(0);
}

/// The child that recovers: launches (recovering the workflow) and waits for its result.
pub async fn recover(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    GATE_OPEN.store(true, Ordering::SeqCst);
    note_run_start();
    // Resets VmHWM to the current RSS (Linux ≥ 4.0), so the peak is this phase's.
    std::fs::write("/proc/self/clear_refs", "5")?;
    let baseline = status_mb("VmRSS:");
    let t = Instant::now();
    let rt = launch(&a.db).await?;
    let total: u64 = rt.client().handle(ID).result().await?;
    let wall = t.elapsed().as_secs_f64();
    let peak = status_mb("VmHWM:");
    let (first, last) = SPAN.lock().unwrap().ok_or("the body never ran")?;
    let last = last.ok_or("the body never returned")?;
    let body_s = last.duration_since(first).as_secs_f64();
    let start = RUN_START.lock().unwrap().ok_or("no workflow span opened")?;
    let run_s = last.duration_since(start).as_secs_f64();
    rt.shutdown(Duration::from_secs(5)).await?;
    Ok(
        json!({"peer": "stead", "workload": "replay-recover", "steps": a.steps,
              "output_bytes": a.n, "returned_bytes": total,
              "step_bodies_run": RAN.load(Ordering::Relaxed),
              "replay_s": body_s, "us_per_step": body_s * 1e6 / a.steps as f64,
              "run_s": run_s, "run_us_per_step": run_s * 1e6 / a.steps as f64,
              "launch_to_result_s": wall, "baseline_rss_mb": baseline, "peak_rss_mb": peak,
              "peak_growth_mb": peak - baseline}),
    )
}

/// Records and recovers each `(steps, bytes)` on a recreated database, one child each.
async fn rounds(
    a: &Args,
    workload: &str,
    shapes: &[(u64, u64)],
) -> Result<Value, Box<dyn std::error::Error>> {
    let mut runs = Vec::new();
    for &(steps, bytes) in shapes {
        fresh(&a.db).await?;
        let flags = [
            "--steps".to_owned(),
            steps.to_string(),
            "--n".to_owned(),
            bytes.to_string(),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let rec = child_with("replay-record", &a.db, &flags)?;
        let mut r = child_with("replay-recover", &a.db, &flags)?;
        r["record_s"] = rec["record_s"].clone();
        eprintln!("{workload}: {r}");
        runs.push(r);
    }
    fresh(&a.db).await?;
    Ok(json!({"peer": "stead", "workload": workload, "runs": runs}))
}

/// Recreates the Postgres database, or removes the SQLite file (the runtime creates it).
async fn fresh(db: &str) -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = db.strip_prefix("sqlite://") else {
        return recreate(db).await;
    };
    let path = path.split('?').next().unwrap_or(path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
    Ok(())
}

/// W7: 1,000, 10,000 and 100,000 steps of 16 bytes.
pub async fn w7(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    rounds(a, "w7", &[(1_000, 16), (10_000, 16), (100_000, 16)]).await
}

/// W8: 100 steps of 10 MB.
pub async fn w8(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    rounds(a, "w8", &[(100, 10 << 20)]).await
}

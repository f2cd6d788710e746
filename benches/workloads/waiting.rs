//! `w-waiting --n N [--conc C] [--steps SAMPLE]`: N workflows that each wait on a `recv` with a
//! day's timeout, evicted after 1 s idle (`STEAD_BENCH_EVICT_MS`). Reports how long starting
//! them took, the process's RSS once all are evicted (none resident), and the wake latency
//! (send from a separate client, through Postgres NOTIFY, to the workflow past its `recv`) of
//! SAMPLE of them, woken one at a time; then the time for all the rest to finish once sent.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use stead::{Context, Runtime, WorkflowOptions};

/// When each sampled workflow got past its `recv`.
static WOKEN: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();

async fn waiter(ctx: Context, _: ()) -> stead::Result<()> {
    let got: Option<u32> = ctx.recv(Some("t"), Duration::from_secs(86_400)).await?;
    if got == Some(1) {
        let woken = WOKEN.get_or_init(Default::default);
        woken
            .lock()
            .unwrap()
            .insert(ctx.workflow_id().to_owned(), Instant::now());
    }
    Ok(())
}

/// This process's resident set, in MB.
fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub async fn run(
    db: &str,
    n: u64,
    conc: u32,
    sample: u64,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let evict_ms: u64 = std::env::var("STEAD_BENCH_EVICT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = Runtime::builder()
        .database_url(db)
        .app_version("bench-1")
        .evict_after(Some(Duration::from_millis(evict_ms)))
        .workflow("waiter", waiter)
        .launch()
        .await?;
    let rss_launched = rss_mb();
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    // Starts outpace evictions: cap the resident runs, as a service admitting work would.
    let cap: u64 = std::env::var("STEAD_BENCH_RESIDENT_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    for i in 0..n {
        while rt.stats().workflows_resident >= cap {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if set.len() >= conc as usize {
            if let Some(r) = set.join_next().await {
                r??;
            }
        }
        let rt = rt.clone();
        set.spawn(async move {
            rt.start("waiter", (), WorkflowOptions::with_id(format!("w-{i}")))
                .await
                .map(drop)
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let start_s = t.elapsed().as_secs_f64();
    let mut peak_resident = 0;
    let mut last_print = Instant::now();
    loop {
        let s = rt.stats();
        peak_resident = peak_resident.max(s.workflows_resident);
        if s.workflows_evicted == n && s.workflows_resident == 0 {
            break;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "evicted {} resident {} rss {:.0} MB",
                s.workflows_evicted,
                s.workflows_resident,
                rss_mb()
            );
            last_print = Instant::now();
        }
        if t.elapsed() > Duration::from_secs(3600) {
            return Err(format!("not all evicted: {s:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_evicted_s = t.elapsed().as_secs_f64();
    // Let freed memory settle before reading the figure.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_evicted = rss_mb();

    // Wake latency: one send at a time from another client (its write's NOTIFY wakes us).
    let other = stead::Client::connect(db).await?;
    let mut sent = Vec::new();
    for i in 0..sample.min(n) {
        let id = format!("w-{i}");
        let at = Instant::now();
        other.send(&id, &1u32, Some("t")).await?;
        sent.push((id, at));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let woken = WOKEN.get_or_init(Default::default).lock().unwrap().clone();
    let mut lat: Vec<f64> = sent
        .iter()
        .filter_map(|(id, at)| Some(woken.get(id)?.duration_since(*at).as_secs_f64() * 1e3))
        .collect();
    lat.sort_by(f64::total_cmp);
    let (p50, p99) = if lat.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (pct(&lat, 0.5), pct(&lat, 0.99))
    };
    let stats = rt.stats();
    rt.shutdown(Duration::from_secs(5)).await?;
    Ok(
        json!({"peer": "stead", "workload": "w-waiting", "n": n, "evict_ms": evict_ms,
        "start_s": start_s, "all_evicted_s": all_evicted_s, "peak_resident": peak_resident,
        "rss_launched_mb": rss_launched, "rss_all_evicted_mb": rss_evicted,
        "bytes_per_evicted": (rss_evicted - rss_launched) * 1048576.0 / n as f64,
        "sample": lat.len(), "wake_p50_ms": p50, "wake_p99_ms": p99,
        "evicted_after": stats.workflows_evicted}),
    )
}

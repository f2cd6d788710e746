//! `w-waiting --n N [--conc C] [--steps SAMPLE]`: N workflows that each wait on a `recv` with a
//! day's timeout, under the runtime's default settings (evicted after `evict_after`, 60 s, or at
//! once at the resident bound, 10,000). Reports how long starting them took, the process's RSS
//! once all are evicted (none resident), and the wake latency (send from a separate client,
//! through Postgres NOTIFY, to the workflow past its `recv`) of SAMPLE of them, woken one at a
//! time. `STEAD_BENCH_CHILDREN=K`: the first K of the N are parents, each awaiting a child that
//! waits (N + K waiting); a sampled parent is woken by a send to its child and timed past its
//! child's result.
//! `STEAD_BENCH_EVICT_MS` and `STEAD_BENCH_RESIDENT_CAP` (pacing the starts) override the
//! defaults, as earlier rounds measured.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use stead::{Context, Runtime, WorkflowOptions};

/// When each sampled workflow got past its wait.
static WOKEN: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();

fn woken(id: &str) {
    let woken = WOKEN.get_or_init(Default::default);
    woken.lock().unwrap().insert(id.to_owned(), Instant::now());
}

async fn waiter(ctx: Context, _: ()) -> stead::Result<u32> {
    let got: Option<u32> = ctx.recv(Some("t"), Duration::from_secs(86_400)).await?;
    if got == Some(1) {
        woken(ctx.workflow_id());
    }
    Ok(got.unwrap_or(0))
}

/// Awaits child `<id>-c`, a waiter.
async fn parent(ctx: Context, _: ()) -> stead::Result<()> {
    let child = WorkflowOptions::with_id(format!("{}-c", ctx.workflow_id()));
    let got: u32 = ctx.start_child("waiter", (), child).await?.result().await?;
    if got == 1 {
        woken(ctx.workflow_id());
    }
    Ok(())
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
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
    let parents: u64 = env::<u64>("STEAD_BENCH_CHILDREN").unwrap_or(0).min(n);
    let mut builder = Runtime::builder()
        .database_url(db)
        .app_version("bench-1")
        .workflow("waiter", waiter)
        .workflow("parent", parent);
    if let Some(ms) = env::<u64>("STEAD_BENCH_EVICT_MS") {
        builder = builder.evict_after(Some(Duration::from_millis(ms)));
    }
    let rt = builder.launch().await?;
    let waiting = n + parents;
    let rss_launched = rss_mb();
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let cap: Option<u64> = env("STEAD_BENCH_RESIDENT_CAP");
    for i in 0..n {
        while cap.is_some_and(|cap| rt.stats().workflows_resident >= cap) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if set.len() >= conc as usize {
            if let Some(r) = set.join_next().await {
                r??;
            }
        }
        let rt = rt.clone();
        set.spawn(async move {
            let name = if i < parents { "parent" } else { "waiter" };
            rt.start(name, (), WorkflowOptions::with_id(format!("w-{i}")))
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
        if s.workflows_evicted == waiting && s.workflows_resident == 0 {
            break;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!("rss {:.0} MB {s:?}", rss_mb());
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
        let to = if i < parents {
            format!("{id}-c")
        } else {
            id.clone()
        };
        let at = Instant::now();
        other.send(&to, &1u32, Some("t")).await?;
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
        json!({"peer": "stead", "workload": "w-waiting", "n": n, "parents": parents,
        "waiting": waiting, "evict_ms": env::<u64>("STEAD_BENCH_EVICT_MS"),
        "start_s": start_s, "all_evicted_s": all_evicted_s, "peak_resident": peak_resident,
        "rss_launched_mb": rss_launched, "rss_all_evicted_mb": rss_evicted,
        "bytes_per_evicted": (rss_evicted - rss_launched) * 1048576.0 / waiting as f64,
        "sample": lat.len(), "wake_p50_ms": p50, "wake_p99_ms": p99,
        "evicted_after": stats.workflows_evicted}),
    )
}

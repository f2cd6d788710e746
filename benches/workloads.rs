//! stead's workload runner for `../shared/bench/WORKLOADS.md` (the same interface as the peers):
//!
//! ```text
//! workloads <migrate|w1|w2|w3|w4crash|w4recover> [--db URL] [--n N] [--steps S] [--conc C] [--poll-ms P]
//! ```
//!
//! Prints one `RESULT {json}` line. Build with `cargo bench --bench workloads --no-run`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use stead::{Context, Queue, Runtime, WorkflowOptions};

/// While closed, `work` parks forever after its first half (W4's crash phase).
static GATE_OPEN: AtomicBool = AtomicBool::new(true);
static PARKED: AtomicU64 = AtomicU64::new(0);

struct Args {
    workload: String,
    db: String,
    n: u64,
    steps: u64,
    conc: u32,
    poll_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let workload = it
        .next()
        .ok_or("usage: workloads <workload> [--db URL] [--n N] [--steps S]")?;
    let mut a = Args {
        workload,
        db: std::env::var("BENCH_DB_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/bench_stead".into()),
        n: 1000,
        steps: 10,
        conc: 50,
        poll_ms: 1000,
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--db" => a.db = value.clone(),
            "--n" => a.n = number()?,
            "--steps" => a.steps = number()?,
            "--conc" => a.conc = number()? as u32,
            "--poll-ms" => a.poll_ms = number()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

async fn noop_steps(ctx: Context, steps: u64) -> stead::Result<u64> {
    let mut acc = 0;
    for i in 0..steps {
        acc += ctx
            .step("noop", || async move { Ok::<_, std::io::Error>(i) })
            .await?;
    }
    Ok(acc)
}

async fn gated_steps(ctx: Context, steps: u64) -> stead::Result<u64> {
    let mut acc = 0;
    for i in 0..steps {
        if i == steps / 2 && !GATE_OPEN.load(Ordering::SeqCst) {
            PARKED.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        acc += ctx
            .step("noop", || async move { Ok::<_, std::io::Error>(i) })
            .await?;
    }
    Ok(acc)
}

async fn launch(a: &Args) -> stead::Result<Runtime> {
    let gated = matches!(a.workload.as_str(), "w4crash" | "w4recover");
    let mut builder = Runtime::builder()
        .database_url(&a.db)
        .app_version("bench-1")
        .workflow("warmup", noop_steps);
    if a.workload == "w3" {
        let queue = Queue::new("benchq")
            .worker_concurrency(a.conc)
            .polling_interval(Duration::from_millis(a.poll_ms));
        builder = builder.queue(queue);
    }
    let builder = if gated {
        builder.workflow("work", gated_steps)
    } else {
        builder.workflow("work", noop_steps)
    };
    builder.launch().await
}

async fn warmup(rt: &Runtime) -> stead::Result<()> {
    rt.start("warmup", 10u64, WorkflowOptions::default())
        .await?
        .result::<u64>()
        .await
        .map(|_| ())
}

async fn count(pool: &sqlx::PgPool, status: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM dbos.workflow_status WHERE status = $1 AND name = 'work'",
    )
    .bind(status)
    .fetch_one(pool)
    .await
    .unwrap_or(0)
}

async fn run(a: Args) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    Ok(match a.workload.as_str() {
        "migrate" => {
            let rt = launch(&a).await?;
            rt.shutdown(Duration::from_secs(5)).await?;
            json!({"peer": "stead", "workload": "migrate"})
        }
        "w1" => {
            let rt = launch(&a).await?;
            warmup(&rt).await?;
            let t = Instant::now();
            rt.start("work", a.steps, WorkflowOptions::default())
                .await?
                .result::<u64>()
                .await?;
            let s = t.elapsed().as_secs_f64();
            rt.shutdown(Duration::from_secs(5)).await?;
            json!({"peer": "stead", "workload": "w1", "steps": a.steps, "total_s": s,
                   "us_per_step": s * 1e6 / a.steps as f64})
        }
        "w2" => {
            let rt = launch(&a).await?;
            warmup(&rt).await?;
            let t = Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..a.n {
                let (rt, steps) = (rt.clone(), a.steps);
                set.spawn(async move {
                    rt.start("work", steps, WorkflowOptions::default())
                        .await?
                        .result::<u64>()
                        .await
                });
            }
            while let Some(r) = set.join_next().await {
                r??;
            }
            let s = t.elapsed().as_secs_f64();
            let stats = rt.stats();
            rt.shutdown(Duration::from_secs(5)).await?;
            json!({"peer": "stead", "workload": "w2", "n": a.n, "steps": a.steps, "total_s": s,
                   "wf_per_s": a.n as f64 / s, "steps_per_s": (a.n * a.steps) as f64 / s,
                   "db_flushes": stats.db_flushes, "db_batched": stats.db_batched_requests})
        }
        "w4crash" => {
            GATE_OPEN.store(false, Ordering::SeqCst);
            let rt = launch(&a).await?;
            let t = Instant::now();
            for _ in 0..a.n {
                rt.start("work", a.steps, WorkflowOptions::default())
                    .await?;
            }
            while PARKED.load(Ordering::SeqCst) < a.n {
                if t.elapsed() > Duration::from_secs(120) {
                    return Err("workflows did not all park".into());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let s = t.elapsed().as_secs_f64();
            println!(
                "RESULT {}",
                json!({"peer": "stead", "workload": "w4crash", "n": a.n,
                       "steps_before_crash": a.steps / 2, "total_s": s})
            );
            // The crash: exit without shutdown, leaving every workflow PENDING.
            std::process::exit(0);
        }
        "w4recover" => {
            let poller = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&std::env::var("BENCH_POLL_DB_URL").unwrap_or_else(|_| a.db.clone()))
                .await?;
            let pending = count(&poller, "PENDING").await;
            let t = Instant::now();
            let rt = launch(&a).await?;
            let launch_s = t.elapsed().as_secs_f64();
            while (count(&poller, "SUCCESS").await as u64) < a.n {
                if t.elapsed() > Duration::from_secs(300) {
                    return Err("recovery did not finish".into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let s = t.elapsed().as_secs_f64();
            rt.shutdown(Duration::from_secs(5)).await?;
            json!({"peer": "stead", "workload": "w4", "n": a.n, "pending_before": pending,
                   "launch_s": launch_s, "total_s": s, "wf_per_s": a.n as f64 / s})
        }
        "w3" => {
            let rt = launch(&a).await?;
            warmup(&rt).await?;
            let poller = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&std::env::var("BENCH_POLL_DB_URL").unwrap_or_else(|_| a.db.clone()))
                .await?;
            let t = Instant::now();
            let target = if std::env::var("XQ").is_ok() {
                "nobody"
            } else {
                "benchq"
            };
            for _ in 0..a.n {
                rt.enqueue(target, "work", a.steps, WorkflowOptions::default())
                    .await?;
            }
            let enqueue_s = t.elapsed().as_secs_f64();
            if target == "nobody" {
                println!("enqueue only: {enqueue_s}");
                std::process::exit(0);
            }
            while (count(&poller, "SUCCESS").await as u64) < a.n {
                if t.elapsed() > Duration::from_secs(300) {
                    return Err("the queue did not drain".into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let s = t.elapsed().as_secs_f64();
            let stats = rt.stats();
            rt.shutdown(Duration::from_secs(5)).await?;
            json!({"peer": "stead", "workload": "w3", "n": a.n, "conc": a.conc,
                   "poll_ms": a.poll_ms, "enqueue_s": enqueue_s, "total_s": s,
                   "wf_per_s": a.n as f64 / s,
                   "db_flushes": stats.db_flushes, "db_batched": stats.db_batched_requests,
                   "db_calls": stats.db_calls})
        }
        other => return Err(format!("unknown workload {other}").into()),
    })
}

#[tokio::main]
async fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    match run(args).await {
        Ok(result) => println!("RESULT {result}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

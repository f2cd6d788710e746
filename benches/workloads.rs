//! stead's workload runner for `../shared/bench/WORKLOADS.md` (the same interface as the peers):
//!
//! ```text
//! workloads <migrate|w1|w2|w3|w4crash|w4recover> [--db URL] [--n N] [--steps S] [--conc C] [--poll-ms P]
//! workloads w-waiting [--db URL] [--n N] [--conc C] [--steps SAMPLE]
//! workloads seed-history [--db URL] [--history H] [--steps S]
//! workloads w5 [--db URL] [--history H] [--rounds R] [--settle S]
//! workloads w6 [--db URL] [--n N] [--rounds SMALL_THOUSANDS] [--conc C] [--poll-ms P] [--steps S] [--vacuum-s V]
//! workloads w9 [--db URL] [--rate R] [--conc C] [--clean-s S] [--hold-s S] [--after-s S]
//! workloads <w7|w8> [--db URL]
//! ```
//!
//! `seed-history` and `w5` (the cost of history) are in `workloads/history.rs`, `w6` (a deep
//! backlog) in `workloads/backlog.rs`, `w9` (a held snapshot) in `workloads/held.rs`; `benches/README.md` has their commands and figures.
//! `w-waiting` (waiting workflows evicted: RSS and wake latency) is in `workloads/waiting.rs`,
//! `w7` and `w8` (replay of a deep history, of large outputs) in `workloads/replay.rs`.
//!
//! Prints one `RESULT {json}` line. Build with `cargo bench --bench workloads --no-run`.
//!
//! W3's producer enqueues one after another either awaiting each enqueue (`--producer await`,
//! the default, as the peers do) or sending enqueue messages to the queue actor and awaiting the
//! acknowledgements at the end (`--producer actor`, or `STEAD_BENCH_PRODUCER=actor` under the
//! peers' driver). With `STEAD_BENCH_ENQUEUE_ONLY=1` (awaited producer) W3 enqueues to a queue
//! no actor serves and reports only the enqueues: an enqueue's cost with nothing else running.
//!
//! With `STEAD_BENCH_OBSERVE=1` a run installs the Prometheus recorder (no listener) and a
//! tracing subscriber at INFO writing to a sink first. `w2-observed [--rounds R]` measures what
//! that costs: R rounds of W2 without and with it, each in a fresh process on a recreated
//! database, alternating which goes first, and prints both medians and the overhead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use stead::{Context, Queue, Runtime, WorkflowOptions};

#[path = "workloads/backlog.rs"]
mod backlog;
#[path = "workloads/held.rs"]
mod held;
#[path = "workloads/history.rs"]
mod history;
#[path = "workloads/replay.rs"]
mod replay;
#[path = "workloads/waiting.rs"]
mod waiting;

/// While closed, `work` parks forever after its first half (W4's crash phase).
static GATE_OPEN: AtomicBool = AtomicBool::new(true);
static PARKED: AtomicU64 = AtomicU64::new(0);

#[derive(Clone)]
struct Args {
    workload: String,
    db: String,
    n: u64,
    steps: u64,
    conc: u32,
    poll_ms: u64,
    rounds: u64,
    /// Finished workflows `seed-history` and `w5` seed.
    history: u64,
    /// W5: workflows run on each copy between its fresh and its settled measurement (default
    /// `history / 25`; 0 skips the settled one).
    settle: Option<u64>,
    /// W6: vacuum the status table this often (s) while draining; 0 never.
    vacuum_s: u64,
    /// W3's producer (`--producer`, else `STEAD_BENCH_PRODUCER`, else `await`): `await` (each
    /// enqueue durable before the next) or `actor` (one message after another to the queue
    /// actor; the acknowledgements, each a committed row, are awaited at the end).
    producer: String,
    /// W9: offered enqueues per second, and its phases' lengths (s).
    rate: u64,
    clean_s: u64,
    hold_s: u64,
    after_s: u64,
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
        rounds: 5,
        history: 1_000_000,
        settle: None,
        vacuum_s: 0,
        producer: std::env::var("STEAD_BENCH_PRODUCER").unwrap_or_else(|_| "await".into()),
        rate: 1000,
        clean_s: 20,
        hold_s: 60,
        after_s: 30,
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
            "--rounds" => a.rounds = number()?,
            "--history" => a.history = number()?,
            "--settle" => a.settle = Some(number()?),
            "--vacuum-s" => a.vacuum_s = number()?,
            "--rate" => a.rate = number()?,
            "--clean-s" => a.clean_s = number()?,
            "--hold-s" => a.hold_s = number()?,
            "--after-s" => a.after_s = number()?,
            "--producer" if value == "await" || value == "actor" => a.producer = value.clone(),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

async fn noop_steps(ctx: Context, steps: u64) -> stead::Result<u64> {
    let mut acc = 0;
    for i in 0..steps {
        acc += ctx.step("noop", || async move { Ok(i) }).await?;
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
        acc += ctx.step("noop", || async move { Ok(i) }).await?;
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
        // Enqueue only: a queue declared here but served by no one.
        if std::env::var("STEAD_BENCH_ENQUEUE_ONLY").is_ok() {
            builder = builder
                .queue(Queue::new("nobody"))
                .listen_queues(["benchq"]);
        }
    }
    // W4 relaunches under the crashed process's executor id (WORKLOADS.md): its own recovery,
    // not the fleet's adoption of a dead executor (lease and margin later), is measured.
    let builder = if gated {
        builder
            .executor_id("bench-w4")
            .workflow("work", gated_steps)
    } else {
        builder.workflow("work", noop_steps)
    };
    builder.launch().await
}

/// Sends `n` enqueue messages to the queue actor one after another, without waiting between
/// them, then waits until every one is acknowledged (its row committed).
async fn produce_as_actor(rt: &Runtime, queue: &str, n: u64, steps: u64) -> stead::Result<()> {
    let queue = rt.queue_ref(queue)?;
    let mut acks = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let request = stead::queues::EnqueueRequest::new("work", &steps)?;
        acks.push(queue.enqueue(request)?);
    }
    for ack in acks {
        ack.await?;
    }
    Ok(())
}

async fn warmup(rt: &Runtime) -> stead::Result<()> {
    rt.start("warmup", 10u64, WorkflowOptions::default())
        .await?
        .result::<u64>()
        .await
        .map(|_| ())
}

/// Workflows of `work` in `status` created in the last ten minutes: the `created_at` index
/// keeps this poll cheap on a database holding a long history (W5). On a sharded layout, in
/// every bucket schema.
async fn count(pool: &sqlx::PgPool, status: &str) -> i64 {
    static SQL: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let sql = SQL
        .get_or_init(|| async {
            let buckets: i32 = sqlx::query_scalar("SELECT buckets FROM dbos.stead_sharding")
                .fetch_one(pool)
                .await
                .unwrap_or(1);
            let each: Vec<String> = (0..buckets)
                .map(|b| {
                    let schema = if b == 0 {
                        "dbos".into()
                    } else {
                        format!("dbos_shard{b}")
                    };
                    format!(
                        "SELECT count(*) AS n FROM {schema}.workflow_status \
                         WHERE status = $1 AND name = 'work' AND created_at >= $2"
                    )
                })
                .collect();
            format!("SELECT sum(n)::int8 FROM ({}) x", each.join(" UNION ALL "))
        })
        .await;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        - 600_000;
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.clone()))
        .bind(status)
        .bind(since)
        .fetch_one(pool)
        .await
        .unwrap_or(0)
}

/// The recorder an observed run installed, to show that it recorded.
static METRICS: std::sync::OnceLock<stead::metrics::PrometheusHandle> = std::sync::OnceLock::new();

/// This process's CPU time (user and system, all threads) in seconds; 0 where unreadable.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command name (which ends with ')'): the state, ..., utime (12th), stime (13th).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let field = |i: usize| rest.split_whitespace().nth(i)?.parse::<f64>().ok();
    field(11)
        .zip(field(12))
        .map_or(0.0, |(u, s)| (u + s) / 100.0)
}

/// Installs what an observed service runs with: the Prometheus recorder and an INFO subscriber.
fn observe(what: &str) -> Result<(), Box<dyn std::error::Error>> {
    if what != "tracing" {
        let _ = METRICS.set(stead::metrics::install_prometheus_recorder()?);
    }
    if what == "metrics" {
        return Ok(());
    }
    // INFO by default; `STEAD_BENCH_FILTER` takes an `EnvFilter` directive instead.
    let fmt = tracing_subscriber::fmt().with_writer(std::io::sink);
    let installed = match std::env::var("STEAD_BENCH_FILTER") {
        Ok(filter) => fmt
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .try_init(),
        Err(_) => fmt.with_max_level(tracing::Level::INFO).try_init(),
    };
    installed.map_err(|e| e.to_string())?;
    Ok(())
}

/// Drops and recreates the benchmark database, as the peers' driver does before each run.
async fn recreate(db: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (server, name) = db.rsplit_once('/').ok_or("--db must name a database")?;
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{server}/postgres"))
        .await?;
    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(&admin)
        .await?;
    let create = format!("CREATE DATABASE {name}");
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(&admin)
        .await?;
    admin.close().await;
    Ok(())
}

/// Runs this binary as a child for one workload and returns its RESULT.
fn child(
    a: &Args,
    workload: &str,
    observed: bool,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args([
        workload,
        "--db",
        &a.db,
        "--n",
        &a.n.to_string(),
        "--steps",
        &a.steps.to_string(),
    ]);
    if observed {
        let what = std::env::var("STEAD_BENCH_OBSERVE").unwrap_or_else(|_| "1".into());
        cmd.env("STEAD_BENCH_OBSERVE", what);
    } else {
        cmd.env_remove("STEAD_BENCH_OBSERVE");
    }
    child_result(workload, cmd.output()?)
}

/// Runs this binary as a child for `workload` on `db` with `flags` and returns its RESULT.
fn child_with(
    workload: &str,
    db: &str,
    flags: &[&str],
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args([workload, "--db", db])
        .args(flags)
        .env_remove("STEAD_BENCH_OBSERVE")
        .output()?;
    child_result(workload, out)
}

/// The RESULT a finished child printed.
fn child_result(
    workload: &str,
    out: std::process::Output,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| {
            format!(
                "{workload}: no result: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    Ok(serde_json::from_str(line)?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// W2 without and with metrics and tracing, interleaved; the overhead is of the medians.
async fn w2_observed(a: &Args) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    // (wf/s, CPU µs per workflow) of each run, without and with observation.
    let mut runs: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..a.rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for observe in order {
            recreate(&a.db).await?;
            child(a, "migrate", false)?;
            let r = child(a, "w2", observe)?;
            let wf = r["wf_per_s"].as_f64().ok_or("w2 gave no wf_per_s")?;
            let cpu = r["cpu_us_per_wf"].as_f64().unwrap_or_default();
            eprintln!(
                "round {round} observed={observe}: {wf:.0} wf/s, {cpu:.0} µs CPU/wf, metrics lines {}",
                r["metrics_lines"]
            );
            runs[usize::from(observe)].push((wf, cpu));
        }
    }
    let med = |i: usize, f: fn(&(f64, f64)) -> f64| median(runs[i].iter().map(f).collect());
    let (p, o) = (med(0, |r| r.0), med(1, |r| r.0));
    let (pc, oc) = (med(0, |r| r.1), med(1, |r| r.1));
    Ok(
        json!({"peer": "stead", "workload": "w2-observed", "n": a.n, "steps": a.steps,
              "rounds": a.rounds, "plain_wf_per_s": p, "observed_wf_per_s": o,
              "overhead_pct": (p - o) / p * 100.0, "plain_cpu_us_per_wf": pc,
              "observed_cpu_us_per_wf": oc, "cpu_overhead_pct": (oc - pc) / pc * 100.0,
              "plain": runs[0], "observed": runs[1]}),
    )
}

async fn run(a: Args) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    // `1`: both; `metrics` or `tracing`: only that one. `w2-observed` passes it to its runs.
    match std::env::var("STEAD_BENCH_OBSERVE") {
        Ok(what) if a.workload != "w2-observed" => observe(&what)?,
        _ => {}
    }
    Ok(match a.workload.as_str() {
        "w2-observed" => w2_observed(&a).await?,
        "w-waiting" => waiting::run(&a.db, a.n, a.conc, a.steps).await?,
        "seed-history" => history::seed(&a).await?,
        "w5" => history::run(&a).await?,
        "w6" => backlog::run(&a).await?,
        "w6-exec" => backlog::executor(&a).await?,
        "w9" => held::run(&a).await?,
        "w7" => replay::w7(&a).await?,
        "w8" => replay::w8(&a).await?,
        "replay-record" => replay::record(&a).await?,
        "replay-recover" => replay::recover(&a).await?,
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
            let (t, cpu) = (Instant::now(), cpu_seconds());
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
            let cpu_us_per_wf = (cpu_seconds() - cpu) * 1e6 / a.n as f64;
            let stats = rt.stats();
            rt.shutdown(Duration::from_secs(5)).await?;
            let series = METRICS.get().map(|h| h.render().lines().count());
            json!({"peer": "stead", "workload": "w2", "n": a.n, "steps": a.steps, "total_s": s,
                   "wf_per_s": a.n as f64 / s, "steps_per_s": (a.n * a.steps) as f64 / s,
                   "cpu_us_per_wf": cpu_us_per_wf, "metrics_lines": series,
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
            // Enqueue only: to a queue no actor serves, so nothing runs beside the producer.
            let enqueue_only = std::env::var("STEAD_BENCH_ENQUEUE_ONLY").is_ok();
            let target = if enqueue_only { "nobody" } else { "benchq" };
            if a.producer == "actor" {
                produce_as_actor(&rt, target, a.n, a.steps).await?;
            } else {
                for _ in 0..a.n {
                    rt.enqueue(target, "work", a.steps, WorkflowOptions::default())
                        .await?;
                }
            }
            let enqueue_s = t.elapsed().as_secs_f64();
            if enqueue_only {
                rt.shutdown(Duration::from_secs(5)).await?;
                return Ok(
                    json!({"peer": "stead", "workload": "w3-enqueue-only", "n": a.n,
                                 "enqueue_s": enqueue_s, "total_s": enqueue_s,
                                 "enqueues_per_s": a.n as f64 / enqueue_s}),
                );
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
            json!({"peer": "stead", "workload": "w3", "producer": a.producer, "n": a.n, "conc": a.conc,
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

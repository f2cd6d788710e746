//! The chaos soak: a server of the test's own is stopped for 0–2 s at random intervals while a
//! mixed workload runs (steps, a queue, messages, durable sleeps, children, transactions), and
//! new workflows keep arriving (a start refused during an outage is retried with the same id).
//! Every workflow ends with its result, no acknowledged step runs again, no transaction commits
//! twice. Seeded: the seed is printed, and `STEAD_CHAOS_SEED=<seed>` replays the schedule.
//!
//! Direct and through PgBouncer in transaction mode. Short (CI, about a minute each, stops every
//! 3–10 s): `cargo test --test integration chaos:: -- --ignored --nocapture --test-threads 1`
//! (one at a time in a process: the soaks share what they record; `.ci/run` runs each in a
//! process of its own, side by side). Full (10 minutes, stops every 5–40 s): `STEAD_SOAK=full
//! cargo test --release --test integration chaos:: -- --ignored --nocapture --test-threads 1`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use stead::durable::Datasource;
use stead::{Context, Queue, Runtime, WorkflowOptions};

use crate::common::cluster::{Bouncer, Cluster, PoolMode};
use crate::{common, require_cluster};

/// A small seeded generator (splitmix64): the schedule must replay from a printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo + 1))
    }
}

/// What the soak saw, shared by the workflows of one run.
#[derive(Default)]
struct Seen {
    /// Steps whose record is known committed (a later durable call began).
    acked: HashSet<(String, u32)>,
    /// How long each step call took, call to return (stalls included).
    stalls: Vec<Duration>,
    /// How long each `mixed` run took.
    runs: Vec<Duration>,
}

fn seen() -> &'static Mutex<Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn datasource() -> &'static Mutex<Option<Datasource<sqlx::Postgres>>> {
    static DS: OnceLock<Mutex<Option<Datasource<sqlx::Postgres>>>> = OnceLock::new();
    DS.get_or_init(Default::default)
}

/// Step `i` of workflow `ctx`: counted and timed. A step's record is written before the next
/// durable call begins, so step `i` returning acknowledges step `i - 1`.
async fn counted(ctx: &Context, i: u32, value: u64) -> stead::Result<u64> {
    let id = ctx.workflow_id().to_owned();
    let began = Instant::now();
    let body_id = id.clone();
    let out = ctx
        .step("work", move || {
            let id = body_id.clone();
            async move {
                common::count_body(&id, i);
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(value)
            }
        })
        .await?;
    let mut seen = seen().lock().unwrap();
    seen.stalls.push(began.elapsed());
    if let Some(before) = i.checked_sub(1) {
        seen.acked.insert((id, before));
    }
    Ok(out)
}

async fn leaf(ctx: Context, n: u64) -> stead::Result<u64> {
    counted(&ctx, 0, n * 2).await
}

/// Records one run of a whole workflow, start to end (stalls included).
fn took(d: Duration) {
    seen().lock().unwrap().runs.push(d);
}

async fn mixed(ctx: Context, n: u64) -> stead::Result<u64> {
    let began = Instant::now();
    let a = counted(&ctx, 0, n).await?;
    let ds = datasource().lock().unwrap().clone().expect("datasource");
    let wf = ctx.workflow_id().to_owned();
    ctx.transaction(&ds, "record", |tx| {
        let wf = wf.clone();
        Box::pin(async move {
            sqlx::query("INSERT INTO chaos_rows (wf) VALUES ($1)")
                .bind(&wf)
                .execute(&mut **tx)
                .await?;
            Ok(())
        })
    })
    .await?;
    ctx.send(&wf, &n, Some("echo")).await?;
    let echoed: Option<u64> = ctx.recv(Some("echo"), Duration::from_secs(120)).await?;
    assert_eq!(echoed, Some(n), "the message to itself");
    ctx.sleep(Duration::from_millis(100)).await?;
    let child: u64 = ctx
        .run_child("leaf", n, WorkflowOptions::with_id(format!("{wf}-leaf")))
        .await?;
    let b = counted(&ctx, 1, 1).await?;
    took(began.elapsed());
    Ok(a + child + b)
}

struct Plan {
    seed: u64,
    run_for: Duration,
    gap: (u64, u64),
}

impl Plan {
    fn from_env() -> Plan {
        let seed = std::env::var("STEAD_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
        if std::env::var("STEAD_SOAK").as_deref() == Ok("full") {
            Plan {
                seed,
                run_for: Duration::from_secs(600),
                gap: (5_000, 40_000),
            }
        } else {
            Plan {
                seed,
                run_for: Duration::from_secs(45),
                gap: (3_000, 10_000),
            }
        }
    }
}

/// Starts workflow `n` (on the queue for odd `n`), retrying a refused start with the same id.
async fn arrive(rt: &Runtime, prefix: &str, n: u64, retried: &mut u32) -> stead::WorkflowHandle {
    let id = format!("{prefix}{n}");
    loop {
        let opts = WorkflowOptions::with_id(id.clone());
        let started = if n % 2 == 1 {
            rt.enqueue("chaos", "mixed", n, opts).await
        } else {
            rt.start("mixed", n, opts).await
        };
        match started {
            Ok(handle) => return handle,
            Err(_) => {
                *retried += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn soak(prefix: &str, cluster: Arc<Cluster>, url: &str) {
    let plan = Plan::from_env();
    if std::env::var_os("STEAD_CHAOS_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("stead=debug")
            .with_writer(std::io::stderr)
            .try_init();
    }
    eprintln!(
        "chaos {prefix}: seed {} (STEAD_CHAOS_SEED={} replays it), {:?}",
        plan.seed, plan.seed, plan.run_for
    );
    let app = sqlx::PgPool::connect(&cluster.url("t")).await.unwrap();
    sqlx::query("CREATE TABLE chaos_rows (wf text NOT NULL)")
        .execute(&app)
        .await
        .unwrap();
    *datasource().lock().unwrap() = Some(Datasource::new(app.clone()).await.unwrap());
    let rt = Runtime::builder()
        .database_url(url)
        .app_version("chaos-1")
        .executor_id("chaos")
        .workflow("mixed", mixed)
        .workflow("leaf", leaf)
        .queue(Queue::new("chaos").worker_concurrency(20))
        .launch()
        .await
        .unwrap();

    let until = Instant::now() + plan.run_for;
    let chaos = {
        let (cluster, seed, gap) = (cluster.clone(), plan.seed, plan.gap);
        tokio::spawn(async move {
            let mut rng = Rng(seed);
            let mut stops = Vec::new();
            loop {
                tokio::time::sleep(rng.millis(gap.0, gap.1)).await;
                if Instant::now() >= until {
                    return stops;
                }
                let down = rng.millis(0, 2_000);
                let c = cluster.clone();
                tokio::task::spawn_blocking(move || {
                    c.stop();
                    std::thread::sleep(down);
                    c.start_again();
                })
                .await
                .unwrap();
                stops.push(down);
            }
        })
    };
    let (mut handles, mut retried, mut n) = (Vec::new(), 0u32, 0u64);
    while Instant::now() < until {
        handles.push(arrive(&rt, prefix, n, &mut retried).await);
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stops = chaos.await.unwrap();

    let mut lost = Vec::new();
    for (i, h) in handles.iter().enumerate() {
        match tokio::time::timeout(common::wait::SETUP, h.result::<u64>()).await {
            Ok(Ok(sum)) => assert_eq!(sum, 3 * i as u64 + 1, "{prefix}{i}'s result"),
            other => lost.push(format!("{prefix}{i}: {other:?}")),
        }
    }
    let runs = common::body_runs_by_step(prefix);
    let (acked, mut stalls, mut whole) = {
        let mut seen = seen().lock().unwrap();
        let acked = std::mem::take(&mut seen.acked);
        let stalls = std::mem::take(&mut seen.stalls);
        (acked, stalls, std::mem::take(&mut seen.runs))
    };
    let reran: Vec<_> = runs.iter().filter(|(_, n)| *n > 1).collect();
    let acked_reran: Vec<_> = reran.iter().filter(|(k, _)| acked.contains(k)).collect();
    let twice: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT wf FROM chaos_rows GROUP BY wf HAVING count(*) > 1) d",
    )
    .fetch_one(&app)
    .await
    .unwrap();
    stalls.sort();
    whole.sort();
    let p99 = |v: &[Duration]| v.get(v.len() * 99 / 100).copied().unwrap_or_default();
    let max = |v: &[Duration]| v.last().copied().unwrap_or_default();
    eprintln!(
        "chaos {prefix}: seed {}: {} stops ({:?}), {} workflows, {retried} refused starts \
         retried, {} steps; step call p99 {:?}, max {:?}; run p99 {:?}, max {:?}; {} lost, {} \
         step bodies re-ran ({} acknowledged), {twice} transactions committed twice",
        plan.seed,
        stops.len(),
        stops,
        handles.len(),
        runs.len(),
        p99(&stalls),
        max(&stalls),
        p99(&whole),
        max(&whole),
        lost.len(),
        reran.len(),
        acked_reran.len()
    );
    if !reran.is_empty() {
        eprintln!("re-ran: {:?}", reran.iter().take(10).collect::<Vec<_>>());
    }
    for ((id, _), _) in &reran {
        let rows: Vec<(i32, String, Option<String>)> = sqlx::query_as(
            "SELECT function_id, function_name, error FROM dbos.operation_outputs \
             WHERE workflow_uuid = $1 ORDER BY function_id",
        )
        .bind(id)
        .fetch_all(&app)
        .await
        .unwrap();
        let status: (String, i64) = sqlx::query_as(
            "SELECT status, recovery_attempts FROM dbos.workflow_status WHERE workflow_uuid = $1",
        )
        .bind(id)
        .fetch_one(&app)
        .await
        .unwrap();
        eprintln!("{id}: {status:?}, records {rows:?}");
    }
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert!(
        acked_reran.is_empty(),
        "acknowledged steps re-ran: {acked_reran:?}"
    );
    assert_eq!(twice, 0, "a transaction committed twice");
    rt.shutdown(Duration::from_secs(10)).await.unwrap();
    app.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak: run by .ci/run (short) or STEAD_SOAK=full (10 minutes)"]
async fn chaos_direct() {
    require_cluster!();
    let cluster = Arc::new(Cluster::start());
    cluster.create_db("t");
    soak("cd-", cluster.clone(), &cluster.url("t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak: run by .ci/run (short) or STEAD_SOAK=full (10 minutes)"]
async fn chaos_through_pgbouncer() {
    require_cluster!(bouncer);
    let cluster = Arc::new(Cluster::start());
    cluster.create_db("t");
    let bouncer = Bouncer::start(cluster.port, PoolMode::Transaction);
    let url = format!("{}?pooler=transaction", bouncer.url("t"));
    soak("cb-", cluster.clone(), &url).await;
}

//! Behind PgBouncer (Debian's, started by the test in front of a server of its own): launch,
//! migrate and run steps, a queue, messages, events, durable sleeps, children and a fleet
//! lease, in transaction mode (`pooler=transaction`) and in session mode (`pooler=session`).
//! Without the setting, a transaction pooler's clash is a typed error that names it.

use std::time::Duration;

use stead::{Context, Queue, Runtime, WorkflowOptions};

use crate::common;
use crate::common::cluster::{Bouncer, Cluster, PoolMode, Setup};
use crate::require_cluster;

async fn leaf(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", move || async move { Ok(n * 2) }).await
}

/// Every kind of durable call once.
async fn tour(ctx: Context, n: u64) -> stead::Result<u64> {
    let a: u64 = ctx.step("one", move || async move { Ok(n) }).await?;
    let me = ctx.workflow_id().to_owned();
    ctx.send(&me, &a, Some("t")).await?;
    let got: Option<u64> = ctx.recv(Some("t"), Duration::from_secs(30)).await?;
    ctx.set_event("seen", &got).await?;
    let seen: Option<Option<u64>> = ctx.get_event(&me, "seen", Duration::from_secs(5)).await?;
    ctx.sleep(Duration::from_millis(50)).await?;
    let child: u64 = ctx
        .run_child("leaf", n, WorkflowOptions::with_id(format!("{me}-leaf")))
        .await?;
    Ok(seen.flatten().unwrap_or(0) + child)
}

fn executor(url: &str, id: &str) -> stead::RuntimeBuilder {
    Runtime::builder()
        .database_url(url)
        .app_version("pooled-1")
        .executor_id(id)
        .lease(Duration::from_secs(2))
        // Every periodic statement warms up within the first wave (a 10 s refresh took its
        // fifth run, and its routine, only after the settle below under load).
        .queue_refresh(Duration::from_millis(500))
        .schedule_refresh(Duration::from_millis(500))
        .workflow("tour", tour)
        .workflow("leaf", leaf)
        .queue(Queue::new("pooled").worker_concurrency(5))
}

/// Workflows `ns`, half started and half enqueued, each finishing with its expected result.
async fn wave(rt: &Runtime, ns: std::ops::Range<u64>, mode: PoolMode) {
    let mut handles = Vec::new();
    for n in ns {
        let opts = WorkflowOptions::with_id(format!("p-{n}"));
        let h = if n % 2 == 0 {
            rt.start("tour", n, opts).await
        } else {
            rt.enqueue("pooled", "tour", n, opts).await
        };
        handles.push((n, h.unwrap()));
    }
    for (n, h) in &handles {
        let got = tokio::time::timeout(common::wait::SETUP, h.result::<u64>())
            .await
            .unwrap_or_else(|_| panic!("p-{n} did not finish ({mode:?})"))
            .unwrap_or_else(|e| panic!("p-{n} ({mode:?}): {e}"));
        assert_eq!(got, 3 * n);
    }
}

/// One of stead's stored routines: what identifies it and how often it was called.
#[derive(Debug)]
struct Routine {
    name: String,
    /// The wrapped statement, its settings and parameter types: one routine per such triple.
    body: (String, String, String),
    calls: i64,
}

async fn routines(direct: &sqlx::PgPool) -> Vec<Routine> {
    let rows: Vec<(String, String, String, String, i64)> = sqlx::query_as(
        "SELECT p.proname::text, p.prosrc, coalesce(array_to_string(p.proconfig, ','), ''), \
                p.proargtypes::text, coalesce(s.calls, 0) \
         FROM pg_proc p LEFT JOIN pg_stat_user_functions s ON s.funcid = p.oid \
         WHERE p.proname LIKE 'stead_q_%' AND p.pronamespace = 'dbos'::regnamespace ORDER BY 1",
    )
    .fetch_all(direct)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(name, src, config, args, calls)| Routine {
            name,
            body: (src, config, args),
            calls,
        })
        .collect()
}

/// Routine calls a wave of 40 workflows makes at least: it made about 550 here, while the
/// periodic statements alone make about 7 a second.
const WAVE_CALLS: i64 = 300;

/// The second wave ran on the first wave's routines: they all remain, their calls grew by
/// more than the periodic statements alone make, and no statement got a second routine. A
/// statement the first wave ran too rarely (a batch of two starts) may get its routine now.
async fn reused(direct: &sqlx::PgPool, before: &[Routine]) {
    let calls = |rs: &[Routine]| -> i64 {
        rs.iter()
            .filter(|r| before.iter().any(|b| b.name == r.name))
            .map(|r| r.calls)
            .sum()
    };
    let was = calls(before);
    // Call counts reach the statistics when a server connection goes idle: seconds, more under
    // load (a progress wait).
    let deadline = std::time::Instant::now() + common::wait::SETUP;
    let after = loop {
        let now = routines(direct).await;
        if calls(&now) - was >= WAVE_CALLS || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let gone: Vec<_> = before
        .iter()
        .filter(|b| !after.iter().any(|r| r.name == b.name))
        .collect();
    assert!(gone.is_empty(), "routines vanished: {gone:#?}");
    assert!(
        calls(&after) - was >= WAVE_CALLS,
        "the second wave's 40 workflows called the routines {} times",
        calls(&after) - was
    );
    for (i, r) in after.iter().enumerate() {
        let twin = after[i + 1..].iter().find(|o| o.body == r.body);
        assert!(
            twin.is_none(),
            "one statement, two routines: {r:#?} {twin:#?}"
        );
    }
}

/// A cluster of the test's own with database `t`, and PgBouncer in `mode` in front of it.
/// PL/pgSQL calls are counted (`pg_stat_user_functions`), so a test can see routines used.
fn behind(mode: PoolMode) -> (Cluster, Bouncer) {
    let cluster = Cluster::with(Setup {
        conf: vec!["track_functions = 'pl'".into()],
        ..Setup::default()
    });
    cluster.create_db("t");
    let bouncer = Bouncer::start(cluster.port, mode);
    (cluster, bouncer)
}

async fn run_through(mode: PoolMode, setting: &str) {
    let (cluster, bouncer) = behind(mode);
    let url = format!("{}?pooler={setting}", bouncer.url("t"));
    let rt = executor(&url, "pooled-a")
        .launch()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "launch through pgbouncer ({mode:?}): {e}\n{}",
                bouncer.log()
            )
        });
    // Two waves: the second runs on the stored routines the first left (transaction mode).
    wave(&rt, 0..40, mode).await;
    let direct = sqlx::PgPool::connect(&cluster.url("t")).await.unwrap();
    let routines = || routines(&direct);
    // Periodic statements (a queue's survey every tick) warm up on their own clock: wait until
    // no routine has been made for 5 s, so the second wave finds nearly all of them.
    let names = |rs: &[Routine]| rs.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    let mut made = routines().await;
    let settle = std::time::Instant::now();
    while mode == PoolMode::Transaction && settle.elapsed() < common::wait::SETUP {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = routines().await;
        if names(&now) == names(&made) {
            break;
        }
        made = now;
    }
    if mode == PoolMode::Transaction {
        assert!(
            made.len() >= 3,
            "hot statements got routines: {}",
            made.len()
        );
    } else {
        assert!(
            made.is_empty(),
            "no routines where prepared statements last: {made:#?}"
        );
    }
    wave(&rt, 40..80, mode).await;
    if mode == PoolMode::Transaction {
        reused(&direct, &made).await;
    } else {
        assert!(routines().await.is_empty(), "no routines in session mode");
    }
    // The lease is held (in an open transaction) and seen live; it pins no snapshot, so it
    // holds back no vacuum.
    let (live, pinned): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND objsubid = 2), \
                (SELECT count(*) FROM pg_stat_activity WHERE datname = 't' \
                 AND state = 'idle in transaction' AND backend_xmin IS NOT NULL)",
    )
    .fetch_one(&direct)
    .await
    .unwrap();
    assert_eq!(live, 1, "the liveness lock is held");
    assert_eq!(pinned, 0, "the open lease transaction holds a snapshot");
    let executors = rt.client().list_executors().await.unwrap();
    assert!(
        executors
            .iter()
            .any(|e| e.executor_id == "pooled-a" && e.live),
        "{executors:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    direct.close().await;
    let log = bouncer.log();
    assert!(!log.contains("ERROR"), "pgbouncer logged errors:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_feature_runs_behind_pgbouncer_in_transaction_mode() {
    require_cluster!(bouncer);
    run_through(PoolMode::Transaction, "transaction").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_feature_runs_behind_pgbouncer_in_session_mode() {
    require_cluster!(bouncer);
    run_through(PoolMode::Session, "session").await;
}

/// Two runtimes through one transaction pooler: they share no server connection state, and
/// the fleet sees both live and then, once one is gone, only the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_sees_executors_behind_a_transaction_pooler() {
    require_cluster!(bouncer);
    let (_cluster, bouncer) = behind(PoolMode::Transaction);
    let url = format!("{}?pooler=transaction", bouncer.url("t"));
    let a = executor(&url, "pooled-a").launch().await.unwrap();
    let b = executor(&url, "pooled-b").launch().await.unwrap();
    let live = |rt: &Runtime| {
        let client = rt.client().clone();
        async move {
            let mut ids: Vec<String> = client
                .list_executors()
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.live)
                .map(|e| e.executor_id)
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(live(&a).await, ["pooled-a", "pooled-b"]);
    a.shutdown(Duration::from_secs(5)).await.unwrap();
    // The pooler closes the server connection of a client gone mid-transaction: soon, not at once.
    common::wait::until_async(
        "pooled-a no longer live after its shutdown",
        Duration::from_millis(100),
        || async { live(&b).await == ["pooled-b"] },
    )
    .await;
    b.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A transaction pooler without `pooler=transaction`: the clash of prepared statements is a
/// typed error naming the setting, not a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_without_the_setting_is_named_in_the_error() {
    require_cluster!(bouncer);
    let (_cluster, bouncer) = behind(PoolMode::Transaction);
    // Session-mode settings (no extra_float_digits) so the connection itself is accepted.
    let url = format!("{}?pooler=session", bouncer.url("t"));
    let launched = tokio::time::timeout(common::wait::SETUP, async {
        let rt = executor(&url, "unpooled").launch().await?;
        // Enough statements from enough connections that two meet on one server connection.
        let mut handles = Vec::new();
        for n in 0..40u64 {
            handles.push(rt.start("tour", n, WorkflowOptions::default()).await?);
        }
        for h in &handles {
            h.result::<u64>().await?;
        }
        rt.shutdown(Duration::from_secs(5)).await
    })
    .await
    .expect("a misconfigured pooler must fail, not hang");
    let err = launched.expect_err("prepared statements clash behind a transaction pooler");
    assert!(
        err.to_string().contains("pooler=transaction"),
        "the error names the setting: {err}"
    );
}

/// PgBouncer with Debian's defaults refuses the driver's `extra_float_digits` at startup: a
/// URL without `pooler=` is refused at once, with the setting named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooler_refusing_startup_parameters_is_named_in_the_error() {
    require_cluster!(bouncer);
    let (_cluster, bouncer) = behind(PoolMode::Session);
    let launched = tokio::time::timeout(
        common::wait::SETUP,
        executor(&bouncer.url("t"), "unset").launch(),
    )
    .await
    .expect("refused, not retried");
    let err = launched.err().expect("the pooler refuses the startup");
    assert!(
        err.to_string()
            .contains("add pooler=session or pooler=transaction"),
        "{err}"
    );
}

//! Sharded mode on Citus (`sharding=citus`): one application's workflows spread over bucket
//! schemas that Citus places on its workers. Workflows talk across buckets (messages, events,
//! children under a tenant's shard key), a queue's global concurrency holds across them, and
//! executors connected to different nodes share a queue, see each other live, wake each other
//! through NOTIFY. On the shared cluster (`STEAD_TEST_CITUS`), each test with a database of its
//! own. And on a cluster of the test's own: a worker stopped for five seconds under load, and the
//! coordinator restarted, lose no workflow and re-run no step.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use stead::{Context, Queue, Runtime, WorkflowOptions};

use crate::common::citus::CitusCluster;
use crate::common::cluster::Cluster;
use crate::common::{self, Backend, TestDb};

const BUCKETS: u16 = 4;

/// Rows of `table` matching `filter` in each bucket schema.
async fn per_bucket(pool: &PgPool, table: &str, filter: &str) -> Vec<i64> {
    let mut counts = Vec::new();
    for b in 0..BUCKETS {
        let schema = if b == 0 {
            "dbos".to_owned()
        } else {
            format!("dbos_shard{b}")
        };
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {schema}.{table} WHERE {filter}"
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        counts.push(n);
    }
    counts
}

/// A step, a message to its partner and one from it, an event, and a child under the tenant's
/// shard key.
async fn talker(ctx: Context, (me, partner): (u32, u32)) -> stead::Result<u32> {
    let doubled = ctx
        .step("double", move || async move { Ok(me * 2) })
        .await?;
    ctx.send(&format!("talk-{partner}"), &me, Some("hi"))
        .await?;
    let heard: Option<u32> = ctx.recv(Some("hi"), Duration::from_secs(60)).await?;
    ctx.set_event("heard", &heard).await?;
    let options = WorkflowOptions::with_id(format!("talk-{me}-child")).shard_key("tenant-x");
    let child: u32 = ctx.run_child("leaf", me, options).await?;
    Ok(doubled + heard.unwrap_or(0) + child)
}

async fn leaf(_ctx: Context, n: u32) -> stead::Result<u32> {
    Ok(n + 1000)
}

async fn launch(db: &TestDb, id: &str) -> Runtime {
    common::builder(db)
        .executor_id(id)
        .workflow("talker", talker)
        .workflow("leaf", leaf)
        .workflow("hold", hold)
        .queue(
            Queue::new("shared")
                .concurrency(2)
                .polling_interval(Duration::from_millis(100)),
        )
        .launch()
        .await
        .unwrap()
}

static RUNNING: AtomicU32 = AtomicU32::new(0);
static MOST: AtomicU32 = AtomicU32::new(0);

/// Holds a slot for a while, counting how many hold one at once (in this process).
async fn hold(ctx: Context, _: u32) -> stead::Result<()> {
    ctx.step("hold", || async {
        let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
        MOST.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_in_different_buckets_talk_and_a_tenants_children_share_one() {
    require_citus!();
    let db = TestDb::on(Backend::Citus(BUCKETS)).await;
    let rt = launch(&db, "talk").await;
    let mut handles = Vec::new();
    for me in 0..16u32 {
        let options = WorkflowOptions::with_id(format!("talk-{me}"));
        handles.push(rt.start("talker", (me, me ^ 1), options).await.unwrap());
    }
    for (me, h) in handles.iter().enumerate() {
        let me = me as u32;
        let got = common::within(h.result::<u32>()).await.unwrap();
        assert_eq!(got, me * 2 + (me ^ 1) + me + 1000, "talk-{me}");
    }
    let heard: Option<u32> = rt
        .client()
        .get_event("talk-3", "heard", Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(heard, Some(2));
    let pool = db.pool().await;
    // Sixteen ids hashed over four buckets, and the tenant's sixteen children in one of them.
    let talkers = per_bucket(&pool, "workflow_status", "workflow_uuid NOT LIKE '%-child'").await;
    assert!(
        talkers.iter().filter(|n| **n > 0).count() >= 2,
        "{talkers:?}"
    );
    let children = per_bucket(&pool, "workflow_status", "workflow_uuid LIKE '%-child'").await;
    assert_eq!(
        children.iter().filter(|n| **n > 0).count(),
        1,
        "{children:?}"
    );
    assert_eq!(children.iter().sum::<i64>(), 16);
    // Found by id alone, wherever they live; listed and counted across every bucket.
    let child = rt.client().handle("talk-5-child").status().await.unwrap();
    assert_eq!(child.status, stead::Status::Success);
    let listed = rt
        .client()
        .list_workflows(stead::client::ListWorkflows::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 32);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Two executors, one connected to the coordinator and one to a worker, share a queue whose
/// global concurrency (2) holds across buckets and executors; each sees the other live; a
/// message sent through the coordinator wakes a receiver waiting on the worker's executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_on_different_nodes_share_a_queue_see_each_other_and_wake_each_other() {
    require_citus!();
    let _turn = crate::one_backend_at_a_time!();
    RUNNING.store(0, Ordering::SeqCst);
    MOST.store(0, Ordering::SeqCst);
    let db = TestDb::on(Backend::Citus(BUCKETS)).await;
    let a = launch(&db, "on-coordinator").await;
    let pool = db.pool().await;
    let worker: (String, i32) = sqlx::query_as(
        "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 ORDER BY nodeid LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let on_worker = format!("postgres://postgres@{}:{}/{}", worker.0, worker.1, db.name);
    let b = stead::Runtime::builder()
        .database_url(&on_worker)
        .pool_size(4)
        .app_version("test-1")
        .executor_id("on-worker")
        .workflow("talker", talker)
        .workflow("leaf", leaf)
        .workflow("hold", hold)
        .workflow("receiver", receiver)
        .queue(
            Queue::new("shared")
                .concurrency(2)
                .polling_interval(Duration::from_millis(100)),
        )
        .launch()
        .await
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..12u32 {
        let options = WorkflowOptions::with_id(format!("hold-{i}"));
        handles.push(a.enqueue("shared", "hold", i, options).await.unwrap());
    }
    for h in &handles {
        common::within(h.result::<()>()).await.unwrap();
    }
    assert!(
        MOST.load(Ordering::SeqCst) <= 2,
        "{} ran at once",
        MOST.load(Ordering::SeqCst)
    );
    let live: Vec<String> = a
        .client()
        .list_executors()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.live)
        .map(|e| e.executor_id)
        .collect();
    assert_eq!(
        live.len(),
        2,
        "both live, seen from the coordinator: {live:?}"
    );
    // A receiver parked on the worker's executor, woken by a send through the coordinator.
    let h = b
        .start("receiver", (), WorkflowOptions::with_id("far"))
        .await
        .unwrap();
    let parked = "workflow_uuid = 'far' AND function_name = 'DBOS.sleep'";
    common::wait::until_async(
        "far parked in its recv",
        Duration::from_millis(20),
        || async {
            per_bucket(&pool, "operation_outputs", parked)
                .await
                .iter()
                .sum::<i64>()
                == 1
        },
    )
    .await;
    // Past its first polls: a poll now is two seconds or more away.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = Instant::now();
    a.client().send("far", &7u32, Some("t")).await.unwrap();
    assert_eq!(
        common::within(h.result::<Option<u32>>()).await.unwrap(),
        Some(7)
    );
    let took = sent.elapsed();
    println!("a send through the coordinator woke a receiver on a worker after {took:?}");
    // Behaviour: woken through NOTIFY heard on the bucket's node; a recv whose sends are heard
    // polls only every 2 s or more, so under 1.5 s is the announcement, with room for load.
    assert!(took < Duration::from_millis(1500), "{took:?}");
    a.shutdown(Duration::from_secs(5)).await.unwrap();
    b.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn receiver(ctx: Context, _: ()) -> stead::Result<Option<u32>> {
    ctx.recv(Some("t"), Duration::from_secs(60)).await
}

/// Ten steps of 300 ms, each counted (`common::count_body`).
async fn paced(ctx: Context, steps: u32) -> stead::Result<u32> {
    common::counted_steps(&ctx, steps, Duration::from_millis(300)).await
}

/// Runs `n` paced workflows on a sharded layout of a cluster of the test's own, stops `node`
/// for five seconds once they are in flight and starts it again; every workflow finishes with
/// its result, no step body runs twice, none is recovered.
async fn through_a_node_outage(prefix: &str, node: impl Fn(&CitusCluster) -> &Cluster) {
    let cluster = CitusCluster::start(2, "t");
    let url = format!("{}?sharding=citus&shards={BUCKETS}", cluster.url());
    let rt = Runtime::builder()
        .database_url(&url)
        .app_version("citus-1")
        .executor_id(prefix)
        .lease(Duration::from_secs(2))
        .workflow("paced", paced)
        .launch()
        .await
        .unwrap();
    let n = 100u32;
    let mut handles = Vec::new();
    for w in 0..n {
        let options = WorkflowOptions::with_id(format!("{prefix}{w}"));
        handles.push(rt.start("paced", 10u32, options).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stopped = Instant::now();
    node(&cluster).stop();
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(stopped.elapsed())).await;
    node(&cluster).start_again();
    for (w, h) in handles.iter().enumerate() {
        let result = common::within(h.result::<u32>())
            .await
            .unwrap_or_else(|e| panic!("{prefix}{w}: {e}"));
        assert_eq!(result, 45);
    }
    let runs = common::body_runs_by_step(prefix);
    assert_eq!(runs.len() as u32, n * 10, "every step ran");
    let again: Vec<_> = runs.iter().filter(|(_, k)| *k > 1).collect();
    assert!(
        again.is_empty(),
        "{} step bodies re-ran: {:?}",
        again.len(),
        &again[..again.len().min(5)]
    );
    let pool = PgPool::connect(&cluster.url()).await.unwrap();
    let mut recovered = 0i64;
    for b in 0..BUCKETS {
        let schema = if b == 0 {
            "dbos".to_owned()
        } else {
            format!("dbos_shard{b}")
        };
        recovered += sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {schema}.workflow_status \
             WHERE status <> 'SUCCESS' OR recovery_attempts > 1"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
    }
    assert_eq!(recovered, 0, "every workflow finished once, none recovered");
    pool.close().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_for_five_seconds_under_load_loses_nothing_and_reruns_no_step() {
    crate::require_own_citus!();
    through_a_node_outage("cw-", |c| &c.workers[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_restarted_under_load_loses_nothing_and_reruns_no_step() {
    crate::require_own_citus!();
    through_a_node_outage("cc-", |c| &c.coordinator).await;
}

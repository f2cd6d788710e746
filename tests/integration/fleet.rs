//! Fleets: two executor processes sharing queues through Postgres. Global limits hold across
//! them, no workflow runs twice, a killed executor's claimed work is finished after its restart,
//! and an enqueue in one process wakes the other without waiting for a poll.

use std::process::Child;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use stead::{Context, Queue, Runtime, WorkflowOptions};

use crate::common;

/// Set in the child process: the database it serves, its executor id and what to do.
const CHILD_DB: &str = "STEAD_TEST_FLEET_DB";
const CHILD_ID: &str = "STEAD_TEST_FLEET_EXECUTOR";
const CHILD_MODE: &str = "STEAD_TEST_FLEET_MODE";

/// Each test's database, by the prefix of its workflow ids (tests run in parallel).
static POOLS: OnceLock<Mutex<Vec<(String, PgPool)>>> = OnceLock::new();

fn register(prefix: &str, pool: PgPool) {
    POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .push((prefix.to_owned(), pool));
}

fn pool_for(workflow_id: &str) -> PgPool {
    let pools = POOLS.get_or_init(Default::default).lock().unwrap();
    pools
        .iter()
        .find(|(prefix, _)| workflow_id.starts_with(prefix.as_str()))
        .map(|(_, pool)| pool.clone())
        .expect("a pool registered for this workflow")
}

/// Records its span in the database (shared by both processes), then holds for `ms`.
async fn span(ctx: Context, ms: u64) -> stead::Result<()> {
    let id = ctx.workflow_id().to_owned();
    ctx.step_typed("span", || {
        let id = id.clone();
        async move {
            let pool = pool_for(&id);
            sqlx::query("INSERT INTO spans VALUES ($1, clock_timestamp(), NULL)")
                .bind(&id)
                .execute(&pool)
                .await?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            sqlx::query("UPDATE spans SET ended = clock_timestamp() WHERE id = $1")
                .bind(&id)
                .execute(&pool)
                .await
                .map(|_| ())
        }
    })
    .await
}

/// Its body inserts the workflow's id under a unique constraint: a second run would fail.
async fn once(ctx: Context, _: ()) -> stead::Result<()> {
    let id = ctx.workflow_id().to_owned();
    ctx.step_typed("effect", || {
        let id = id.clone();
        async move {
            sqlx::query("INSERT INTO effects VALUES ($1)")
                .bind(&id)
                .execute(&pool_for(&id))
                .await
                .map(|_| ())
        }
    })
    .await
}

/// Parks forever in the child (its process is killed); finishes in the parent.
async fn parked(ctx: Context, _: ()) -> stead::Result<u32> {
    ctx.step("claimed", || async { Ok(1) }).await?;
    if std::env::var(CHILD_MODE).is_ok() {
        std::future::pending::<()>().await;
    }
    ctx.step("finished", || async { Ok(2) }).await
}

fn builder(url: &str, executor: &str) -> stead::RuntimeBuilder {
    Runtime::builder()
        .database_url(url)
        .app_version("fleet-1")
        .executor_id(executor)
        .workflow("span", span)
        .workflow("once", once)
        .workflow("parked", parked)
        .queue(Queue::new("global").concurrency(3).worker_concurrency(2))
        .queue(Queue::new("drain").worker_concurrency(50))
        .queue(Queue::new("claimed"))
        .queue(Queue::new("wake").polling_interval(Duration::from_secs(30)))
}

async fn prepare(url: &str) -> PgPool {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(url)
        .await
        .unwrap();
    for ddl in [
        "CREATE TABLE IF NOT EXISTS spans (id text PRIMARY KEY, started timestamptz, ended timestamptz)",
        "CREATE TABLE IF NOT EXISTS effects (id text PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS ready (executor text PRIMARY KEY)",
    ] {
        sqlx::query(ddl).execute(&pool).await.unwrap();
    }
    pool
}

/// Entry point of the second executor; does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the fleet tests as their second executor"]
async fn fleet_child() {
    let (Ok(url), Ok(id), Ok(mode)) = (
        std::env::var(CHILD_DB),
        std::env::var(CHILD_ID),
        std::env::var(CHILD_MODE),
    ) else {
        return;
    };
    let pool = prepare(&url).await;
    register("", pool.clone());
    let mut b = builder(&url, &id);
    if mode == "enqueue" {
        b = b.listen_queues(Vec::<String>::new());
    }
    let rt = b.launch().await.unwrap();
    sqlx::query("INSERT INTO ready VALUES ($1)")
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();
    if mode == "enqueue" {
        rt.enqueue("wake", "once", (), WorkflowOptions::with_id("woken"))
            .await
            .unwrap();
    }
    std::future::pending::<()>().await;
}

fn spawn_child(url: &str, executor: &str, mode: &str) -> Child {
    common::child_test("fleet::fleet_child")
        .env(CHILD_DB, url)
        .env(CHILD_ID, executor)
        .env(CHILD_MODE, mode)
        .spawn()
        .unwrap()
}

/// Kills the child when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The parent executor; workflows with ids starting with `prefix` use this test's database.
async fn parent(db: &common::TestDb, prefix: &str) -> (Runtime, PgPool) {
    let pool = prepare(&db.url).await;
    register(prefix, pool.clone());
    (builder(&db.url, "parent").launch().await.unwrap(), pool)
}

/// Waits until the child executor has launched (it then serves its queues).
async fn child_ready(pool: &PgPool, executor: &str) {
    let ready = format!("SELECT count(*) FROM ready WHERE executor = '{executor}'");
    common::wait_count(pool, &ready, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_concurrency_holds_across_two_executors() {
    // Concurrency 3 across the fleet, 2 per executor: reaching 3 needs both executors, and
    // exceeding 3 would mean the limit was counted per executor.
    let db = common::TestDb::new().await;
    let (rt, pool) = parent(&db, "g-").await;
    let _child = Killed(spawn_child(&db.url, "child", "serve"));
    child_ready(&pool, "child").await;
    let mut handles = Vec::new();
    for i in 0..12 {
        handles.push(
            rt.enqueue(
                "global",
                "span",
                300u64,
                WorkflowOptions::with_id(format!("g-{i}")),
            )
            .await
            .unwrap(),
        );
    }
    for h in &handles {
        common::within(h.result::<()>()).await.unwrap();
    }
    let max: i64 = sqlx::query_scalar(
        "SELECT max(n) FROM (SELECT (SELECT count(*) FROM spans b WHERE b.started <= a.started AND a.started < b.ended) AS n FROM spans a) x",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    // Each executor may run 2; without the global limit the two would reach 4.
    assert_eq!(
        max, 3,
        "never more than 3 running in total, and all 3 slots used"
    );
    let executors: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT executor_id) FROM dbos.workflow_status WHERE queue_name = 'global'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(executors, 2, "both executors ran some");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_drain_a_queue_and_run_each_workflow_once() {
    const N: usize = 2000;
    let db = common::TestDb::new().await;
    let (rt, pool) = parent(&db, "d-").await;
    let _child = Killed(spawn_child(&db.url, "child", "serve"));
    child_ready(&pool, "child").await;
    // From a client, which runs nothing: every row waits in the table for a claim. Enqueued by
    // the parent, an enqueue that finds a slot free runs there, and the parent may run them all.
    let client = stead::Client::connect(&db.url).await.unwrap();
    for i in 0..N {
        client
            .enqueue(
                "drain",
                "once",
                (),
                WorkflowOptions::with_id(format!("d-{i}")),
            )
            .await
            .unwrap();
    }
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE queue_name = 'drain' AND status IN ('SUCCESS', 'ERROR')",
        N as i64,
    )
    .await;
    let failed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM dbos.workflow_status WHERE status <> 'SUCCESS'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        failed, 0,
        "a body ran twice (its unique insert failed) or a workflow failed"
    );
    let effects: i64 = sqlx::query_scalar("SELECT count(*) FROM effects")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(effects as usize, N);
    let per_executor: Vec<(String, i64)> = sqlx::query_as(
        "SELECT executor_id, count(*) FROM dbos.workflow_status WHERE queue_name = 'drain' GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        per_executor.len(),
        2,
        "both executors claimed work: {per_executor:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_executors_claimed_workflows_finish_after_its_restart() {
    let db = common::TestDb::new().await;
    let enqueuer = common::builder(&db)
        .executor_id("enqueuer")
        .app_version("fleet-1")
        .workflow("span", span)
        .workflow("once", once)
        .workflow("parked", parked)
        .listen_queues(Vec::<String>::new())
        .launch()
        .await
        .unwrap();
    let pool = prepare(&db.url).await;
    register("c-", pool.clone());
    let mut child = Killed(spawn_child(&db.url, "crashy", "serve"));
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            enqueuer
                .enqueue(
                    "claimed",
                    "parked",
                    (),
                    // The child process defines the queue when it starts, maybe after this.
                    WorkflowOptions::with_id(format!("c-{i}")).allow_undefined_queue(),
                )
                .await
                .unwrap(),
        );
    }
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status s JOIN dbos.operation_outputs o USING (workflow_uuid) WHERE s.executor_id = 'crashy' AND s.status = 'PENDING'",
        5,
    )
    .await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let restarted = builder(&db.url, "crashy").launch().await.unwrap();
    for h in &ids {
        assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 2);
    }
    restarted.shutdown(Duration::from_secs(5)).await.unwrap();
    enqueuer.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_in_another_process_wakes_the_queue_at_once() {
    let db = common::TestDb::new().await;
    let (rt, pool) = parent(&db, "woken").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    let _child = Killed(spawn_child(&db.url, "producer", "enqueue"));
    let h = rt.client().handle("woken");
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'woken' AND status = 'SUCCESS'",
        1,
    )
    .await;
    let latency: i64 = sqlx::query_scalar(
        "SELECT started_at_epoch_ms - created_at FROM dbos.workflow_status WHERE workflow_uuid = 'woken'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        latency < 1000,
        "claimed {latency} ms after the enqueue; the queue polls every 30 s"
    );
    assert_eq!(
        h.status().await.unwrap().executor_id.as_deref(),
        Some("parent")
    );
    // Behaviour: the claim came from the wake-up, not the 30 s poll; 20 s leaves a loaded child
    // process's launch its room and still tells the two apart.
    assert!(began.elapsed() < Duration::from_secs(20));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

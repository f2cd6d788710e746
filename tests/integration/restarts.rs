//! Postgres restarts while the process lives: the server of the test's own is stopped and
//! started again under 300 running workflows. A stop shorter than the lease re-runs no step body;
//! a stop longer than it, with a second executor present, still runs each step body once and
//! finishes each workflow once (nobody's work moved: both executors re-proved their liveness).

use std::time::{Duration, Instant};

use stead::{Context, Runtime, WorkflowOptions};

use crate::common::cluster::Cluster;
use crate::{common, require_cluster};

const WORKFLOWS: u32 = 300;
const STEPS: u32 = 10;

async fn paced(ctx: Context, steps: u32) -> stead::Result<u32> {
    common::counted_steps(&ctx, steps, Duration::from_millis(300)).await
}

fn executor(url: &str, id: &str) -> stead::RuntimeBuilder {
    Runtime::builder()
        .database_url(url)
        .app_version("restarts-1")
        .executor_id(id)
        .lease(Duration::from_secs(2))
        .adoption_interval(Duration::from_millis(500))
        .workflow("paced", paced)
}

/// Starts `WORKFLOWS` on the runtimes in turn, stops the server for `outage` once they are in
/// flight, and checks every workflow's result, every body's run count and the stored steps.
async fn run_through_outage(
    prefix: &str,
    runtimes: &[Runtime],
    cluster: &Cluster,
    outage: Duration,
) {
    let mut handles = Vec::new();
    for w in 0..WORKFLOWS {
        let rt = &runtimes[w as usize % runtimes.len()];
        let id = format!("{prefix}{w}");
        handles.push(
            rt.start("paced", STEPS, WorkflowOptions::with_id(id))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stopped = Instant::now();
    cluster.stop();
    tokio::time::sleep(outage.saturating_sub(stopped.elapsed())).await;
    cluster.start_again();
    let down = stopped.elapsed();

    for (w, h) in handles.iter().enumerate() {
        let result = tokio::time::timeout(Duration::from_secs(120), h.result::<u32>())
            .await
            .unwrap_or_else(|_| panic!("{prefix}{w} did not finish"))
            .unwrap_or_else(|e| panic!("{prefix}{w}: {e}"));
        assert_eq!(result, STEPS * (STEPS - 1) / 2);
    }
    let runs = common::body_runs_by_step(prefix);
    assert_eq!(runs.len() as u32, WORKFLOWS * STEPS, "every step ran");
    let again: Vec<_> = runs.iter().filter(|(_, n)| *n > 1).collect();
    assert!(
        again.is_empty(),
        "down {down:?}: {} step bodies re-ran, e.g. {:?}",
        again.len(),
        again.iter().take(5).collect::<Vec<_>>()
    );
    let pool = sqlx::PgPool::connect(&cluster.url("t")).await.unwrap();
    let (outputs, finished): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid LIKE $1 || '%'), \
                (SELECT count(*) FROM dbos.workflow_status \
                 WHERE workflow_uuid LIKE $1 || '%' AND status = 'SUCCESS' AND recovery_attempts <= 1)",
    )
    .bind(prefix)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(outputs, i64::from(WORKFLOWS * STEPS), "one output per step");
    assert_eq!(
        finished,
        i64::from(WORKFLOWS),
        "each workflow finished, never recovered"
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_second_stop_reruns_no_step() {
    require_cluster!();
    let cluster = Cluster::start();
    cluster.create_db("t");
    let rt = executor(&cluster.url("t"), "restart-a")
        .launch()
        .await
        .unwrap();
    run_through_outage(
        "rs5-",
        std::slice::from_ref(&rt),
        &cluster,
        Duration::from_secs(5),
    )
    .await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_longer_than_the_lease_with_a_peer_runs_each_step_once() {
    require_cluster!();
    let cluster = Cluster::start();
    cluster.create_db("t");
    let url = cluster.url("t");
    let a = executor(&url, "restart-a").launch().await.unwrap();
    let b = executor(&url, "restart-b").launch().await.unwrap();
    run_through_outage(
        "rs8-",
        &[a.clone(), b.clone()],
        &cluster,
        Duration::from_secs(8),
    )
    .await;
    a.shutdown(Duration::from_secs(5)).await.unwrap();
    b.shutdown(Duration::from_secs(5)).await.unwrap();
}

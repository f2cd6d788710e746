//! Round trips: a fresh step costs exactly one round trip and one statement (the last one none:
//! its record rides with the finish), measured on the wire by a counting proxy between the
//! runtime and Postgres.

use std::time::Duration;

use stead::{Context, WorkflowOptions};

use crate::common;

async fn steps(ctx: Context, n: u32) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 0..n {
        sum += ctx.step("noop", || async move { Ok(i) }).await?;
    }
    Ok(sum)
}

#[tokio::test]
async fn a_fresh_step_costs_one_round_trip_and_one_statement() {
    let db = common::TestDb::new().await;
    let upstream = common::server_url();
    let host = upstream
        .rsplit('@')
        .next()
        .unwrap()
        .trim_start_matches("postgres://");
    let proxy = common::wire::WireCounter::start(host).await;
    let user = common::server_url()
        .trim_start_matches("postgres://")
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    let url = format!(
        "postgres://{user}@127.0.0.1:{}/{}?sslmode=disable",
        proxy.port, db.name
    );
    let rt = stead::Runtime::builder()
        .database_url(url)
        .app_version("test-1")
        // No polls, sweeps or lease pings during the measurement (a slow, loaded run would
        // count them).
        .internal_queue_poll(Duration::from_secs(3600))
        .cancel_sweep(Duration::from_secs(3600))
        .lease(Duration::from_secs(600))
        .workflow("steps", steps)
        .launch()
        .await
        .unwrap();
    // Warm up: opens the lane connections and prepares their statements.
    let warmup = rt
        .start("steps", 3, WorkflowOptions::default())
        .await
        .unwrap();
    common::within(warmup.result::<u32>()).await.unwrap();

    let mut measured = Vec::new();
    for n in [10u32, 50] {
        let (rt0, st0) = (proxy.round_trips(), proxy.statements());
        let h = rt
            .start("steps", n, WorkflowOptions::default())
            .await
            .unwrap();
        assert_eq!(
            common::within(h.result::<u32>()).await.unwrap(),
            n * (n - 1) / 2
        );
        measured.push((proxy.round_trips() - rt0, proxy.statements() - st0));
    }
    let per_step_rt = (measured[1].0 - measured[0].0) as f64 / 40.0;
    let per_step_st = (measured[1].1 - measured[0].1) as f64 / 40.0;
    assert_eq!(per_step_rt, 1.0, "round trips per step ({measured:?})");
    assert_eq!(per_step_st, 1.0, "statements per step ({measured:?})");
    // Start and finish are one round trip each, the last step's record rides with the finish,
    // and the in-process result needs none.
    assert_eq!(
        measured[0].0,
        9 + 2,
        "a 10-step workflow end to end ({measured:?})"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Steps that take 20 ms each, so those of workflows started together end together.
async fn slow_steps(ctx: Context, n: u32) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 0..n {
        sum += ctx
            .step("slow", || async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(i)
            })
            .await?;
    }
    Ok(sum)
}

/// Group commit: steps of many workflows that finish together share one statement and one
/// commit. Each row's `xmin` is the transaction that wrote it, so the rows per transaction
/// are the checkpoints per flush, as the database itself saw them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_finishing_together_share_a_commit() {
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .workflow("steps", slow_steps)
        .launch()
        .await
        .unwrap();
    let starts = (0..200).map(|_| rt.start("steps", 5, WorkflowOptions::default()));
    let handles = futures::future::try_join_all(starts).await.unwrap();
    for h in &handles {
        assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 10);
    }
    let stats = rt.stats();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let (rows, commits, widest): (i64, i64, i64) = sqlx::query_as(
        "SELECT sum(n)::int8, count(*), max(n) FROM \
         (SELECT count(*) AS n FROM dbos.operation_outputs GROUP BY xmin::text) per_commit",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 200 * 5);
    assert!(
        commits * 4 <= rows && widest >= 20,
        "{rows} checkpoints in {commits} commits, at most {widest} in one"
    );
    assert!(
        stats.db_batched_requests >= 2 * stats.db_flushes,
        "{} requests in {} flushes",
        stats.db_batched_requests,
        stats.db_flushes
    );
}

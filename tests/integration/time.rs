//! Durable time: a sleep survives a killed process (the recovered workflow sleeps only what is
//! left), and `now`, `random` and `uuid` replay the first run's values.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stead::{Context, WorkflowOptions};

use crate::common;

const CHILD_DB: &str = "STEAD_TEST_SLEEP_CHILD_DB";

/// Sleeps 2 s, then reports when it woke (epoch ms).
async fn sleeper(ctx: Context, _: ()) -> stead::Result<i64> {
    ctx.sleep(Duration::from_secs(2)).await?;
    ctx.step("woke", || async { Ok(now_ms()) }).await
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Entry point of the process that is killed mid-sleep.
#[tokio::test]
#[ignore = "run by a_sleep_interrupted_by_a_kill_resumes_with_what_is_left"]
async fn sleep_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = common::TestDb::existing(&url);
    let rt = common::builder(&db)
        .workflow("sleeper", sleeper)
        .launch()
        .await
        .unwrap();
    rt.start("sleeper", (), WorkflowOptions::with_id("nap"))
        .await
        .unwrap();
    std::future::pending::<()>().await;
}

both_backends! {
async fn a_sleep_interrupted_by_a_kill_resumes_with_what_is_left(db) {
    // The schema first, so the checks can open the database before the child does.
    stead::migrate(&db.url, "dbos").await.unwrap();
    let pool = db.checks().await;
    let mut child = common::child_test("time::sleep_child")
        .env(CHILD_DB, &db.url)
        .spawn()
        .unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'nap' AND function_name = 'DBOS.sleep'",
        1,
    )
    .await;
    let slept_at: i64 = common::scalar(
        &pool,
        "SELECT CAST(started_at_epoch_ms AS TEXT) FROM dbos.operation_outputs \
         WHERE workflow_uuid = 'nap'",
    )
    .await
    .unwrap()
    .parse()
    .unwrap();
    // Kill it about a second into the sleep.
    let kill_at = slept_at + 1000;
    tokio::time::sleep(Duration::from_millis((kill_at - now_ms()).max(0) as u64)).await;
    child.kill().unwrap();
    child.wait().unwrap();

    let relaunched = now_ms();
    let rt = common::builder(&db)
        .workflow("sleeper", sleeper)
        .launch()
        .await
        .unwrap();
    let woke: i64 = common::within(rt.client().handle("nap").result()).await.unwrap();
    let after_relaunch = woke - relaunched;
    assert!(
        (500..1800).contains(&after_relaunch),
        "woke {after_relaunch} ms after the relaunch: the second of sleep left, not two"
    );
    assert!(
        woke >= slept_at + 2000,
        "the whole 2 s passed since the sleep began"
    );
    let wake_row = common::scalar(
        &pool,
        "SELECT output FROM dbos.operation_outputs WHERE workflow_uuid = 'nap' AND function_name = 'DBOS.sleep'",
    )
    .await
    .unwrap();
    let wake_secs: f64 = wake_row.parse().unwrap();
    assert!(
        (wake_secs * 1000.0 - (slept_at + 2000) as f64).abs() < 5.0,
        "DBOS's format: the wake-up time in epoch seconds ({wake_row})"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn now_random_and_uuid_replay_the_first_runs_values(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    async fn values(ctx: Context, _: ()) -> stead::Result<(i64, u64, String)> {
        let now = ctx.now().await?;
        let random = ctx.random().await?;
        let uuid = ctx.uuid().await?;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            // Let the clock move, then crash: the replay must not see new values.
            tokio::time::sleep(Duration::from_millis(20)).await;
            panic!("crash after recording the values");
        }
        Ok((now, random, uuid))
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("values", values)
        .launch()
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start("values", (), WorkflowOptions::with_id("v"))
        .await
        .unwrap();
    let (now, random, uuid): (i64, u64, String) = common::within(h.result()).await.unwrap();
    // Generous on purpose: only that now/random/uuid calls do not wait (3 steps), under any load.
    assert!(began.elapsed() < Duration::from_secs(10));
    let recorded = common::scalar(
        &db.checks().await,
        "SELECT string_agg(function_name || '=' || output, ',' ORDER BY function_id) \
         FROM dbos.operation_outputs WHERE workflow_uuid = 'v'",
    )
    .await;
    assert_eq!(
        recorded,
        Some(format!(
            "stead.now={now},stead.random={random},stead.uuid=\"{uuid}\""
        ))
    );
    assert_eq!(
        h.status().await.unwrap().recovery_attempts,
        2,
        "it did crash once"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

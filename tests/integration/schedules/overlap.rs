//! Overlap policies and jitter: a firing that finds an earlier run of its schedule unfinished
//! is skipped, buffered (one at most) or cancels it; jitter delays a run within its bounds,
//! deterministically; backfills honour the policy. Firings are made by backfills of a paused
//! schedule, so every slot is chosen by the test.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::AnyPool;
use stead::queues::Queue;
use stead::schedules::{Overlap, Schedule, ScheduledTime};
use stead::Runtime;

use super::{count, pool_of, prepare};
use crate::common;

/// Holds until the test inserts a row into `released` (at most 60 s), then returns.
async fn hold(ctx: stead::Context, at: ScheduledTime) -> stead::Result<String> {
    let url = at.context["db"].as_str().unwrap_or_default().to_owned();
    ctx.step_typed("hold", || {
        let url = url.clone();
        async move {
            let pool = pool_of(&url).await;
            for _ in 0..600 {
                let n: i64 = sqlx::query_scalar("SELECT count(*) FROM released")
                    .fetch_one(&pool)
                    .await?;
                if n > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok::<_, sqlx::Error>(())
        }
    })
    .await?;
    Ok(at.scheduled.to_rfc3339())
}

async fn runtime(db: &common::TestDb) -> (Runtime, AnyPool) {
    let rt = common::builder(db)
        .workflow("hold", hold)
        .queue(Queue::new("one").concurrency(1))
        .launch()
        .await
        .unwrap();
    let pool = prepare(&db.url).await;
    sqlx::query("CREATE TABLE IF NOT EXISTS released (n bigint)")
        .execute(&pool)
        .await
        .unwrap();
    (rt, pool)
}

/// A paused minutely schedule of `hold` on the one-at-a-time queue, under `overlap`.
async fn create(rt: &Runtime, db: &common::TestDb, name: &str, overlap: Overlap) {
    let s = Schedule::new(name, "hold", "0 * * * * *")
        .queue("one")
        .overlap(overlap)
        .context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    rt.client().pause_schedule(name).await.unwrap();
}

fn minute(n: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, 15, 10, 0, 0).unwrap() + chrono::Duration::minutes(n)
}

/// Backfills minutes `[from, to)`; returns how many runs it enqueued.
async fn backfill(rt: &Runtime, name: &str, from: i64, to: i64) -> u64 {
    rt.client()
        .backfill_schedule(name, minute(from), minute(to))
        .await
        .unwrap()
        .enqueued
}

fn id(name: &str, n: i64) -> String {
    format!(
        "sched-{name}-{}",
        minute(n).format("%Y-%m-%dT%H:%M:%S+00:00")
    )
}

async fn status(pool: &AnyPool, id: &str) -> String {
    sqlx::query_scalar("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn wait_status(pool: &AnyPool, id: &str, want: &str) {
    common::wait_count(
        pool,
        &format!(
            "SELECT count(*) FROM dbos.workflow_status \
             WHERE workflow_uuid = '{id}' AND status = '{want}'"
        ),
        1,
    )
    .await;
}

async fn release(pool: &AnyPool) {
    sqlx::query("INSERT INTO released VALUES (1)")
        .execute(pool)
        .await
        .unwrap();
}

both_backends! {
async fn skip_enqueues_nothing_while_a_run_is_unfinished(db) {
    let (rt, pool) = runtime(&db).await;
    create(&rt, &db, "skip", Overlap::Skip).await;
    // A backfill under Skip is a firing too: only its earliest slot is enqueued.
    assert_eq!(backfill(&rt, "skip", 0, 3).await, 1);
    wait_status(&pool, &id("skip", 0), "PENDING").await;
    assert_eq!(backfill(&rt, "skip", 3, 4).await, 0, "the previous run still holds");
    assert_eq!(
        count(&pool, "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'skip'").await,
        1
    );
    release(&pool).await;
    wait_status(&pool, &id("skip", 0), "SUCCESS").await;
    assert_eq!(backfill(&rt, "skip", 3, 4).await, 1, "finished: the next firing runs");
    wait_status(&pool, &id("skip", 3), "SUCCESS").await;
    // The policy is stored, so every executor (and the listing) sees it.
    let listed = rt.client().schedules().await.unwrap();
    assert_eq!(listed[0].schedule.overlap, Overlap::Skip);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn buffer_one_keeps_at_most_one_firing_waiting(db) {
    let (rt, pool) = runtime(&db).await;
    create(&rt, &db, "buffer", Overlap::BufferOne).await;
    assert_eq!(backfill(&rt, "buffer", 0, 1).await, 1);
    wait_status(&pool, &id("buffer", 0), "PENDING").await;
    assert_eq!(backfill(&rt, "buffer", 1, 2).await, 1, "one may wait");
    assert_eq!(status(&pool, &id("buffer", 1)).await, "ENQUEUED");
    assert_eq!(backfill(&rt, "buffer", 2, 4).await, 0, "a second may not");
    release(&pool).await;
    wait_status(&pool, &id("buffer", 0), "SUCCESS").await;
    wait_status(&pool, &id("buffer", 1), "SUCCESS").await;
    assert_eq!(
        count(&pool, "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'buffer'")
            .await,
        2
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn cancel_other_cancels_the_unfinished_run(db) {
    let (rt, pool) = runtime(&db).await;
    create(&rt, &db, "cancel", Overlap::CancelOther).await;
    assert_eq!(backfill(&rt, "cancel", 0, 1).await, 1);
    wait_status(&pool, &id("cancel", 0), "PENDING").await;
    assert_eq!(backfill(&rt, "cancel", 1, 2).await, 1);
    wait_status(&pool, &id("cancel", 0), "CANCELLED").await;
    release(&pool).await;
    wait_status(&pool, &id("cancel", 1), "SUCCESS").await;
    assert_eq!(status(&pool, &id("cancel", 0)).await, "CANCELLED");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn jitter_delays_a_firing_within_its_bounds_deterministically(db) {
    let (rt, pool) = runtime(&db).await;
    let jitter = Duration::from_secs(600);
    let s = Schedule::new("jittery", "hold", "0 * * * * *")
        .jitter(jitter)
        .context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    rt.client().pause_schedule("jittery").await.unwrap();
    // Future slots: their runs wait, DELAYED, until nominal time + jitter.
    let start = chrono::DateTime::from_timestamp(Utc::now().timestamp() / 60 * 60 + 7200, 0)
        .unwrap();
    let end = start + chrono::Duration::minutes(3);
    let first = rt.client().backfill_schedule("jittery", start, end).await.unwrap();
    assert_eq!(first.enqueued, 3);
    let mut delays = Vec::new();
    for (n, wf) in first.workflow_ids.iter().enumerate() {
        assert_eq!(status(&pool, wf).await, "DELAYED");
        let due: i64 = sqlx::query_scalar(
            "SELECT delay_until_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid = $1",
        )
        .bind(wf)
        .fetch_one(&pool)
        .await
        .unwrap();
        let nominal = (start + chrono::Duration::minutes(n as i64)).timestamp_millis();
        let delay = due - nominal;
        assert!((0..600_000).contains(&delay), "{wf}: {delay} ms");
        delays.push(due);
        // The run's input keeps the nominal time.
        let inputs: String = sqlx::query_scalar(
            "SELECT inputs FROM dbos.workflow_input WHERE workflow_uuid = $1",
        )
        .bind(wf)
        .fetch_one(&pool)
        .await
        .unwrap();
        let at = chrono::DateTime::from_timestamp_millis(nominal).unwrap();
        assert!(
            inputs.contains(&at.format("%Y-%m-%dT%H:%M:%S.000Z").to_string()),
            "{inputs}"
        );
    }
    // Firing the same slots again (another executor) changes nothing.
    let again = rt.client().backfill_schedule("jittery", start, end).await.unwrap();
    assert_eq!(again.enqueued, 0);
    for (wf, due) in first.workflow_ids.iter().zip(&delays) {
        let now: i64 = sqlx::query_scalar(
            "SELECT delay_until_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid = $1",
        )
        .bind(wf)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(now, *due);
    }
    // The same slot gets the same delay after its schedule is defined anew (any executor).
    rt.client().delete_schedule("jittery").await.unwrap();
    let s = Schedule::new("jittery", "hold", "0 * * * * *")
        .jitter(jitter)
        .context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    rt.client().pause_schedule("jittery").await.unwrap();
    sqlx::query("DELETE FROM dbos.workflow_status WHERE schedule_name = 'jittery'")
        .execute(&pool)
        .await
        .unwrap();
    rt.client().backfill_schedule("jittery", start, end).await.unwrap();
    for (wf, due) in first.workflow_ids.iter().zip(&delays) {
        let now: i64 = sqlx::query_scalar(
            "SELECT delay_until_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid = $1",
        )
        .bind(wf)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(now, *due, "the same firing, the same delay");
    }
    assert_eq!(rt.client().schedules().await.unwrap()[0].schedule.jitter, jitter);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// The scheduler's own firings: each second fires, but only one run exists while it holds.
async fn the_scheduler_skips_firings_while_its_run_holds(db) {
    let (rt, pool) = runtime(&db).await;
    let s = Schedule::new("live-skip", "hold", "*/1 * * * * *")
        .overlap(Overlap::Skip)
        .context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    let runs = "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'live-skip'";
    common::wait_count(&pool, runs, 1).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(count(&pool, runs).await, 1, "later seconds were skipped");
    release(&pool).await;
    common::wait_count(
        &pool,
        "SELECT CASE WHEN count(*) >= 2 THEN 1 ELSE 0 END FROM dbos.workflow_status \
         WHERE schedule_name = 'live-skip'",
        1,
    )
    .await;
    rt.client().delete_schedule("live-skip").await.unwrap();
    common::wait_count(
        &pool,
        "SELECT CASE WHEN count(*) = 0 THEN 1 ELSE 0 END FROM dbos.workflow_status \
         WHERE schedule_name = 'live-skip' AND status IN ('ENQUEUED', 'PENDING', 'DELAYED')",
        1,
    )
    .await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

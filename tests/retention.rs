//! Garbage collection: 100,000 finished workflows go in under 10 s with their steps, inputs,
//! outputs and events; unfinished ones (`PENDING`, `ENQUEUED`, `DELAYED`) stay however old;
//! the row cap keeps exactly the newest N finished; the periodic task collects by itself.

mod common;

use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, PgPool};
use stead::{Retention, Runtime};

const HOUR_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `n` finished workflows `f-1..f-n` (all four final statuses), `f-i` created `i` ms before
/// `newest`, each with a step, an input, an output and an event.
async fn finished(pool: &PgPool, n: i64, newest: i64) {
    let status = format!(
        "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, created_at, updated_at, \
           completed_at, serialization) \
         SELECT 'f-' || g, (ARRAY['SUCCESS', 'ERROR', 'CANCELLED', \
           'MAX_RECOVERY_ATTEMPTS_EXCEEDED'])[1 + g % 4], 'w', {newest} - g, {newest} - g, \
           {newest} - g, 'portable_json' FROM generate_series(1, {n}) g"
    );
    let rows = [
        "INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name, output) \
         SELECT 'f-' || g, 1, 's', '1' FROM generate_series(1, {n}) g",
        "INSERT INTO dbos.workflow_input (workflow_uuid, inputs) \
         SELECT 'f-' || g, '{{}}' FROM generate_series(1, {n}) g",
        "INSERT INTO dbos.workflow_output (workflow_uuid, output) \
         SELECT 'f-' || g, '1' FROM generate_series(1, {n}) g",
        "INSERT INTO dbos.workflow_events (workflow_uuid, key, value) \
         SELECT 'f-' || g, 'k', '1' FROM generate_series(1, {n}) g",
    ]
    .map(|sql| sql.replace("{n}", &n.to_string()).replace("{{}}", "{}"));
    // One transaction: a collector running meanwhile sees whole workflows or none.
    let script = format!("BEGIN; {status}; {}; COMMIT;", rows.join("; "));
    sqlx::raw_sql(AssertSqlSafe(script))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("seeding finished workflows: {e}"));
}

/// Old workflows that may still run, on a queue nobody serves, each with a step and an input.
async fn unfinished(pool: &PgPool) {
    let old = now_ms() - 48 * HOUR_MS;
    exec(
        pool,
        &format!(
            "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, \
               executor_id, created_at, updated_at, delay_until_epoch_ms) VALUES \
             ('live-pending', 'PENDING', 'w', 'nowhere', 'elsewhere', {old}, {old}, NULL), \
             ('live-enqueued', 'ENQUEUED', 'w', 'nowhere', NULL, {old}, {old}, NULL), \
             ('live-delayed', 'DELAYED', 'w', 'nowhere', NULL, {old}, {old}, {old})"
        ),
    )
    .await;
    exec(
        pool,
        "INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name) \
         SELECT id, 1, 's' FROM unnest(ARRAY['live-pending', 'live-enqueued', 'live-delayed']) id",
    )
    .await;
    exec(
        pool,
        "INSERT INTO dbos.workflow_input (workflow_uuid, inputs) \
         SELECT id, '{}' FROM unnest(ARRAY['live-pending', 'live-enqueued', 'live-delayed']) id",
    )
    .await;
}

async fn launch(db: &common::TestDb) -> Runtime {
    common::builder(db).launch().await.unwrap()
}

async fn assert_unfinished_untouched(pool: &PgPool) {
    let live = "('live-pending', 'live-enqueued', 'live-delayed')";
    for table in ["workflow_status", "operation_outputs", "workflow_input"] {
        let n = count(
            pool,
            &format!("SELECT count(*) FROM dbos.{table} WHERE workflow_uuid IN {live}"),
        )
        .await;
        assert_eq!(n, 3, "unfinished workflows' rows in {table}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_finished_workflows_are_collected_in_under_ten_seconds() {
    let db = common::TestDb::new().await;
    let rt = launch(&db).await;
    let pool = db.pool().await;
    finished(&pool, 100_000, now_ms() - 2 * HOUR_MS).await;
    unfinished(&pool).await;
    // A recent finished workflow: younger than the cut-off, kept.
    exec(
        &pool,
        &format!(
            "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, created_at) \
             VALUES ('recent', 'SUCCESS', 'w', {})",
            now_ms()
        ),
    )
    .await;
    let began = Instant::now();
    let deleted = rt
        .garbage_collect(&Retention::default().older_than(Duration::from_secs(3600)))
        .await
        .unwrap();
    let took = began.elapsed();
    assert_eq!(deleted, 100_000);
    assert!(took < Duration::from_secs(10), "took {took:?}");
    println!("collected 100,000 finished workflows in {took:?}");
    for table in [
        "workflow_status",
        "operation_outputs",
        "workflow_input",
        "workflow_output",
        "workflow_events",
    ] {
        let left = count(
            &pool,
            &format!("SELECT count(*) FROM dbos.{table} WHERE workflow_uuid LIKE 'f-%'"),
        )
        .await;
        assert_eq!(left, 0, "rows of collected workflows left in {table}");
    }
    assert_unfinished_untouched(&pool).await;
    let recent = count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'recent'",
    )
    .await;
    assert_eq!(recent, 1, "younger than the cut-off");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_cap_keeps_exactly_the_newest_finished_workflows() {
    let db = common::TestDb::new().await;
    let rt = launch(&db).await;
    let pool = db.pool().await;
    finished(&pool, 25_000, now_ms()).await;
    unfinished(&pool).await;
    let deleted = rt
        .garbage_collect(&Retention::default().max_rows(100))
        .await
        .unwrap();
    assert_eq!(deleted, 24_900);
    // f-1 is the newest (created 1 ms before the others' reference), f-100 the 100th newest.
    let kept: Vec<String> = sqlx::query_scalar(
        "SELECT workflow_uuid FROM dbos.workflow_status WHERE workflow_uuid LIKE 'f-%' \
         ORDER BY created_at DESC",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected: Vec<String> = (1..=100).map(|i| format!("f-{i}")).collect();
    assert_eq!(kept, expected);
    assert_unfinished_untouched(&pool).await;
    // Nothing more to do at the cap; without any bound nothing is deleted.
    let policy = Retention::default().max_rows(100);
    assert_eq!(rt.garbage_collect(&policy).await.unwrap(), 0);
    assert_eq!(rt.garbage_collect(&Retention::default()).await.unwrap(), 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_task_collects_by_itself() {
    let db = common::TestDb::new().await;
    let policy = Retention::default()
        .older_than(Duration::from_secs(3600))
        .every(Duration::from_millis(200));
    let rt = common::builder(&db)
        .retention(policy)
        .launch()
        .await
        .unwrap();
    let pool = db.pool().await;
    finished(&pool, 1000, now_ms() - 2 * HOUR_MS).await;
    unfinished(&pool).await;
    common::wait_count(
        &pool,
        "SELECT (count(*) = 0)::int4::int8 FROM dbos.workflow_status WHERE workflow_uuid LIKE 'f-%'",
        1,
        10,
    )
    .await;
    assert_unfinished_untouched(&pool).await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

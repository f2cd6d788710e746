//! Garbage collection: 100,000 finished workflows go in one call with their steps, inputs,
//! outputs and events; unfinished ones (`PENDING`, `ENQUEUED`, `DELAYED`) stay however old;
//! the row cap keeps exactly the newest N finished; the periodic task collects by itself.

use std::time::{Duration, Instant};

use sqlx::{AnyPool, AssertSqlSafe};
use stead::{client::Retention, Runtime};

use crate::common;
use crate::common::CheckPool;

const HOUR_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn exec(pool: &AnyPool, sql: &str) {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn count(pool: &AnyPool, sql: &str) -> i64 {
    pool.count(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `n` finished workflows `f-1..f-n` (all four final statuses), `f-i` created `i` ms before
/// `newest`, each with a step, an input, an output and an event.
async fn finished(pool: &AnyPool, n: i64, newest: i64) {
    // A recursive count, not generate_series: the same SQL on both backends.
    let series =
        format!("WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {n}) ");
    let status = format!(
        "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, created_at, updated_at, \
           completed_at, serialization) \
         SELECT 'f-' || g, CASE g % 4 WHEN 0 THEN 'SUCCESS' WHEN 1 THEN 'ERROR' \
           WHEN 2 THEN 'CANCELLED' ELSE 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' END, 'w', {newest} - g, \
           {newest} - g, {newest} - g, 'portable_json' FROM s"
    );
    let rows = [
        status.as_str(),
        "INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name, output) \
         SELECT 'f-' || g, 1, 's', '1' FROM s",
        "INSERT INTO dbos.workflow_input (workflow_uuid, inputs) SELECT 'f-' || g, '{}' FROM s",
        "INSERT INTO dbos.workflow_output (workflow_uuid, output) SELECT 'f-' || g, '1' FROM s",
        "INSERT INTO dbos.workflow_events (workflow_uuid, key, value) \
         SELECT 'f-' || g, 'k', '1' FROM s",
    ];
    // One transaction: a collector running meanwhile sees whole workflows or none.
    let mut tx = pool.begin().await.unwrap();
    for insert in rows {
        let sql = format!("{series}{insert}");
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    tx.commit().await.unwrap();
}

/// Old workflows that may still run, on a queue nobody serves, each with a step and an input.
async fn unfinished(pool: &AnyPool) {
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
        "INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name) VALUES \
         ('live-pending', 1, 's'), ('live-enqueued', 1, 's'), ('live-delayed', 1, 's')",
    )
    .await;
    exec(
        pool,
        "INSERT INTO dbos.workflow_input (workflow_uuid, inputs) VALUES \
         ('live-pending', '{}'), ('live-enqueued', '{}'), ('live-delayed', '{}')",
    )
    .await;
}

async fn launch(db: &common::TestDb) -> Runtime {
    common::builder(db).launch().await.unwrap()
}

async fn assert_unfinished_untouched(pool: &AnyPool) {
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

both_backends! {
async fn a_hundred_thousand_finished_workflows_are_collected_in_one_call(db) {
    let rt = launch(&db).await;
    let pool = db.checks().await;
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
        .client()
        .garbage_collect(&Retention::default().older_than(Duration::from_secs(3600)))
        .await
        .unwrap();
    let took = began.elapsed();
    assert_eq!(deleted, 100_000);
    // Seconds on a quiet machine (ARCHITECTURE.md); the bound only catches a per-row collector
    // (minutes), with room for a loaded CI machine.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    println!(
        "collected 100,000 finished workflows in {took:?} ({})",
        if db.is_sqlite() { "SQLite" } else { "Postgres" }
    );
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

async fn the_row_cap_keeps_exactly_the_newest_finished_workflows(db) {
    let rt = launch(&db).await;
    let pool = db.checks().await;
    finished(&pool, 25_000, now_ms()).await;
    unfinished(&pool).await;
    let deleted = rt
        .client()
        .garbage_collect(&Retention::default().max_rows(100))
        .await
        .unwrap();
    assert_eq!(deleted, 24_900);
    // f-1 is the newest (created 1 ms before the others' reference), f-100 the 100th newest.
    let kept = common::scalar(
        &pool,
        "SELECT string_agg(workflow_uuid, ',' ORDER BY created_at DESC) \
         FROM dbos.workflow_status WHERE workflow_uuid LIKE 'f-%'",
    )
    .await;
    let expected: Vec<String> = (1..=100).map(|i| format!("f-{i}")).collect();
    assert_eq!(kept, Some(expected.join(",")));
    assert_unfinished_untouched(&pool).await;
    // Nothing more to do at the cap; without any bound nothing is deleted.
    let policy = Retention::default().max_rows(100);
    assert_eq!(rt.client().garbage_collect(&policy).await.unwrap(), 0);
    assert_eq!(rt.client().garbage_collect(&Retention::default()).await.unwrap(), 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn the_periodic_task_collects_by_itself(db) {
    let policy = Retention::default()
        .older_than(Duration::from_secs(3600))
        .every(Duration::from_millis(200));
    let rt = common::builder(&db)
        .retention(policy)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    finished(&pool, 1000, now_ms() - 2 * HOUR_MS).await;
    unfinished(&pool).await;
    common::wait_count(
        &pool,
        "SELECT CAST(CASE WHEN count(*) = 0 THEN 1 ELSE 0 END AS BIGINT) FROM dbos.workflow_status \
         WHERE workflow_uuid LIKE 'f-%'",
        1,
    )
    .await;
    assert_unfinished_untouched(&pool).await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! Continue-as-new: a chain of runs followed to its last result by a handle on its first id
//! (started directly, enqueued, or as a child), listed with its links; a crash right before or
//! right after a continuation's commit neither loses nor duplicates the next run; a daily tick
//! runs 10,000 iterations (and 300 virtual days of daily sleeps) with each run's history bounded.

use std::time::Duration;

use stead::client::ListWorkflows;
use stead::workflow::WorkflowConfig;
use stead::{Context, HistoryLimits, Queue, WorkflowOptions};

use crate::common::{self, CheckPool};

/// Set in a child process: the database URL it runs against, and where it stops.
const CHILD_DB: &str = "STEAD_TEST_CAN_CHILD_DB";
const CHILD_MODE: &str = "STEAD_TEST_CAN_CHILD_MODE";

async fn count(pool: &impl CheckPool, sql: &str) -> i64 {
    pool.count(sql).await.unwrap()
}

/// One step, then continues as `n + 1` until `n` is 2: three runs, the last answering 20.
async fn relay(ctx: Context, n: u32) -> stead::Result<u32> {
    ctx.step("work", || async move { Ok(n) }).await?;
    if n < 2 {
        if std::env::var(CHILD_MODE).as_deref() == Ok("before") {
            // The child parks before its first continuation and is killed there.
            std::future::pending::<()>().await;
        }
        return ctx.continue_as_new(n + 1).await;
    }
    Ok(n * 10)
}

async fn parent(ctx: Context, _: ()) -> stead::Result<u32> {
    ctx.run_child("relay", 0u32, WorkflowOptions::default())
        .await
}

fn relays(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .queue(Queue::new("relays"))
        .workflow("relay", relay)
        .workflow("parent", parent)
}

/// The chain of `first`: every run SUCCESS with one recorded call, linked in order.
async fn assert_chain(pool: &impl CheckPool, first: &str) {
    let runs =
        format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE '{first}%'");
    assert_eq!(count(pool, &runs).await, 3, "exactly three runs of {first}");
    for (i, id) in [
        first.to_owned(),
        format!("{first}-can-1"),
        format!("{first}-can-2"),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            common::status_of(pool, id).await.as_deref(),
            Some("SUCCESS"),
            "{id}"
        );
        let calls =
            format!("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{id}'");
        assert_eq!(
            count(pool, &calls).await,
            1,
            "{id} ran its step once, in its own history"
        );
        let linked = format!(
            "SELECT count(*) FROM dbos.stead_continuations \
             WHERE root_id = '{first}' AND to_id = '{id}' AND generation = {i}"
        );
        assert_eq!(
            count(pool, &linked).await,
            i64::from(i > 0),
            "the link to {id}"
        );
    }
    let marker = format!("SELECT output FROM dbos.workflow_status WHERE workflow_uuid = '{first}'");
    assert_eq!(
        common::scalar(pool, &marker).await.as_deref(),
        Some(format!(r#"{{"stead.continuedAs":"{first}-can-1"}}"#).as_str()),
        "a DBOS reader sees an ordinary output naming the next run"
    );
}

both_backends! {
/// Started directly, enqueued, or as a child: a handle on the first id (or the parent's call)
/// gets the last run's result, and the listing shows the chain.
async fn a_chain_of_three_is_followed_to_the_last_result(db) {
    let rt = relays(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let h = rt.start("relay", 0u32, WorkflowOptions::with_id("direct")).await.unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 20);
    assert_eq!(h.latest_id().await.unwrap(), "direct-can-2");
    assert_chain(&pool, "direct").await;
    // Another process's handle (a client) follows the chain in the database.
    let client = common::client(&db, "stead").await;
    assert_eq!(common::within(client.handle("direct").result::<u32>()).await.unwrap(), 20);
    let listed = client
        .list_workflows(ListWorkflows::new().ids(["direct", "direct-can-1", "direct-can-2"]))
        .await
        .unwrap();
    let links: Vec<_> = listed
        .iter()
        .map(|w| (w.status.id.as_str(), w.status.continued_from.as_deref(), w.status.continued_as.as_deref()))
        .collect();
    assert_eq!(
        links,
        [
            ("direct", None, Some("direct-can-1")),
            ("direct-can-1", Some("direct"), Some("direct-can-2")),
            ("direct-can-2", Some("direct-can-1"), None),
        ]
    );
    let json = serde_json::to_value(&listed[1]).unwrap();
    assert_eq!(json["continued_from"], "direct", "{json}");

    let h = rt
        .enqueue("relays", "relay", 0u32, WorkflowOptions::with_id("queued"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 20);
    assert_chain(&pool, "queued").await;
    let on_queue = "SELECT count(*) FROM dbos.workflow_status \
        WHERE workflow_uuid LIKE 'queued%' AND queue_name = 'relays'";
    assert_eq!(count(&pool, on_queue).await, 3, "each run went to the same queue");

    let h = rt.start("parent", (), WorkflowOptions::with_id("p")).await.unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 20, "a child's chain");
    assert_chain(&pool, "p-1").await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Entry point of the child process; does nothing when run as an ordinary test.
#[tokio::test]
#[ignore = "run by a_crash_before_or_after_the_commit_neither_loses_nor_duplicates_a_run"]
async fn chain_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = common::TestDb::existing(&url);
    let rt = relays(&db).launch().await.unwrap();
    if std::env::var(CHILD_MODE).as_deref() == Ok("after") {
        rt.inject_fault(stead::Fault::HoldAfterContinue);
    }
    rt.start("relay", 0u32, WorkflowOptions::with_id("crash"))
        .await
        .unwrap();
    std::future::pending::<()>().await;
}

both_backends! {
/// A process killed right before its first continuation's commit (the run replays and
/// continues once), or right after it, before the next run was handed on (recovery runs the
/// next run, never the old one): either way, three runs, each run once, and the result.
async fn a_crash_before_or_after_the_commit_neither_loses_nor_duplicates_a_run(db) {
    stead::migrate(&db.url, "dbos").await.unwrap();
    let pool = db.checks().await;
    for (mode, wait_for) in [
        ("before", "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'crash'"),
        ("after", "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'crash-can-1'"),
    ] {
        let mut child = common::child_test("continue_as_new::chain_child")
            .env(CHILD_DB, &db.url)
            .env(CHILD_MODE, mode)
            .spawn()
            .unwrap();
        common::wait_count(&pool, wait_for, 1).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let first = common::status_of(&pool, "crash").await;
        let next = common::status_of(&pool, "crash-can-1").await;
        match mode {
            "before" => assert_eq!((first.as_deref(), next), (Some("PENDING"), None)),
            _ => assert_eq!(
                (first.as_deref(), next.as_deref()),
                (Some("SUCCESS"), Some("PENDING")),
                "committed, not handed on"
            ),
        }
        let rt = relays(&db).launch().await.unwrap();
        let h = rt.client().handle("crash");
        assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 20, "{mode}");
        rt.shutdown(Duration::from_secs(5)).await.unwrap();
        assert_chain(&pool, "crash").await;
        // Replayed once after the kill before the commit; never again after it.
        let want = if mode == "before" { 2 } else { 1 };
        let attempts = format!(
            "SELECT count(*) FROM dbos.workflow_status \
             WHERE workflow_uuid = 'crash' AND recovery_attempts = {want}"
        );
        assert_eq!(count(&pool, &attempts).await, 1, "{mode}");
        let sql = "DELETE FROM dbos.workflow_status WHERE workflow_uuid LIKE 'crash%'";
        sqlx::query(sql).execute(&pool).await.unwrap();
        assert_eq!(count(&pool, "SELECT count(*) FROM dbos.stead_continuations").await, 0, "links go with their runs");
    }
}
}

const DAY: Duration = Duration::from_secs(86_400);
const DAYS_PER_RUN: u32 = 100;

/// Where a tick loop stands: its next day, the total so far, its last day, and whether each
/// day waits a (virtual) day first.
#[derive(serde::Serialize, serde::Deserialize)]
struct Tick {
    day: u32,
    total: u64,
    until: u32,
    sleep: bool,
}

/// A daily tick forever (here until day `until`): waits a day (when asked), records the day,
/// and every hundred days continues as new with its running total.
async fn daily(ctx: Context, mut t: Tick) -> stead::Result<u64> {
    loop {
        if t.sleep {
            ctx.sleep(DAY).await?;
        }
        let day = t.day;
        let today: u32 = ctx.step("tick", || async move { Ok(day) }).await?;
        t.total += u64::from(today);
        t.day += 1;
        if t.day == t.until {
            return Ok(t.total);
        }
        if t.day.is_multiple_of(DAYS_PER_RUN) {
            return ctx.continue_as_new(t).await;
        }
    }
}

both_backends! {
/// 10,000 ticks in 100 runs, then 300 virtual days of daily sleeps in 3 more: the totals are
/// every day's, each run's history is its hundred days only (its own limit of 250 calls would
/// refuse more), and a handle on the first id reaches the last run.
async fn a_daily_tick_runs_ten_thousand_days_with_a_bounded_history(db) {
    let clock = stead::testing::VirtualClock::install().unwrap();
    clock.auto_skip(true);
    clock.settle(Duration::from_millis(1));
    let bounded = WorkflowConfig::default().history_limits(HistoryLimits::default().calls(250));
    let rt = common::builder(&db)
        .evict_after(None)
        .workflow_with("daily", bounded, daily)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    for (id, until, sleep) in [("tick", 10_000u32, false), ("sleepy", 300, true)] {
        let (began, real) = (clock.now(), std::time::Instant::now());
        let t = Tick { day: 0, total: 0, until, sleep };
        let h = rt.start("daily", t, WorkflowOptions::with_id(id)).await.unwrap();
        let total = tokio::time::timeout(Duration::from_secs(600), h.result::<u64>())
            .await
            .expect("within ten minutes")
            .unwrap();
        eprintln!("{id}: {until} ticks in {:?} of real time ({:?})", real.elapsed(), db.backend);
        assert_eq!(total, (0..u64::from(until)).sum::<u64>(), "{id}");
        let runs = format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE '{id}%'");
        assert_eq!(count(&pool, &runs).await, i64::from(until / DAYS_PER_RUN), "{id}");
        let per_run = if sleep { 2 * DAYS_PER_RUN } else { DAYS_PER_RUN };
        let longest = format!(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM dbos.operation_outputs \
             WHERE workflow_uuid LIKE '{id}%' GROUP BY workflow_uuid) per_run"
        );
        assert_eq!(count(&pool, &longest).await, i64::from(per_run), "{id}: bounded");
        let last = format!("{id}-can-{}", until / DAYS_PER_RUN - 1);
        assert_eq!(h.latest_id().await.unwrap(), last);
        if sleep {
            assert!(clock.now() - began >= i64::from(until - 1) * 86_400_000, "virtual days");
        }
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

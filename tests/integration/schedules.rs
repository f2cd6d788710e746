//! Scheduled workflows: a per-second schedule fires each second exactly once with two
//! executors firing it; backfills are idempotent; pause, resume and trigger-now; zones and
//! seconds are honoured, with DBOS's ids and input format.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, TimeZone, Timelike, Utc};
use sqlx::AnyPool;
use stead::{
    schedules::Schedule, schedules::ScheduleStatus, schedules::ScheduledTime, Error, Runtime,
};

use crate::common;

mod overlap;

const CHILD_DB: &str = "STEAD_TEST_SCHED_DB";

/// A pool per database URL (the schedule's context names it), shared by runs in this process.
/// The database must exist (on SQLite: a runtime has created the file).
async fn pool_of(url: &str) -> AnyPool {
    static POOLS: OnceLock<Mutex<HashMap<String, AnyPool>>> = OnceLock::new();
    if let Some(pool) = POOLS.get_or_init(Default::default).lock().unwrap().get(url) {
        return pool.clone();
    }
    let pool = common::TestDb::existing(url).checks().await;
    POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(url.to_owned(), pool.clone());
    pool
}

/// Records its firing under a primary key: a second run of one firing would fail.
async fn tick(ctx: stead::Context, at: ScheduledTime) -> stead::Result<String> {
    let url = at.context["db"].as_str().unwrap_or_default().to_owned();
    let id = ctx.workflow_id().to_owned();
    let scheduled = at.scheduled;
    ctx.step_typed("record", || {
        let (url, id) = (url.clone(), id.clone());
        async move {
            sqlx::query("INSERT INTO firings (scheduled, id) VALUES ($1, $2)")
                .bind(stamp(&scheduled))
                .bind(&id)
                .execute(&pool_of(&url).await)
                .await
                .map(|_| ())
        }
    })
    .await?;
    Ok(scheduled.to_rfc3339())
}

/// Times as the firings table keeps them (sortable text).
fn stamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

async fn prepare(url: &str) -> AnyPool {
    let pool = pool_of(url).await;
    for ddl in [
        "CREATE TABLE IF NOT EXISTS firings (scheduled text PRIMARY KEY, id text NOT NULL)",
        "CREATE TABLE IF NOT EXISTS ready (executor text PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS fired (executor text PRIMARY KEY, n bigint NOT NULL)",
    ] {
        sqlx::query(ddl).execute(&pool).await.unwrap();
    }
    pool
}

fn every_second(url: &str) -> Schedule {
    Schedule::new("every-second", "tick", "*/1 * * * * *").context(serde_json::json!({"db": url}))
}

/// The second executor of the fleet test; does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the fleet test as its second executor"]
async fn schedule_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let pool = prepare(&url).await;
    let rt = Runtime::builder()
        .database_url(&url)
        .app_version("test-1")
        .executor_id("child")
        .workflow("tick", tick)
        .schedule(every_second(&url))
        .schedule_refresh(Duration::from_millis(200))
        .launch()
        .await
        .unwrap();
    sqlx::query("INSERT INTO ready VALUES ('child')")
        .execute(&pool)
        .await
        .unwrap();
    loop {
        sqlx::query(
            "INSERT INTO fired VALUES ('child', $1) ON CONFLICT (executor) DO UPDATE SET n = $1",
        )
        .bind(rt.stats().schedule_firings as i64)
        .execute(&pool)
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn count(pool: &AnyPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Deletes the per-second schedule and waits until every run it enqueued has ended.
async fn stop_every_second(rt: &Runtime, pool: &AnyPool) {
    rt.client().delete_schedule("every-second").await.unwrap();
    common::wait_count(
        pool,
        "SELECT CASE WHEN count(*) = 0 THEN 1 ELSE 0 END FROM dbos.workflow_status \
         WHERE schedule_name = 'every-second' AND status IN ('ENQUEUED', 'PENDING')",
        1,
    )
    .await;
}

async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// Postgres only: two executor processes share the schedule (an embedded database serves one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_fires_each_second_exactly_once_with_two_executors() {
    let db = common::TestDb::new().await;
    prepare(&db.url).await;
    let rt = common::builder(&db)
        .executor_id("parent")
        .workflow("tick", tick)
        .schedule(every_second(&db.url))
        .launch()
        .await
        .unwrap();
    let pool = prepare(&db.url).await;
    let child = common::child_test("schedules::schedule_child")
        .env(CHILD_DB, &db.url)
        .spawn()
        .unwrap();
    let _child = Killed(child);
    common::wait_count(&pool, "SELECT count(*) FROM ready", 1).await;
    // A window of five whole seconds, both executors firing throughout.
    let t0 = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(2);
    let t5 = t0 + chrono::Duration::seconds(5);
    sleep_until(t5 + chrono::Duration::milliseconds(300)).await;
    rt.client().delete_schedule("every-second").await.unwrap();
    // The child follows the deletion within its refresh (200 ms).
    tokio::time::sleep(Duration::from_millis(800)).await;
    common::wait_count(
        &pool,
        "SELECT (count(*) = 0)::int4::int8 FROM dbos.workflow_status \
         WHERE schedule_name = 'every-second' AND status IN ('ENQUEUED', 'PENDING')",
        1,
    )
    .await;
    let in_window: Vec<String> = sqlx::query_scalar(
        "SELECT scheduled FROM firings WHERE scheduled >= $1 AND scheduled < $2 ORDER BY 1",
    )
    .bind(stamp(&t0))
    .bind(stamp(&t5))
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected: Vec<String> = (0..5)
        .map(|i| stamp(&(t0 + chrono::Duration::seconds(i))))
        .collect();
    assert_eq!(in_window, expected, "one firing per second of the window");
    let runs = count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'every-second'",
    )
    .await;
    let failed = count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'every-second' AND status <> 'SUCCESS'",
    )
    .await;
    assert_eq!(
        failed, 0,
        "no firing ran twice (its insert would have failed)"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM firings").await, runs);
    // Every run was created by exactly one of the two schedulers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let child_fired = count(&pool, "SELECT n FROM fired WHERE executor = 'child'").await;
    let parent_fired = rt.stats().schedule_firings as i64;
    assert_eq!(
        parent_fired + child_fired,
        runs,
        "parent {parent_fired}, child {child_fired}"
    );
    let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM firings WHERE scheduled = $1")
        .bind(stamp(&t0))
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        ids,
        vec![format!(
            "sched-every-second-{}",
            t0.format("%Y-%m-%dT%H:%M:%S+00:00")
        )]
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

both_backends! {
/// One executor: each second of a window fires exactly once, each run with its own time.
async fn a_schedule_fires_each_second_exactly_once(db) {
    let (rt, pool) = runtime(&db).await;
    rt.client().create_schedule(every_second(&db.url)).await.unwrap();
    let t0 = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(2);
    let t3 = t0 + chrono::Duration::seconds(3);
    sleep_until(t3 + chrono::Duration::milliseconds(300)).await;
    stop_every_second(&rt, &pool).await;
    let in_window: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT scheduled FROM firings WHERE scheduled >= '{}' AND scheduled < '{}' ORDER BY 1",
        stamp(&t0),
        stamp(&t3)
    )))
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected: Vec<String> = (0..3)
        .map(|i| stamp(&(t0 + chrono::Duration::seconds(i))))
        .collect();
    assert_eq!(in_window, expected, "one firing per second of the window");
    let runs = runs_of(&pool, "every-second").await;
    let failed = count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status \
         WHERE schedule_name = 'every-second' AND status <> 'SUCCESS'",
    )
    .await;
    assert_eq!(failed, 0, "no firing ran twice (its insert would have failed)");
    assert_eq!(count(&pool, "SELECT count(*) FROM firings").await, runs);
    assert_eq!(rt.stats().schedule_firings as i64, runs);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

async fn runtime(db: &common::TestDb) -> (Runtime, AnyPool) {
    let rt = common::builder(db)
        .workflow("tick", tick)
        .launch()
        .await
        .unwrap();
    (rt, prepare(&db.url).await)
}

both_backends! {
async fn a_backfill_enqueues_each_firing_of_its_range_once(db) {
    let (rt, pool) = runtime(&db).await;
    let minutely =
        Schedule::new("minutely", "tick", "0 * * * * *").context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(minutely).await.unwrap();
    rt.client().pause_schedule("minutely").await.unwrap();
    let start = Utc.with_ymd_and_hms(2025, 6, 15, 10, 0, 0).unwrap();
    let end = start + chrono::Duration::minutes(10);
    let first = rt.client().backfill_schedule("minutely", start, end).await.unwrap();
    assert_eq!(first.enqueued, 10);
    assert_eq!(first.workflow_ids.len(), 10);
    assert_eq!(
        first.workflow_ids[0],
        "sched-minutely-2025-06-15T10:00:00+00:00"
    );
    for id in &first.workflow_ids {
        common::within(rt.client().handle(id.clone()).result::<String>())
            .await
            .unwrap();
    }
    let again = rt.client().backfill_schedule("minutely", start, end).await.unwrap();
    assert_eq!(
        again.enqueued, 0,
        "a second backfill of the range enqueues nothing"
    );
    assert_eq!(again.workflow_ids, first.workflow_ids);
    let overlap = rt
        .client()
        .backfill_schedule(
            "minutely",
            start + chrono::Duration::minutes(5),
            end + chrono::Duration::minutes(5),
        )
        .await
        .unwrap();
    assert_eq!(overlap.enqueued, 5, "only the five new minutes");
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT scheduled FROM firings WHERE scheduled < $1 ORDER BY 1")
            .bind(stamp(&end))
            .fetch_all(&pool)
            .await
            .unwrap();
    let expected: Vec<String> = (0..10)
        .map(|i| stamp(&(start + chrono::Duration::minutes(i))))
        .collect();
    assert_eq!(
        recorded, expected,
        "each run received its own scheduled time"
    );
    let err = rt.client().backfill_schedule("nope", start, end).await.unwrap_err();
    assert!(matches!(err, Error::UnknownSchedule(_)), "{err}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// With automatic backfill, a launch enqueues the firings a downtime missed: every second from
/// the first firing to the last has its run, once.
async fn a_launch_backfills_what_the_downtime_missed(db) {
    let (rt, pool) = runtime(&db).await;
    let schedule = every_second(&db.url).automatic_backfill(true);
    rt.client().create_schedule(schedule).await.unwrap();
    common::wait_count(&pool, "SELECT CASE WHEN count(*) >= 2 THEN 1 ELSE 0 END FROM firings", 1)
        .await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let down = Utc::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rt, pool) = runtime(&db).await;
    let up = Utc::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop_every_second(&rt, &pool).await;
    let fired: Vec<String> = sqlx::query_scalar("SELECT scheduled FROM firings ORDER BY 1")
        .fetch_all(&pool)
        .await
        .unwrap();
    let times: Vec<DateTime<Utc>> = fired
        .iter()
        .map(|t| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc))
        .collect();
    for pair in times.windows(2) {
        assert_eq!(
            (pair[1] - pair[0]).num_seconds(),
            1,
            "a second without its firing: {fired:?}"
        );
    }
    let missed = times.iter().filter(|t| **t > down && **t < up).count();
    assert!(missed >= 2, "the downtime's firings ran ({missed}): {fired:?}");
    assert_eq!(
        runs_of(&pool, "every-second").await,
        fired.len() as i64,
        "one run per firing"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

async fn runs_of(pool: &AnyPool, schedule: &str) -> i64 {
    count(
        pool,
        &format!("SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = '{schedule}'"),
    )
    .await
}

both_backends! {
async fn pausing_stops_firings_and_resuming_restarts_them(db) {
    let (rt, pool) = runtime(&db).await;
    let s =
        Schedule::new("pulse", "tick", "* * * * * *").context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'pulse'",
        2,
    )
    .await;
    rt.client().pause_schedule("pulse").await.unwrap();
    let listed = rt.client().schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, ScheduleStatus::Paused);
    assert!(listed[0].last_fired_at.is_some());
    // A firing already in flight may still land.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let paused_at = runs_of(&pool, "pulse").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        runs_of(&pool, "pulse").await,
        paused_at,
        "no firing while paused"
    );
    rt.client().resume_schedule("pulse").await.unwrap();
    let resumed = "SELECT count(*) FROM dbos.workflow_status WHERE schedule_name = 'pulse'";
    common::wait_count(&pool, resumed, paused_at + 2).await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn trigger_now_fires_once_outside_the_timetable(db) {
    let (rt, pool) = runtime(&db).await;
    // New Year only: nothing fires by itself during the test.
    let s =
        Schedule::new("yearly", "tick", "0 0 0 1 1 *").context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    let before = Utc::now();
    let handle = rt.client().trigger_schedule("yearly").await.unwrap();
    assert!(
        handle.id().starts_with("sched-yearly-trigger-"),
        "{}",
        handle.id()
    );
    let scheduled: String = common::within(handle.result()).await.unwrap();
    let scheduled = DateTime::parse_from_rfc3339(&scheduled).unwrap();
    assert!(scheduled >= before.trunc_subsecs(3) && scheduled <= Utc::now());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs_of(&pool, "yearly").await, 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM firings").await, 1);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn zones_and_seconds_are_honoured_with_dbos_ids_and_inputs(db) {
    let (rt, pool) = runtime(&db).await;
    // Kolkata is UTC+05:30 all year: the offset shows the zone is applied.
    let s = Schedule::new("even", "tick", "*/2 * * * * *")
        .timezone("Asia/Kolkata")
        .context(serde_json::json!({"db": db.url}));
    rt.client().create_schedule(s).await.unwrap();
    common::wait_count(&pool, "SELECT count(*) FROM firings", 2).await;
    rt.client().delete_schedule("even").await.unwrap();
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT scheduled, id FROM firings ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    for (at, id) in &rows {
        let at = DateTime::parse_from_rfc3339(at)
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(at.second() % 2, 0, "fires on even seconds only: {at}");
        assert_eq!(at.nanosecond(), 0);
        let local = at.with_timezone(&chrono_tz::Asia::Kolkata);
        assert_eq!(
            id,
            &format!("sched-even-{}", local.format("%Y-%m-%dT%H:%M:%S+05:30"))
        );
    }
    let id = &rows[0].1;
    let inputs = common::scalar(
        &pool,
        &format!("SELECT inputs FROM dbos.workflow_input WHERE workflow_uuid = '{id}'"),
    )
    .await
    .unwrap();
    let envelope: serde_json::Value = serde_json::from_str(&inputs).unwrap();
    let time = envelope["positionalArgs"][0].as_str().unwrap().to_owned();
    assert_eq!(time, rows[0].0, "RFC 3339, UTC, milliseconds, Z");
    assert_eq!(
        envelope["positionalArgs"][1]["db"],
        serde_json::json!(db.url)
    );
    let queue = common::scalar(
        &pool,
        &format!("SELECT queue_name FROM dbos.workflow_status WHERE workflow_uuid = '{id}'"),
    )
    .await;
    assert_eq!(queue.as_deref(), Some("_dbos_internal_queue"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn schedules_are_validated_and_managed_by_name(db) {
    let (rt, _pool) = runtime(&db).await;
    let ok = Schedule::new("s", "tick", "0 0 1 1 *");
    rt.client().create_schedule(ok.clone()).await.unwrap();
    let dup = rt.client().create_schedule(ok).await.unwrap_err();
    assert!(matches!(dup, Error::ScheduleExists(_)), "{dup}");
    let bad_cron = rt
        .client()
        .create_schedule(Schedule::new("b", "tick", "every day"))
        .await
        .unwrap_err();
    assert!(matches!(bad_cron, Error::InvalidArgument(_)), "{bad_cron}");
    let bad_zone = rt
        .client()
        .create_schedule(Schedule::new("z", "tick", "* * * * *").timezone("Moon/Base"))
        .await
        .unwrap_err();
    assert!(matches!(bad_zone, Error::InvalidArgument(_)), "{bad_zone}");
    let unknown = rt
        .client()
        .create_schedule(Schedule::new("u", "missing", "* * * * *"))
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::UnknownWorkflow(_)), "{unknown}");
    let no_queue = rt
        .client()
        .create_schedule(Schedule::new("q", "tick", "* * * * *").queue("nowhere"))
        .await
        .unwrap_err();
    assert!(matches!(no_queue, Error::UnknownQueue(_)), "{no_queue}");
    let listed = rt.client().schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].schedule.cron, "0 0 1 1 *");
    assert_eq!(listed[0].status, ScheduleStatus::Active);
    rt.client().delete_schedule("s").await.unwrap();
    let gone = rt.client().delete_schedule("s").await.unwrap_err();
    assert!(matches!(gone, Error::UnknownSchedule(_)), "{gone}");
    assert!(matches!(
        rt.client().pause_schedule("s").await.unwrap_err(),
        Error::UnknownSchedule(_)
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// DBOS's own client backfills a stead schedule: same ids, so a mixed fleet fires each instant
/// once (DBOS reads the context with its serializer, here the portable one).
async fn dbos_and_stead_give_a_firing_the_same_id(db) {
    require_dbos!();
    let (rt, pool) = runtime(&db).await;
    let s = Schedule::new("minutely", "tick", "0 * * * * *").timezone("Europe/Paris");
    rt.client().create_schedule(s).await.unwrap();
    rt.client().pause_schedule("minutely").await.unwrap();
    // DBOS enqueues a firing for its owner's latest application version: the runtime
    // registered its own at launch.
    let registered =
        common::scalar(&pool, "SELECT version_name FROM dbos.application_versions").await;
    assert_eq!(registered.as_deref(), Some("test-1"));
    let python = common::dbos_py::dbos_cli().with_file_name("python");
    let script = format!(
        "from datetime import datetime, timezone\n\
         from dbos import DBOSClient\n\
         from dbos._serialization import DBOSPortableJSON\n\
         c = DBOSClient(system_database_url={url:?}, serializer=DBOSPortableJSON)\n\
         hs = c.backfill_schedule('minutely', datetime(2025, 6, 15, 10, 0, 30, tzinfo=timezone.utc), \
           datetime(2025, 6, 15, 10, 3, 0, tzinfo=timezone.utc))\n\
         print('\\n'.join(h.workflow_id for h in hs))\n\
         c.destroy()\n",
        // SQLAlchemy names an absolute SQLite path with four slashes.
        url = common::dbos_py::sqlalchemy_url(&db.url).replacen("sqlite://", "sqlite:///", 1)
    );
    let out = Command::new(python).arg("-c").arg(script).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dbos_ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        dbos_ids,
        vec![
            "sched-minutely-2025-06-15T12:01:00+02:00",
            "sched-minutely-2025-06-15T12:02:00+02:00"
        ]
    );
    let start = Utc.with_ymd_and_hms(2025, 6, 15, 10, 0, 30).unwrap();
    let end = Utc.with_ymd_and_hms(2025, 6, 15, 10, 3, 0).unwrap();
    let ours = rt.client().backfill_schedule("minutely", start, end).await.unwrap();
    assert_eq!(ours.workflow_ids, dbos_ids);
    assert_eq!(
        ours.enqueued, 0,
        "DBOS's firings are recognised as the same firings"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

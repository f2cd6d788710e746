//! Debouncing: a burst of calls with one key runs the workflow once, with the last input, a
//! period after the last call; `max_wait` bounds the wait while calls keep coming; calls from
//! two runtimes on one database collapse too; a key held by a plain enqueue is a conflict.

use std::time::{Duration, Instant};

use stead::{
    client::DebounceOptions, queues::Dedup, Client, Context, Error, Runtime, WorkflowOptions,
};

use crate::common;

/// Returns its input; the run's row says when it started.
async fn latest(_: Context, input: u32) -> stead::Result<u32> {
    Ok(input)
}

async fn launch(db: &common::TestDb, executor: &str) -> Runtime {
    common::builder(db)
        .executor_id(executor)
        .workflow("latest", latest)
        .launch()
        .await
        .unwrap()
}

/// The runs of `latest`, oldest first, with when each started.
async fn runs(pool: &impl common::CheckPool) -> Vec<(String, Option<i64>)> {
    let listed = common::scalar(
        pool,
        "SELECT string_agg(workflow_uuid || '=' || COALESCE(CAST(started_at_epoch_ms AS TEXT), ''), \
             ',' ORDER BY created_at) FROM dbos.workflow_status WHERE name = 'latest'",
    )
    .await
    .unwrap_or_default();
    listed
        .split(',')
        .filter(|run| !run.is_empty())
        .map(|run| {
            let (id, started) = run.split_once('=').unwrap();
            (id.to_owned(), started.parse().ok())
        })
        .collect()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

both_backends! {
async fn ten_calls_within_the_period_run_once_with_the_last_input(db) {
    let rt = launch(&db, "one").await;
    let pool = db.checks().await;
    let period = Duration::from_millis(800);
    let mut ids = Vec::new();
    let mut last_call = 0;
    for i in 0..10u32 {
        last_call = now_ms();
        let h = rt
            .client()
            .debounce("k", period, "latest", i, DebounceOptions::default())
            .await
            .unwrap();
        ids.push(h.id().to_owned());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ids.iter().all(|id| id == &ids[0]), "one run: {ids:?}");
    let out: u32 = common::within(rt.client().handle(ids[0].clone()).result())
        .await
        .unwrap();
    assert_eq!(out, 9, "the last call's input");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let all = runs(&pool).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let started = all[0].1.unwrap();
    assert!(
        started >= last_call + 800 - 20,
        "started {} ms after the last call, before the period passed",
        started - last_call
    );
    // The key is free again once the run left DELAYED: the next call starts a new run.
    let next = rt
        .client()
        .debounce("k", period, "latest", 42u32, DebounceOptions::default())
        .await
        .unwrap();
    assert_ne!(next.id(), ids[0]);
    assert_eq!(common::within(next.result::<u32>()).await.unwrap(), 42);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn max_wait_bounds_the_delay_while_calls_keep_coming(db) {
    let rt = launch(&db, "one").await;
    let pool = db.checks().await;
    let options = DebounceOptions::default().max_wait(Duration::from_millis(1500));
    let period = Duration::from_millis(500);
    let began = Instant::now();
    let first_call = now_ms();
    let mut handles = Vec::new();
    let mut i = 0u32;
    // A call every 100 ms for 3.5 s: without the bound, nothing would run until they stop.
    while began.elapsed() < Duration::from_millis(3500) {
        handles.push(
            rt.client().debounce("burst", period, "latest", i, options.clone())
                .await
                .unwrap(),
        );
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last_call = now_ms();
    let first = handles[0].id().to_owned();
    let out: u32 = common::within(rt.client().handle(first.clone()).result())
        .await
        .unwrap();
    let all = runs(&pool).await;
    let started = all.iter().find(|(id, _)| *id == first).unwrap().1.unwrap();
    let waited = started - first_call;
    assert!(
        (1500 - 20..1500 + 1500).contains(&waited),
        "the first run started {waited} ms after the first call; max_wait is 1500 ms"
    );
    assert!(started < last_call, "it ran while the calls kept coming");
    assert!(out > 0, "it ran with a later call's input, not the first");
    // Later calls form later runs, each bounded the same way.
    for h in &handles {
        common::within(h.result::<u32>()).await.unwrap();
    }
    let count = runs(&pool).await.len();
    assert!((2..=4).contains(&count), "{count} runs for {i} calls");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn concurrent_calls_in_one_process_collapse_into_one_run(db) {
    let rt = launch(&db, "one").await;
    collapse(&db, rt.client(), rt.client()).await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_key_held_by_a_plain_enqueue_is_a_conflict(db) {
    let rt = launch(&db, "one").await;
    // Holds the deduplication id the debounce would use ("<workflow>-<key>") on the same queue.
    let holder = rt
        .enqueue(
            "_dbos_internal_queue",
            "latest",
            1u32,
            WorkflowOptions::default()
                .deduplication_id("latest-taken", Dedup::Reject)
                .delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let err = rt
        .client()
        .debounce(
            "taken",
            Duration::from_millis(100),
            "latest",
            2u32,
            DebounceOptions::default(),
        )
        .await
        .unwrap_err();
    match err {
        Error::Duplicate { holder: h, .. } => assert_eq!(h, holder.id()),
        other => panic!("expected a conflict, got {other}"),
    }
    let unknown = rt
        .client()
        .debounce(
            "x",
            Duration::ZERO,
            "missing",
            1u32,
            DebounceOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::UnknownWorkflow(_)), "{unknown}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_runtime_and_a_client_collapse_into_one_run(db) {
    let rt = launch(&db, "one").await;
    // A client debounces by name: it need not know the workflow.
    let client = Client::connect(&db.url).await.unwrap();
    collapse(&db, rt.client(), &client).await;
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Postgres only: two executors on one database (an embedded database serves one executor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_from_two_runtimes_collapse_into_one_run() {
    let db = common::TestDb::new().await;
    let a = launch(&db, "a").await;
    let b = launch(&db, "b").await;
    collapse(&db, a.client(), b.client()).await;
    a.shutdown(Duration::from_secs(5)).await.unwrap();
    b.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Ten pairs of concurrent calls on one key, alternating between `a` and `b`, make one run.
async fn collapse(db: &common::TestDb, a: &Client, b: &Client) {
    let period = Duration::from_millis(700);
    let mut ids = Vec::new();
    for i in 0..10u32 {
        let rt = if i % 2 == 0 { a } else { b };
        // Concurrent pairs: both race on the same key.
        let (x, y) = tokio::join!(
            rt.debounce(
                "shared",
                period,
                "latest",
                i * 2,
                DebounceOptions::default()
            ),
            rt.debounce(
                "shared",
                period,
                "latest",
                i * 2 + 1,
                DebounceOptions::default()
            ),
        );
        ids.push(x.unwrap().id().to_owned());
        ids.push(y.unwrap().id().to_owned());
    }
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    let out: u32 = common::within(a.handle(ids[0].clone()).result())
        .await
        .unwrap();
    assert!(out >= 18, "one of the last pair's inputs, got {out}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(runs(&db.checks().await).await.len(), 1);
}

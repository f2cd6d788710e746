//! Queues in one executor: worker concurrency, rate limits, priority, deduplication, delays,
//! partitions, wake-ups without polling, definitions changed at runtime, the listen filter and a
//! crashed queue actor.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::{AnyPool, AssertSqlSafe};
use stead::{queues::Dedup, Context, Error, Fault, Queue, Status, WorkflowOptions};

use crate::common;
use crate::common::jobs::{job, launch, max_overlap, open, runs, tagged};

async fn status_of(pool: &AnyPool, id: &str) -> String {
    common::scalar(
        pool,
        &format!("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = '{id}'"),
    )
    .await
    .unwrap_or_default()
}

both_backends! {
async fn worker_concurrency_caps_the_workflows_running_here(db) {
    let rt = launch(&db, vec![Queue::new("slow").worker_concurrency(3)]).await;
    let mut handles = Vec::new();
    for i in 0..10 {
        handles.push(
            rt.enqueue(
                "slow",
                "job",
                tagged(&db, &format!("wc-{i}"), "", 150),
                WorkflowOptions::default(),
            )
            .await
            .unwrap(),
        );
    }
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    let spans: Vec<_> = runs(&db, "wc-").into_iter().map(|(_, s, e)| (s, e)).collect();
    assert_eq!(spans.len(), 10);
    assert_eq!(
        max_overlap(&spans),
        3,
        "never more than 3 at once, and the cap is used"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// The start times of the workflows matching `filter`, in order.
async fn starts_of(pool: &AnyPool, filter: &str) -> Vec<i64> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT started_at_epoch_ms FROM dbos.workflow_status WHERE {filter} ORDER BY 1"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// No trailing second holds more than `limit` of `starts` (sorted, in ms).
fn assert_at_most_per_second(starts: &[i64], limit: usize) {
    for (i, s) in starts.iter().enumerate() {
        let in_window = starts[i..].iter().take_while(|t| **t < s + 1000).count();
        assert!(
            in_window <= limit,
            "{in_window} starts within a second of {s}: {starts:?}"
        );
    }
}

both_backends! {
async fn a_rate_limit_caps_starts_in_every_trailing_window(db) {
    let rt = launch(
        &db,
        vec![Queue::new("rated").rate_limit(5, Duration::from_secs(1))],
    )
    .await;
    let began = Instant::now();
    let mut handles = Vec::new();
    for i in 0..20 {
        handles.push(
            rt.enqueue(
                "rated",
                "job",
                tagged(&db, &format!("rl-{i}"), "", 0),
                WorkflowOptions::default(),
            )
            .await
            .unwrap(),
        );
    }
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    // A lower bound: load can only lengthen the run, so it holds on any machine.
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "20 starts at 5/s take over 3 s"
    );
    let pool = db.checks().await;
    let starts = starts_of(&pool, "queue_name = 'rated'").await;
    assert_eq!(starts.len(), 20);
    assert_at_most_per_second(&starts, 5);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn lower_priority_values_run_first_and_fifo_within_a_value(db) {
    let rt = launch(
        &db,
        vec![Queue::new("prio")
            .worker_concurrency(1)
            .priority_enabled(true)],
    )
    .await;
    let pool = db.checks().await;
    let blocker = rt
        .enqueue(
            "prio",
            "job",
            tagged(&db, "pr-blocker", "prio-gate", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    common::wait_count(&pool, &format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = '{}' AND status = 'PENDING'", blocker.id()), 1).await;
    let mut handles = Vec::new();
    for (tag, priority) in [("a", 5), ("b", 1), ("c", 5), ("d", 1), ("e", 3)] {
        let options = WorkflowOptions::default().priority(priority);
        handles.push(
            rt.enqueue("prio", "job", tagged(&db, &format!("pr-{tag}"), "", 0), options)
                .await
                .unwrap(),
        );
    }
    open(&db, "prio-gate");
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    let order: Vec<String> = runs(&db, "pr-").into_iter().map(|(tag, ..)| tag).collect();
    assert_eq!(
        order,
        vec!["pr-blocker", "pr-b", "pr-d", "pr-e", "pr-a", "pr-c"]
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// A row that appears below the claims' floor (here, from a writer whose clock runs 10 s behind)
/// is passed over by floored claims, polls included, until the queue's survey finds it: then it
/// runs (`sysdb::claim`, rule 6 and "Surveys").
async fn a_row_that_appears_below_the_floor_still_runs(db) {
    let rt = launch(&db, vec![Queue::new("fl").worker_concurrency(1)]).await;
    let pool = db.checks().await;
    let pending = |id: String| format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = '{id}' AND status = 'PENDING'");
    let enqueue = |tag: &str, gate: &str| {
        rt.enqueue("fl", "job", tagged(&db, tag, gate, 0), WorkflowOptions::with_id(tag))
    };
    let first = enqueue("fl-first", "fl-gate-1").await.unwrap();
    common::wait_count(&pool, &pending(first.id().to_owned()), 1).await;
    let mut handles = vec![enqueue("fl-second", "fl-gate-2").await.unwrap()];
    for tag in ["fl-a", "fl-b", "fl-late"] {
        handles.push(enqueue(tag, "").await.unwrap());
    }
    // The claim that takes the second sees the rest: its floor sits just below the second.
    open(&db, "fl-gate-1");
    common::wait_count(&pool, &pending("fl-second".into()), 1).await;
    sqlx::query(AssertSqlSafe(
        "UPDATE dbos.workflow_status SET created_at = created_at - 10000 \
         WHERE workflow_uuid = 'fl-late'",
    ))
    .execute(&pool)
    .await
    .unwrap();
    open(&db, "fl-gate-2");
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    assert_eq!(status_of(&pool, "fl-late").await, "SUCCESS");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn deduplication_rejects_or_returns_the_holder_until_it_finishes(db) {
    let rt = launch(&db, vec![Queue::new("dedup").worker_concurrency(1)]).await;
    let pool = db.checks().await;
    let holder = rt
        .enqueue(
            "dedup",
            "job",
            tagged(&db, "dd-1", "dedup-gate", 0),
            WorkflowOptions::default().deduplication_id("k", Dedup::Reject),
        )
        .await
        .unwrap();
    let rejected = rt
        .enqueue(
            "dedup",
            "job",
            tagged(&db, "dd-2", "", 0),
            WorkflowOptions::default().deduplication_id("k", Dedup::Reject),
        )
        .await
        .unwrap_err();
    match rejected {
        Error::Duplicate {
            queue,
            dedup_id,
            holder: h,
        } => {
            assert_eq!(
                (queue.as_str(), dedup_id.as_str(), h.as_str()),
                ("dedup", "k", holder.id())
            );
        }
        other => panic!("expected Duplicate, got {other}"),
    }
    let existing = rt
        .enqueue(
            "dedup",
            "job",
            tagged(&db, "dd-3", "", 0),
            WorkflowOptions::default().deduplication_id("k", Dedup::ReturnExisting),
        )
        .await
        .unwrap();
    assert_eq!(existing.id(), holder.id());
    open(&db, "dedup-gate");
    assert_eq!(
        common::within(existing.result::<String>()).await.unwrap(),
        "dd-1"
    );
    // Finished: the key is free again.
    let again = rt
        .enqueue(
            "dedup",
            "job",
            tagged(&db, "dd-4", "", 0),
            WorkflowOptions::default().deduplication_id("k", Dedup::Reject),
        )
        .await
        .unwrap();
    assert_ne!(again.id(), holder.id());
    assert_eq!(
        common::within(again.result::<String>()).await.unwrap(),
        "dd-4"
    );
    let rows = common::scalar(&pool, "SELECT CAST(count(*) AS TEXT) FROM dbos.workflow_status").await;
    assert_eq!(
        rows.as_deref(),
        Some("2"),
        "rejected and returned enqueues wrote nothing"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn a_delayed_workflow_waits_until_due(db) {
    let rt = launch(&db, vec![Queue::new("later")]).await;
    let pool = db.checks().await;
    let enqueued_at = stead_now_ms();
    let h = rt
        .enqueue(
            "later",
            "job",
            tagged(&db, "dl-1", "", 0),
            WorkflowOptions::default().delay(Duration::from_millis(700)),
        )
        .await
        .unwrap();
    assert_eq!(status_of(&pool, h.id()).await, "DELAYED");
    common::within(h.result::<String>()).await.unwrap();
    let started: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT started_at_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid = '{}'",
        h.id()
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        started >= enqueued_at + 700,
        "started {}ms after enqueue",
        started - enqueued_at
    );
    assert!(
        started < enqueued_at + 700 + 900,
        "woken when due, not much later"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

fn stead_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

both_backends! {
async fn a_partition_rate_limit_caps_each_key_and_leaves_the_others_alone(db) {
    let rt = launch(
        &db,
        vec![Queue::new("prl").partition_rate_limit(3, Duration::from_secs(1))],
    )
    .await;
    let began = Instant::now();
    let mut handles = Vec::new();
    // Partition a first (FIFO would start all of it first), then b.
    for (key, n) in [("a", 9), ("b", 3)] {
        for i in 0..n {
            let options = WorkflowOptions::default().partition_key(key);
            let input = tagged(&db, &format!("prl-{key}-{i}"), "", 0);
            handles.push(rt.enqueue("prl", "job", input, options).await.unwrap());
        }
    }
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    // A lower bound: load can only lengthen the run, so it holds on any machine.
    assert!(
        began.elapsed() >= Duration::from_secs(2),
        "9 starts of one key at 3/s take over 2 s"
    );
    let pool = db.checks().await;
    let a = starts_of(&pool, "queue_name = 'prl' AND queue_partition_key = 'a'").await;
    let b = starts_of(&pool, "queue_name = 'prl' AND queue_partition_key = 'b'").await;
    assert_eq!((a.len(), b.len()), (9, 3));
    assert_at_most_per_second(&a, 3);
    assert_at_most_per_second(&b, 3);
    // b's budget is its own: it does not queue behind a's throttled backlog.
    assert!(
        b[2] < a[0] + 1000,
        "partition b waited for partition a: a {a:?}, b {b:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn partition_concurrency_runs_one_per_key_and_keys_in_parallel(db) {
    let rt = launch(&db, vec![Queue::new("parts").partition_concurrency(1)]).await;
    let mut handles = Vec::new();
    for i in 0..3 {
        for key in ["a", "b"] {
            let options = WorkflowOptions::default().partition_key(key);
            handles.push(
                rt.enqueue(
                    "parts",
                    "job",
                    tagged(&db, &format!("pt-{key}-{i}"), "", 150),
                    options,
                )
                .await
                .unwrap(),
            );
        }
    }
    let missing_key = rt
        .enqueue(
            "parts",
            "job",
            tagged(&db, "pt-x", "", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(missing_key, Error::InvalidArgument(_)),
        "{missing_key}"
    );
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    let spans = |key: &str| -> Vec<(Instant, Instant)> {
        runs(&db, &format!("pt-{key}-"))
            .into_iter()
            .map(|(_, s, e)| (s, e))
            .collect()
    };
    assert_eq!(max_overlap(&spans("a")), 1, "one of partition a at a time");
    assert_eq!(max_overlap(&spans("b")), 1, "one of partition b at a time");
    let all: Vec<_> = spans("a").into_iter().chain(spans("b")).collect();
    assert_eq!(max_overlap(&all), 2, "partitions a and b ran in parallel");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn an_enqueue_and_a_freed_slot_start_work_without_waiting_for_a_poll(db) {
    let slow_poll = Queue::new("prompt")
        .worker_concurrency(1)
        .polling_interval(Duration::from_secs(30));
    let rt = launch(&db, vec![slow_poll]).await;
    let pool = db.checks().await;
    let began = Instant::now();
    let first = rt
        .enqueue(
            "prompt",
            "job",
            tagged(&db, "pp-1", "", 100),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    let second = rt
        .enqueue(
            "prompt",
            "job",
            tagged(&db, "pp-2", "", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    common::within(second.result::<String>()).await.unwrap();
    // Behaviour: the enqueue woke the queue; the 30 s poll is 15 times the bound, which a loaded
    // machine's two runs never approach.
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "took {:?} with a 30 s poll",
        began.elapsed()
    );
    let gap: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT b.started_at_epoch_ms - a.completed_at FROM dbos.workflow_status a, dbos.workflow_status b \
         WHERE a.workflow_uuid = '{}' AND b.workflow_uuid = '{}'",
        first.id(),
        second.id()
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        gap < 500,
        "the second started {gap} ms after the first freed its slot"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn queues_defined_changed_and_deleted_at_runtime(db) {
    let rt = launch(&db, vec![]).await;
    assert!(matches!(rt.queue_ref("fresh"), Err(Error::UnknownQueue(_))));
    rt.client().create_queue(Queue::new("fresh").worker_concurrency(2))
        .await
        .unwrap();
    let h = rt
        .enqueue(
            "fresh",
            "job",
            tagged(&db, "rt-1", "", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "rt-1");
    let dup = rt.client().create_queue(Queue::new("fresh")).await.unwrap_err();
    assert!(
        matches!(dup, Error::QueueExists(ref q) if q == "fresh"),
        "{dup}"
    );
    rt.client().set_queue(
        Queue::new("fresh")
            .worker_concurrency(5)
            .priority_enabled(true),
    )
    .await
    .unwrap();
    let defs = rt.client().queues().await.unwrap();
    assert_eq!(
        defs,
        vec![Queue::new("fresh")
            .worker_concurrency(5)
            .priority_enabled(true)]
    );
    // The new definition applies: priorities are accepted now.
    let p = rt
        .enqueue(
            "fresh",
            "job",
            tagged(&db, "rt-2", "", 0),
            WorkflowOptions::default().priority(2),
        )
        .await
        .unwrap();
    common::within(p.result::<String>()).await.unwrap();
    rt.client().delete_queue("fresh").await.unwrap();
    common::wait::until_async("the deleted queue's actor stopping", Duration::from_millis(10), || async {
        rt.queue_ref("fresh").is_err()
    })
    .await;
    assert!(matches!(
        rt.client().delete_queue("fresh").await,
        Err(Error::UnknownQueue(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn an_executor_serves_only_the_queues_it_listens_to(db) {
    let rt = common::builder(&db)
        .workflow("job", job)
        .queue(Queue::new("mine"))
        .queue(Queue::new("theirs"))
        .listen_queues(["mine"])
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    assert!(matches!(
        rt.queue_ref("theirs"),
        Err(Error::UnknownQueue(_))
    ));
    let theirs = rt
        .enqueue(
            "theirs",
            "job",
            tagged(&db, "lf-theirs", "", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    let mine = rt
        .enqueue(
            "mine",
            "job",
            tagged(&db, "lf-mine", "", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    common::within(mine.result::<String>()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_of(&pool, theirs.id()).await, "ENQUEUED");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn a_crashed_queue_actor_is_restarted_and_loses_none_of_its_workflows(db) {
    /// Workflows let go past their hold (both backends' tests share this process).
    static RELEASED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let released = || RELEASED.get_or_init(Default::default);
    async fn held(ctx: Context, _: ()) -> stead::Result<u32> {
        let id = ctx.workflow_id().to_owned();
        ctx.step("before", || async {
            common::count_body(&id, 1);
            Ok(())
        })
        .await?;
        while !RELEASED.get_or_init(Default::default).lock().unwrap().contains(&id) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ctx.step("after", || async { Ok(1) })
            .await
    }
    let rt = common::builder(&db)
        .workflow("held", held)
        .queue(Queue::new("crashy"))
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let mut handles = Vec::new();
    for _ in 0..5 {
        handles.push(
            rt.enqueue("crashy", "held", (), WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    common::wait_count(&pool, "SELECT count(*) FROM dbos.operation_outputs", 5).await;
    assert!(rt.inject_fault(Fault::PanicQueue("crashy".into())));
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE recovery_attempts = 2",
        5,
    )
    .await;
    released()
        .lock()
        .unwrap()
        .extend(handles.iter().map(|h| h.id().to_owned()));
    for h in &handles {
        assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 1);
        assert_eq!(h.status().await.unwrap().status, Status::Success);
    }
    let first_steps: u32 = handles.iter().map(|h| common::body_run(h.id(), 1)).sum();
    assert_eq!(first_steps, 5, "the first steps were replayed, not re-run");
    assert_eq!(rt.stats().actor_restarts, 1);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

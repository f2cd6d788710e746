//! Queues in one executor: worker concurrency, rate limits, priority, deduplication, delays,
//! partitions, wake-ups without polling, definitions changed at runtime, the listen filter, a
//! crashed queue actor, and enqueueing from another actor.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::{AnyPool, AssertSqlSafe};
use stead::{Context, Dedup, Error, Fault, Queue, Runtime, Status, WorkflowOptions};

static GATES: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
/// (tag, workflow id, started, ended) of every `job` run.
type Run = (String, String, Instant, Instant);
static LOG: OnceLock<Mutex<Vec<Run>>> = OnceLock::new();

/// Opens `gate` of `db`'s test (both backends' tests share this process, so names are
/// qualified by the backend).
fn open(db: &common::TestDb, gate: &str) {
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(format!("{:?}:{gate}", db.backend), true);
}

fn is_open(gate: &str) -> bool {
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(gate)
        .copied()
        .unwrap_or(false)
}

/// Input: (tag, gate or "", sleep ms). Waits for its gate, sleeps, logs (tag, id, start, end).
async fn job(ctx: Context, (tag, gate, ms): (String, String, u64)) -> stead::Result<String> {
    let started = Instant::now();
    while !gate.is_empty() && !is_open(&gate) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let id = ctx.workflow_id().to_owned();
    LOG.get_or_init(Default::default).lock().unwrap().push((
        tag.clone(),
        id,
        started,
        Instant::now(),
    ));
    // A tag qualified by its test's backend returns unqualified.
    let bare = tag
        .split_once(':')
        .map_or(tag.as_str(), |(_, t)| t)
        .to_owned();
    ctx.step("done", || {
        let bare = bare.clone();
        async move { Ok::<_, std::io::Error>(bare) }
    })
    .await
}

/// The runs of `db`'s test whose tag starts with `tag_prefix`, tags unqualified.
fn runs(db: &common::TestDb, tag_prefix: &str) -> Vec<(String, Instant, Instant)> {
    let qualified = format!("{:?}:{tag_prefix}", db.backend);
    LOG.get_or_init(Default::default)
        .lock()
        .unwrap()
        .iter()
        .filter(|(tag, ..)| tag.starts_with(&qualified))
        .map(|(tag, _, s, e)| (tag[qualified.len() - tag_prefix.len()..].to_owned(), *s, *e))
        .collect()
}

fn max_overlap(spans: &[(Instant, Instant)]) -> usize {
    spans
        .iter()
        .map(|(s, _)| spans.iter().filter(|(s2, e2)| s2 <= s && s < e2).count())
        .max()
        .unwrap_or(0)
}

async fn launch(db: &common::TestDb, queues: Vec<Queue>) -> Runtime {
    let mut builder = common::builder(db).workflow("job", job);
    for q in queues {
        builder = builder.queue(q);
    }
    builder.launch().await.unwrap()
}

fn input(tag: &str, gate: &str, ms: u64) -> (String, String, u64) {
    (tag.to_owned(), gate.to_owned(), ms)
}

/// `input` with the tag and gate qualified by `db`'s backend.
fn tagged(db: &common::TestDb, tag: &str, gate: &str, ms: u64) -> (String, String, u64) {
    let b = db.backend;
    let gate = if gate.is_empty() {
        String::new()
    } else {
        format!("{b:?}:{gate}")
    };
    (format!("{b:?}:{tag}"), gate, ms)
}

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
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "20 starts at 5/s take over 3 s"
    );
    let pool = db.checks().await;
    let starts: Vec<i64> = sqlx::query_scalar(
        "SELECT started_at_epoch_ms FROM dbos.workflow_status WHERE queue_name = 'rated' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(starts.len(), 20);
    for (i, s) in starts.iter().enumerate() {
        let in_window = starts[i..].iter().take_while(|t| **t < s + 1000).count();
        assert!(
            in_window <= 5,
            "{in_window} starts within a second of {s}: {starts:?}"
        );
    }
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
    common::wait_count(&pool, &format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = '{}' AND status = 'PENDING'", blocker.id()), 1, 10).await;
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
    rt.create_queue(Queue::new("fresh").worker_concurrency(2))
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
    let dup = rt.create_queue(Queue::new("fresh")).await.unwrap_err();
    assert!(
        matches!(dup, Error::QueueExists(ref q) if q == "fresh"),
        "{dup}"
    );
    rt.set_queue(
        Queue::new("fresh")
            .worker_concurrency(5)
            .priority_enabled(true),
    )
    .await
    .unwrap();
    let defs = rt.queues().await.unwrap();
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
    rt.delete_queue("fresh").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while rt.queue_ref("fresh").is_ok() {
        assert!(Instant::now() < deadline, "the deleted queue's actor stops");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(
        rt.delete_queue("fresh").await,
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
            Ok::<_, std::io::Error>(())
        })
        .await?;
        while !RELEASED.get_or_init(Default::default).lock().unwrap().contains(&id) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ctx.step("after", || async { Ok::<_, std::io::Error>(1) })
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
    common::wait_count(&pool, "SELECT count(*) FROM dbos.operation_outputs", 5, 10).await;
    assert!(rt.inject_fault(Fault::PanicQueue("crashy".into())));
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE recovery_attempts = 2",
        5,
        10,
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

/// A user's actor that enqueues through the queue actor's ref and answers with the workflow id.
struct Producer;

enum ProducerMsg {
    Order(String, ractor::RpcReplyPort<String>),
}

impl ractor::Actor for Producer {
    type Msg = ProducerMsg;
    type State = ractor::DerivedActorRef<stead::QueueMessage>;
    type Arguments = ractor::DerivedActorRef<stead::QueueMessage>;

    async fn pre_start(
        &self,
        _: ractor::ActorRef<ProducerMsg>,
        queue: Self::Arguments,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(queue)
    }

    async fn handle(
        &self,
        _: ractor::ActorRef<ProducerMsg>,
        msg: ProducerMsg,
        queue: &mut Self::State,
    ) -> Result<(), ractor::ActorProcessingErr> {
        let ProducerMsg::Order(tag, reply) = msg;
        let request = stead::EnqueueRequest::new("job", &input(&tag, "", 0))?;
        let id = ractor::call!(queue, stead::QueueMessage::Enqueue, request)??;
        let _ = reply.send(id);
        Ok(())
    }
}

both_backends! {
async fn a_user_actor_enqueues_through_the_queue_actor_and_awaits_the_result(db) {
    let rt = launch(&db, vec![Queue::new("orders")]).await;
    let queue = rt.queue_ref("orders").unwrap();
    let (producer, _) = ractor::Actor::spawn(None, Producer, queue).await.unwrap();
    let id = ractor::call!(producer, ProducerMsg::Order, "ua-1".to_string()).unwrap();
    let result: String = common::within(rt.handle(&id).result()).await.unwrap();
    assert_eq!(result, "ua-1");
    let status = rt.handle(&id).status().await.unwrap();
    assert_eq!(status.queue_name.as_deref(), Some("orders"));
    producer.stop(None);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn enqueues_sent_as_messages_one_after_another_run_in_that_order(db) {
    let rt = launch(&db, vec![Queue::new("msgs").worker_concurrency(1)]).await;
    let pool = db.checks().await;
    let blocker = rt
        .enqueue("msgs", "job", tagged(&db, "mo-blocker", "mo-gate", 0), WorkflowOptions::default())
        .await
        .unwrap();
    common::wait_status(&pool, blocker.id(), "PENDING").await;
    // Sent without waiting in between: their writes go out together and complete in any order.
    let queue = rt.queue_ref("msgs").unwrap();
    let mut acks = Vec::new();
    for i in 0..40 {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let request =
            stead::EnqueueRequest::new("job", &tagged(&db, &format!("mo-{i:02}"), "", 0)).unwrap();
        queue
            .send_message(stead::QueueMessage::Enqueue(request, tx.into()))
            .unwrap();
        acks.push(rx);
    }
    let mut ids = Vec::new();
    for ack in acks {
        ids.push(common::within(ack).await.unwrap().unwrap());
    }
    open(&db, "mo-gate");
    for id in &ids {
        common::within(rt.handle(id).result::<String>()).await.unwrap();
    }
    let order: Vec<String> = runs(&db, "mo-").into_iter().map(|(tag, ..)| tag).collect();
    let mut sent = vec!["mo-blocker".to_string()];
    sent.extend((0..40).map(|i| format!("mo-{i:02}")));
    assert_eq!(order, sent, "the queue ran them in the order they were sent");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// A claim in flight keeps the slots it asked for: local enqueues meanwhile wait in the table
/// rather than take those slots, so the claim's rows and theirs never exceed the limit together.
/// (Postgres only: the claim is held up by a lock on a table it reads.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_enqueues_do_not_take_the_slots_of_a_claim_in_flight() {
    use common::CheckPool as _;
    let db = common::TestDb::new().await;
    let queue = Queue::new("held")
        .worker_concurrency(2)
        .polling_interval(Duration::from_millis(50));
    let rt = launch(&db, vec![queue]).await;
    let pool = db.pool().await;
    let pending = "SELECT count(*) FROM dbos.workflow_status WHERE queue_name = 'held' AND status = 'PENDING'";
    // One run first: the actor's first claims are over and its slots are offered again.
    let warm = rt
        .enqueue(
            "held",
            "job",
            tagged(&db, "cf-warm", "", 0),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    common::within(warm.result::<String>()).await.unwrap();
    // Every claim reads `application_versions` (rows without a version run on the latest one).
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE dbos.application_versions IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    // Two rows written as a DBOS client writes them: no announcement, found by a poll.
    for i in 0..2 {
        let inputs = serde_json::json!({
            "positionalArgs": [tagged(&db, &format!("cf-foreign-{i}"), "cf-gate", 0)],
            "namedArgs": {},
        });
        sqlx::query(
            "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, \
               created_at, updated_at, priority, serialization) \
             VALUES ($1, 'ENQUEUED', 'job', 'held', $2, $2, 0, 'portable_json')",
        )
        .bind(format!("cf-foreign-{i}"))
        .bind(i as i64)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO dbos.workflow_input (workflow_uuid, inputs) VALUES ($1, $2)")
            .bind(format!("cf-foreign-{i}"))
            .bind(inputs.to_string())
            .execute(&pool)
            .await
            .unwrap();
    }
    let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                   WHERE c.relname = 'application_versions' AND NOT l.granted";
    common::wait_count(&pool, waiting, 1, 10).await;
    // The poll's claim now waits, asking for both slots. Two local enqueues meanwhile:
    let mut handles = Vec::new();
    for i in 0..2 {
        let input = tagged(&db, &format!("cf-local-{i}"), "cf-gate", 0);
        handles.push(
            rt.enqueue("held", "job", input, WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    lock.rollback().await.unwrap();
    common::wait_count(&pool, pending, 2, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        pool.count(pending).await.unwrap(),
        2,
        "never more than the limit"
    );
    open(&db, "cf-gate");
    for h in &handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    for i in 0..2 {
        let h = rt.handle(format!("cf-foreign-{i}"));
        common::within(h.result::<String>()).await.unwrap();
    }
    let spans: Vec<_> = runs(&db, "cf-")
        .into_iter()
        .map(|(_, s, e)| (s, e))
        .collect();
    assert_eq!(spans.len(), 5);
    assert!(max_overlap(&spans) <= 2, "measured inside the workflows");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

both_backends! {
async fn an_enqueue_or_start_given_up_on_still_runs_and_frees_its_slot(db) {
    use futures::FutureExt as _;
    let rt = launch(&db, vec![Queue::new("solo").worker_concurrency(1)]).await;
    // One run first, so the actor offers its slot to local enqueues.
    let warm = rt
        .enqueue("solo", "job", tagged(&db, "gu-warm", "", 0), WorkflowOptions::default())
        .await
        .unwrap();
    common::within(warm.result::<String>()).await.unwrap();
    // Each call is polled once (it takes the slot and sends its write), then dropped.
    let input = tagged(&db, "gu-enqueued", "", 0);
    let call = rt.enqueue("solo", "job", input, WorkflowOptions::with_id("gu-enqueued"));
    assert!(call.now_or_never().is_none(), "the call was given up on");
    let input = tagged(&db, "gu-started", "", 0);
    let call = rt.start("job", input, WorkflowOptions::with_id("gu-started"));
    assert!(call.now_or_never().is_none(), "the call was given up on");
    let pool = db.checks().await;
    for id in ["gu-enqueued", "gu-started"] {
        common::wait_status(&pool, id, "SUCCESS").await;
    }
    // The slot came back: the queue's one slot runs the next enqueue.
    let next = rt
        .enqueue("solo", "job", tagged(&db, "gu-next", "", 0), WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(common::within(next.result::<String>()).await.unwrap(), "gu-next");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

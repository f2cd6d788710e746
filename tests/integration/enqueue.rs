//! Enqueueing from this process: a user actor's enqueue messages (answered once committed, run
//! in the order sent), local enqueues beside a claim in flight, and calls given up on.

use std::time::Duration;

use stead::{Queue, WorkflowOptions};

use crate::common;
use crate::common::jobs::{input, launch, max_overlap, open, runs, tagged};

/// A user's actor that enqueues through the queue actor's ref and answers with the workflow id.
struct Producer;

enum ProducerMsg {
    Order(String, ractor::RpcReplyPort<String>),
}

impl ractor::Actor for Producer {
    type Msg = ProducerMsg;
    type State = stead::queues::QueueRef;
    type Arguments = stead::queues::QueueRef;

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
        let request = stead::queues::EnqueueRequest::new("job", &input(&tag, "", 0))?;
        let id = queue.enqueue(request)?.await?;
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
    let result: String = common::within(rt.client().handle(&id).result()).await.unwrap();
    assert_eq!(result, "ua-1");
    let status = rt.client().handle(&id).status().await.unwrap();
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
        let request =
            stead::queues::EnqueueRequest::new("job", &tagged(&db, &format!("mo-{i:02}"), "", 0)).unwrap();
        acks.push(queue.enqueue(request).unwrap());
    }
    let mut ids = Vec::new();
    for ack in acks {
        ids.push(common::within(ack).await.unwrap());
    }
    open(&db, "mo-gate");
    for id in &ids {
        common::within(rt.client().handle(id).result::<String>()).await.unwrap();
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
    common::wait_count(&pool, waiting, 1).await;
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
    common::wait_count(&pool, pending, 2).await;
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
        let h = rt.client().handle(format!("cf-foreign-{i}"));
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
    // No polling: a claim in flight would make the enqueue wait for it (its first poll would
    // then return before it began, and a call dropped before it began never happened).
    let solo = Queue::new("solo")
        .worker_concurrency(1)
        .polling_interval(Duration::from_secs(3600));
    let rt = launch(&db, vec![solo]).await;
    // One run first, so the actor offers its slot to local enqueues.
    let warm = rt
        .enqueue("solo", "job", tagged(&db, "gu-warm", "", 0), WorkflowOptions::default())
        .await
        .unwrap();
    common::within(warm.result::<String>()).await.unwrap();
    // Each call is polled once (it takes the slot and sends its write), then dropped. A claim
    // still in flight (the one the warm run's freed slot set off) makes the enqueue's first poll
    // wait for it, and a call dropped before it began never happened: then try again, and the
    // dropped attempt must never appear. A call whose first poll already finished it (its task
    // ran on the other worker while this thread was preempted) was not given up on: try again.
    let pool = db.checks().await;
    let mut began = None;
    let mut never = Vec::new();
    let mut finished = Vec::new();
    for attempt in 0..20 {
        let id = format!("gu-enqueued-{attempt}");
        let input = tagged(&db, &id, "", 0);
        let call = rt.enqueue("solo", "job", input, WorkflowOptions::with_id(&id));
        if let Some(answer) = call.now_or_never() {
            answer.unwrap_or_else(|e| panic!("{id} was refused: {e}"));
            common::wait_status(&pool, &id, "SUCCESS").await;
            finished.push(id);
            continue;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        if common::status_of(&pool, &id).await.is_some() {
            began = Some(id);
            break;
        }
        never.push(id);
    }
    let began = began.unwrap_or_else(|| {
        panic!("none of the given-up enqueues began: {never:?} never did, {finished:?} finished")
    });
    let mut started = None;
    for attempt in 0..20 {
        let id = format!("gu-started-{attempt}");
        let call = rt.start("job", tagged(&db, &id, "", 0), WorkflowOptions::with_id(&id));
        match call.now_or_never() {
            None => {
                started = Some(id);
                break;
            }
            Some(answer) => drop(answer.unwrap_or_else(|e| panic!("{id} was refused: {e}"))),
        }
    }
    let started = started.expect("one of twenty starts was still under way after its first poll");
    for id in [began.as_str(), started.as_str()] {
        common::wait_status(&pool, id, "SUCCESS").await;
    }
    for id in &never {
        assert_eq!(common::status_of(&pool, id).await, None, "{id} began after all");
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

// An awaited producer that outpaced its queue for a moment went to the table behind its own
// rows; once the queue has room again its enqueues must take the fast path again, not follow
// one another to the table for good (a claim that overlaps a tabled write cannot vouch for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awaited_producer_that_fell_behind_finds_the_fast_path_again() {
    use common::CheckPool as _;
    let db = common::TestDb::new().await;
    let queue = Queue::new("refill")
        .worker_concurrency(4)
        .polling_interval(Duration::from_millis(10));
    let rt = launch(&db, vec![queue]).await;
    // Four runs hold every slot until their gate opens; ten enqueues meanwhile go to the table.
    let mut handles = Vec::new();
    for i in 0..14 {
        let input = tagged(&db, &format!("rf-held-{i}"), "rf-gate", 0);
        let options = WorkflowOptions::default();
        handles.push(rt.enqueue("refill", "job", input, options).await.unwrap());
    }
    open(&db, "rf-gate");
    for i in 0..300 {
        let input = tagged(&db, &format!("rf-{i}"), "", 2);
        let options = WorkflowOptions::default();
        handles.push(rt.enqueue("refill", "job", input, options).await.unwrap());
    }
    for h in handles {
        common::within(h.result::<String>()).await.unwrap();
    }
    // A row that took the fast path started when it was created; a claimed one later.
    let pool = db.pool().await;
    let fast = pool
        .count(
            "SELECT count(*) FILTER (WHERE started_at_epoch_ms = created_at) FROM ( \
               SELECT created_at, started_at_epoch_ms FROM dbos.workflow_status \
               WHERE queue_name = 'refill' ORDER BY created_at DESC LIMIT 200) last",
        )
        .await
        .unwrap();
    // Without waiting for the claim in flight: 0 of 200; with it, 170-195 alone and 89 beside
    // the whole suite on 2 cores, where runs slow down, the queue fills and its enqueues rightly
    // go to the table. The bug's mark is none at all.
    assert!(
        fast >= 40,
        "{fast} of the last 200 enqueues took the fast path"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

//! Reads and observation: a workflow's status row, events, the queue counts and the
//! completions per bucket, the ping, and hearing announcements.

use super::{enqueued, owner_of, store_tests, workflow, Fixture, Kind};
use crate::base::clock::now_ms;
use crate::base::status::Status;
use crate::sysdb::{FinishWrite, NewWorkflow, Op, OpStep, CANCEL_CHANNEL, QUEUE_CHANNEL};

store_tests!(
    status_reads_the_row_and_its_outcome,
    get_event_reads_the_latest_value,
    workflow_owner_reads_the_token,
    observation_counts_queues_and_completions,
    listen_hears_other_processes_announcements_on_postgres_only,
);

async fn status_reads_the_row_and_its_outcome(kind: Kind) {
    let f = Fixture::new(kind).await;
    assert!(f.store.status("nobody").await.unwrap().is_none());
    let w = NewWorkflow {
        priority: 3,
        dedup_id: Some("k".into()),
        timeout_ms: Some(5000),
        ..enqueued("q1", "q")
    };
    f.start(&w).await;
    let row = f.store.status("q1").await.unwrap().unwrap();
    let s = &row.status;
    assert_eq!((s.id.as_str(), s.name.as_str()), ("q1", "wf"));
    assert_eq!(s.status, Status::Enqueued);
    assert_eq!(s.queue_name.as_deref(), Some("q"));
    assert_eq!(s.priority, 3);
    assert_eq!(s.deduplication_id.as_deref(), Some("k"));
    assert_eq!(s.timeout_ms, Some(5000));
    assert_eq!(s.app_version.as_deref(), Some("v1"));
    assert_eq!(s.created_at_ms, w.created_at);
    assert_eq!(row.output, None);
    f.running("done").await;
    let finish = FinishWrite {
        workflow_id: "done".into(),
        owner: owner_of("done"),
        status: "ERROR",
        output: None,
        error: Some("\"boom\"".into()),
        step: None,
    };
    f.session().await.finish(&[&finish]).await.unwrap();
    let done = f.store.status("done").await.unwrap().unwrap();
    assert_eq!(done.status.status, Status::Error);
    assert_eq!(done.error.as_deref(), Some("\"boom\""));
    assert_eq!(done.serialization.as_deref(), Some("portable_json"));
    assert!(done.status.completed_at_ms.is_some());
}

async fn workflow_owner_reads_the_token(kind: Kind) {
    let f = Fixture::new(kind).await;
    assert_eq!(f.store.workflow_owner("nobody").await.unwrap(), None);
    f.start(&enqueued("q1", "q")).await;
    assert_eq!(f.store.workflow_owner("q1").await.unwrap(), None);
    f.running("a").await;
    assert_eq!(
        f.store.workflow_owner("a").await.unwrap(),
        Some(owner_of("a"))
    );
}

async fn get_event_reads_the_latest_value(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    assert_eq!(f.store.get_event("a", "k").await.unwrap(), None);
    let set = |fid, value: &str| Op::SetEvent {
        step: OpStep {
            workflow_id: "a".into(),
            owner: owner_of("a"),
            function_id: fid,
            started_at: now_ms(),
            app_name: None,
        },
        key: "k".into(),
        value: value.into(),
    };
    let (first, second) = (set(1, "1"), set(2, "2"));
    f.session().await.ops(&[&first, &second]).await.unwrap();
    let (value, serialization) = f.store.get_event("a", "k").await.unwrap().unwrap();
    assert_eq!(value, "2");
    assert_eq!(serialization.as_deref(), Some("portable_json"));
}

async fn observation_counts_queues_and_completions(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.store.ping().await.unwrap();
    // "c" is the oldest waiting row though the last by priority.
    let t = now_ms() - 60_000;
    for (id, priority, created_at) in [("a", 0, t + 1), ("b", 0, t + 2), ("c", 9, t)] {
        let w = NewWorkflow {
            priority,
            created_at,
            ..enqueued(id, "q")
        };
        f.start(&w).await;
    }
    f.start(&enqueued("x", "other")).await;
    f.claim(&super::claim_of(crate::base::queue::Queue::new("q"), 1))
        .await;
    let names = ["q".to_owned(), "idle".to_owned()];
    let counts = f.store.queue_counts(&names).await.unwrap();
    assert_eq!(counts.len(), 1);
    let q = &counts[0];
    assert_eq!(
        (q.queue.as_str(), q.enqueued, q.pending, q.oldest_enqueued),
        ("q", 2, 1, Some(t))
    );

    let since = now_ms() - 1000;
    let finish = |id: &str, status| FinishWrite {
        workflow_id: id.into(),
        owner: owner_of(id),
        status,
        output: None,
        error: None,
        step: None,
    };
    for id in ["ok1", "ok2", "bad"] {
        f.running(id).await;
    }
    let writes = [
        finish("ok1", "SUCCESS"),
        finish("ok2", "SUCCESS"),
        finish("bad", "ERROR"),
    ];
    let refs: Vec<&FinishWrite> = writes.iter().collect();
    f.session().await.finish(&refs).await.unwrap();
    let buckets = f.store.completed(since, 60_000, 2).await.unwrap();
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    assert_eq!(
        (buckets[0].index, buckets[0].succeeded, buckets[0].failed),
        (0, 2, 1)
    );
    assert!(f
        .store
        .completed(since - 120_000, 60_000, 1)
        .await
        .unwrap()
        .is_empty());
}

async fn listen_hears_other_processes_announcements_on_postgres_only(kind: Kind) {
    // Nothing listens behind a transaction pooler (`Store::can_listen`).
    if super::INLINE.with(|inline| inline.get()) {
        return;
    }
    let f = Fixture::new(kind).await;
    let listening = f.store.listen(&[QUEUE_CHANNEL, CANCEL_CHANNEL]).await;
    if f.store.is_embedded() {
        assert!(listening.is_err(), "an embedded database announces nothing");
        return;
    }
    let mut listener = listening.unwrap();
    // An enqueue by this store's own lane is not heard (its writer tells the actors itself);
    // one by another process is. On Citus the announcement comes from the node holding the
    // bucket, by Citus's connection, so the own one is heard too (one more wake-up).
    let mut own = f.session().await;
    own.start(&[&enqueued("a", "orders")]).await.unwrap();
    let other = f.reconnect().await;
    let mut theirs = other.open_session().await.unwrap();
    theirs.start(&[&enqueued("c", "invoices")]).await.unwrap();
    let mut heard = tokio::time::timeout(super::HEARD, listener.next())
        .await
        .expect("an announcement")
        .unwrap()
        .unwrap();
    if matches!(kind, Kind::Citus(_)) && heard.payload == "orders" {
        heard = tokio::time::timeout(super::HEARD, listener.next())
            .await
            .expect("an announcement")
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        (heard.channel.as_str(), heard.payload.as_str()),
        (QUEUE_CHANNEL, "invoices"),
        "the own lane's announcement came first and was skipped"
    );
    drop(own);
    f.start(&workflow("b")).await;
    f.store.cancel("b", false).await.unwrap();
    let heard = tokio::time::timeout(super::HEARD, listener.next())
        .await
        .expect("an announcement")
        .unwrap()
        .unwrap();
    assert_eq!(
        (heard.channel.as_str(), heard.payload.as_str()),
        (CANCEL_CHANNEL, r#"["b"]"#)
    );
}

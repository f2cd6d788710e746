//! Paused queues and workflows (`sysdb::pauses`): pausing and resuming, the listing, what a claim
//! on a paused queue does (takes nothing, while its rows still land and are counted), and what a
//! workflow's pause does (no claim takes it, its run is reported, its row goes back on its queue).

use std::time::Duration;

use super::{claim_of, enqueued, ids, owner_of, store_tests, Fixture, Kind};
use crate::base::queue::{Queue, INTERNAL_QUEUE};
use crate::sysdb::{
    BatchAction, BatchPage, HeldRun, ListQuery, PauseOutcome, PAUSED_RUN, PAUSE_CHANNEL,
    QUEUE_CHANNEL,
};

store_tests!(
    queues_pause_and_resume_once_and_are_listed,
    a_paused_queue_is_claimed_from_by_no_one_until_resumed,
    a_resume_is_announced_to_other_processes,
    a_paused_workflow_is_claimed_by_no_one_until_unpaused,
    only_an_unfinished_workflow_is_paused,
    a_paused_run_is_reported_and_requeued_under_its_owner_only,
    a_workflow_pause_is_announced_and_goes_with_its_workflow,
    a_batch_resume_lifts_a_pause,
);

async fn queues_pause_and_resume_once_and_are_listed(kind: Kind) {
    let f = Fixture::new(kind).await;
    assert!(f.store.paused_queues().await.unwrap().is_empty());
    assert!(f.store.pause_queue("orders", 1_000).await.unwrap());
    // A second pause finds it paused and keeps the first time.
    assert!(!f.store.pause_queue("orders", 2_000).await.unwrap());
    assert!(f.store.pause_queue("mail", 3_000).await.unwrap());
    assert_eq!(
        f.store.paused_queues().await.unwrap(),
        vec![("mail".to_owned(), 3_000), ("orders".to_owned(), 1_000)]
    );
    // Another connection (another process) sees the same state.
    let other = f.reconnect().await;
    assert_eq!(other.paused_queues().await.unwrap().len(), 2);
    assert!(other.resume_queue("orders").await.unwrap());
    assert!(!f.store.resume_queue("orders").await.unwrap());
    assert_eq!(
        f.store.paused_queues().await.unwrap(),
        vec![("mail".to_owned(), 3_000)]
    );
}

async fn a_paused_queue_is_claimed_from_by_no_one_until_resumed(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.store.pause_queue("q", 1).await.unwrap();
    f.store.pause_queue("parts", 1).await.unwrap();
    // Enqueues still land on a paused queue.
    f.start(&enqueued("a", "q")).await;
    f.start(&enqueued("b", "q")).await;
    f.start(&enqueued("other", "free")).await;
    let out = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert!(out.claimed.is_empty());
    assert_eq!(
        (out.allowed, out.seen),
        (0, 2),
        "it still counts what waits"
    );
    assert!(out.paused, "the claim reports the pause");
    assert_eq!(f.column("a", "status").await.as_deref(), Some("ENQUEUED"));
    // A claim under shared limits (the locked path on Postgres) and a partitioned one too.
    let limited = Queue::new("q")
        .concurrency(5)
        .rate_limit(9, Duration::from_secs(9));
    assert!(f.claim(&claim_of(limited, 10)).await.claimed.is_empty());
    let mut keyed = enqueued("p", "parts");
    keyed.partition_key = Some("k".to_owned());
    f.start(&keyed).await;
    let partitioned = Queue::new("parts").partitioned(true);
    assert!(f
        .claim(&claim_of(partitioned.clone(), 10))
        .await
        .claimed
        .is_empty());
    // Other queues are not paused.
    assert_eq!(
        ids(&f.claim(&claim_of(Queue::new("free"), 10)).await),
        ["other"]
    );
    // Resumed, the waiting work is claimed in order.
    f.store.resume_queue("q").await.unwrap();
    f.store.resume_queue("parts").await.unwrap();
    let out = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!((ids(&out), out.paused), (vec!["a", "b"], false));
    assert_eq!(ids(&f.claim(&claim_of(partitioned, 10)).await), ["p"]);
}

async fn a_resume_is_announced_to_other_processes(kind: Kind) {
    // Nothing listens behind a transaction pooler, nor on an embedded database.
    let f = Fixture::new(kind).await;
    if super::INLINE.with(|inline| inline.get()) || f.store.is_embedded() {
        return;
    }
    let mut listener = f.store.listen(&[QUEUE_CHANNEL]).await.unwrap();
    let other = f.reconnect().await;
    other.pause_queue("orders", 1).await.unwrap();
    other.resume_queue("orders").await.unwrap();
    let heard = tokio::time::timeout(super::HEARD, listener.next())
        .await
        .expect("an announcement")
        .unwrap()
        .unwrap();
    assert_eq!(
        (heard.channel.as_str(), heard.payload.as_str()),
        (QUEUE_CHANNEL, "orders")
    );
}

async fn a_paused_workflow_is_claimed_by_no_one_until_unpaused(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.start(&enqueued("a", "q")).await;
    f.start(&enqueued("b", "q")).await;
    assert_eq!(
        f.store.pause_workflow("a", 1_000).await.unwrap(),
        PauseOutcome::Paused(true)
    );
    // A second pause finds it paused and keeps the first time.
    assert_eq!(
        f.store.pause_workflow("a", 2_000).await.unwrap(),
        PauseOutcome::Paused(false)
    );
    let out = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!(ids(&out), ["b"]);
    assert_eq!(out.seen, 1, "a paused row is not work waiting");
    assert_eq!(f.column("a", "status").await.as_deref(), Some("ENQUEUED"));
    // Readers see the pause beside DBOS's status, from any connection.
    let other = f.reconnect().await;
    let row = other.status("a").await.unwrap().unwrap();
    assert_eq!(
        (row.status.status.as_str(), row.status.paused_at_ms),
        ("ENQUEUED", Some(1_000))
    );
    let q = ListQuery {
        ids: Some(vec!["a".into(), "b".into()]),
        ..Default::default()
    };
    let listed = other.list_workflows(&q).await.unwrap();
    let paused: Vec<_> = listed.iter().map(|r| r.status.paused_at_ms).collect();
    assert_eq!(paused, [Some(1_000), None]);

    let unpaused = other.unpause_workflow("a").await.unwrap().unwrap();
    assert!(unpaused.was_paused);
    assert_eq!(
        (unpaused.status.as_str(), unpaused.queue.as_deref()),
        ("ENQUEUED", Some("q"))
    );
    assert!(
        !f.store
            .unpause_workflow("a")
            .await
            .unwrap()
            .unwrap()
            .was_paused
    );
    assert!(f.store.unpause_workflow("nobody").await.unwrap().is_none());
    assert_eq!(ids(&f.claim(&claim_of(Queue::new("q"), 10)).await), ["a"]);
}

async fn only_an_unfinished_workflow_is_paused(kind: Kind) {
    let f = Fixture::new(kind).await;
    assert_eq!(
        f.store.pause_workflow("nobody", 1).await.unwrap(),
        PauseOutcome::NotFound
    );
    f.start(&enqueued("c", "q")).await;
    f.store.cancel("c", false).await.unwrap();
    assert_eq!(
        f.store.pause_workflow("c", 1).await.unwrap(),
        PauseOutcome::Finished("CANCELLED".into())
    );
    assert_eq!(f.rows_of("stead_workflow_pauses", "c").await, 0);
}

async fn a_paused_run_is_reported_and_requeued_under_its_owner_only(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("r").await;
    let held = vec![HeldRun {
        id: "r".into(),
        owner: owner_of("r"),
    }];
    assert!(f.store.lost_runs(&held).await.unwrap().is_empty());
    f.store.pause_workflow("r", 5).await.unwrap();
    let lost = f.store.lost_runs(&held).await.unwrap();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].status, PAUSED_RUN, "still its own row, but paused");
    let before: i64 = f
        .column("r", "recovery_attempts")
        .await
        .unwrap()
        .parse()
        .unwrap();

    // Another owner's requeue is refused; the run's own puts the row on the internal queue.
    assert_eq!(
        f.store.requeue_paused("r", "someone-else").await.unwrap(),
        None
    );
    assert_eq!(
        f.store
            .requeue_paused("r", &owner_of("r"))
            .await
            .unwrap()
            .as_deref(),
        Some(INTERNAL_QUEUE)
    );
    assert_eq!(f.column("r", "status").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(f.column("r", "owner_xid").await, None);
    let after: i64 = f
        .column("r", "recovery_attempts")
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(after, (before - 1).max(0), "a pause is not a recovery");
    assert_eq!(
        f.store.requeue_paused("r", &owner_of("r")).await.unwrap(),
        None
    );
    // Now it is no longer the run's: reported as the row is.
    assert_eq!(
        f.store.lost_runs(&held).await.unwrap()[0].status,
        "ENQUEUED"
    );
    let internal = Queue::new(INTERNAL_QUEUE);
    assert!(f
        .claim(&claim_of(internal.clone(), 10))
        .await
        .claimed
        .is_empty());
    f.store.unpause_workflow("r").await.unwrap();
    let taken = f.claim(&claim_of(internal, 10)).await;
    assert_eq!(ids(&taken), ["r"]);
    assert_eq!(
        taken.claimed[0].recovery_attempts, before,
        "the claim counts it back"
    );
}

async fn a_workflow_pause_is_announced_and_goes_with_its_workflow(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.start(&enqueued("d", "q")).await;
    // Nothing listens behind a transaction pooler, nor on an embedded database.
    let listens = !super::INLINE.with(|inline| inline.get()) && !f.store.is_embedded();
    let mut listener = match listens {
        true => Some(f.store.listen(&[PAUSE_CHANNEL]).await.unwrap()),
        false => None,
    };
    f.reconnect().await.pause_workflow("d", 1).await.unwrap();
    if let Some(listener) = listener.as_mut() {
        let heard = tokio::time::timeout(super::HEARD, listener.next())
            .await
            .expect("an announcement")
            .unwrap()
            .unwrap();
        assert_eq!(
            (heard.channel.as_str(), heard.payload.as_str()),
            (PAUSE_CHANNEL, "d")
        );
    }
    assert_eq!(f.rows_of("stead_workflow_pauses", "d").await, 1);
    f.store.delete_workflow("d", false).await.unwrap();
    assert_eq!(
        f.rows_of("stead_workflow_pauses", "d").await,
        0,
        "deleted with it"
    );
}

async fn a_batch_resume_lifts_a_pause(kind: Kind) {
    // Paused, then cancelled (the pause row stays), then resumed by a batch: it runs again.
    let f = Fixture::new(kind).await;
    f.start(&enqueued("b", "q")).await;
    f.store.pause_workflow("b", 1).await.unwrap();
    f.store.cancel("b", false).await.unwrap();
    let page = BatchPage {
        filter: ListQuery {
            ids: Some(vec!["b".into()]),
            ..ListQuery::default()
        },
        action: BatchAction::Resume(INTERNAL_QUEUE.into()),
        after: None,
        size: 10,
        dry_run: false,
    };
    let rows = f.store.batch_page(&page).await.unwrap();
    assert!(rows[0].changed);
    assert_eq!(f.rows_of("stead_workflow_pauses", "b").await, 0);
    let internal = Queue::new(INTERNAL_QUEUE);
    assert_eq!(ids(&f.claim(&claim_of(internal, 10)).await), ["b"]);
}

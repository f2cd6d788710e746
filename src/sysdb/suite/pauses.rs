//! Paused queues (`sysdb::pauses`): pausing and resuming, the listing, and what a claim on a
//! paused queue does (takes nothing, while its rows still land and are counted).

use std::time::Duration;

use super::{claim_of, enqueued, ids, store_tests, Fixture, Kind};
use crate::base::queue::Queue;
use crate::sysdb::QUEUE_CHANNEL;

store_tests!(
    queues_pause_and_resume_once_and_are_listed,
    a_paused_queue_is_claimed_from_by_no_one_until_resumed,
    a_resume_is_announced_to_other_processes,
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
    let heard = tokio::time::timeout(Duration::from_secs(5), listener.next())
        .await
        .expect("an announcement")
        .unwrap()
        .unwrap();
    assert_eq!(
        (heard.channel.as_str(), heard.payload.as_str()),
        (QUEUE_CHANNEL, "orders")
    );
}

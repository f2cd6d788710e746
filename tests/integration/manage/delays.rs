//! Delays brought forward: by a client, and by the runtime itself, which wakes its local queue.

use super::*;

both_backends! {
async fn a_delayed_workflow_can_be_brought_forward(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let client = client(&db).await;
    let h = client
        .enqueue(
            "q",
            "double",
            6u64,
            WorkflowOptions::with_id("late").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(common::status_of(&pool, "late").await.as_deref(), Some("DELAYED"));
    client.set_delay("late", Duration::ZERO).await.unwrap();
    let began = std::time::Instant::now();
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 12);
    // Behaviour: the moved delay runs now, not in an hour; 5 s is a loaded machine's claim many
    // times over.
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        client.set_delay("late", Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.set_delay("missing", Duration::ZERO).await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// Brought forward by the runtime itself, on a queue that polls only every 30 s: the local
/// queue actor is woken, not left to its poll or its old due time.
async fn a_delay_brought_forward_wakes_the_local_queue(db) {
    let rt = builder(&db)
        .queue(Queue::new("slow").polling_interval(Duration::from_secs(30)))
        .launch()
        .await
        .unwrap();
    let h = rt
        .enqueue(
            "slow",
            "double",
            3u64,
            WorkflowOptions::with_id("soon").delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = std::time::Instant::now();
    rt.client().set_delay("soon", Duration::ZERO).await.unwrap();
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 6);
    // Behaviour: the moved delay wakes the queue at once (not in an hour); 5 s holds under load.
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

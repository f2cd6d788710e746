//! Paused queues across a fleet: while a queue is paused no executor claims from it, enqueues
//! are accepted and running work finishes; a resume runs the waiting work promptly.

use std::time::{Duration, Instant};

use stead::{Error, Queue, Runtime, WorkflowOptions};

use crate::common;
use crate::common::jobs::{job, open, tagged};
use crate::common::CheckPool;

const QUEUE: &str = "work";

/// An executor serving `work`, polling it every 50 ms (so a missed pause would show at once).
async fn executor(db: &common::TestDb, id: &str) -> Runtime {
    common::builder(db)
        .executor_id(id)
        .workflow("job", job)
        .queue(Queue::new(QUEUE).polling_interval(Duration::from_millis(50)))
        .launch()
        .await
        .unwrap()
}

fn count(status: &str) -> String {
    format!(
        "SELECT count(*) FROM dbos.workflow_status \
         WHERE queue_name = '{QUEUE}' AND status = '{status}'"
    )
}

both_backends! {
async fn a_paused_queue_is_claimed_by_no_executor_until_resumed(db) {
    // Two executors on Postgres; an embedded file serves one process.
    let a = executor(&db, "pause-a").await;
    let b = if db.is_sqlite() { None } else { Some(executor(&db, "pause-b").await) };
    let checks = db.checks().await;
    let enqueue = |rt: &Runtime, tag: String, gate: &'static str| {
        let input = tagged(&db, &tag, gate, 0);
        let client = rt.client().clone();
        async move {
            client.enqueue(QUEUE, "job", input, WorkflowOptions::default()).await.unwrap()
        }
    };

    // One workflow is running when the queue is paused.
    let running = enqueue(&a, "running".into(), "gate").await;
    common::wait_status(&checks, running.id(), "PENDING").await;
    assert!(a.client().pause_queue(QUEUE).await.unwrap());
    assert!(!a.client().pause_queue(QUEUE).await.unwrap(), "already paused");
    let err = a.client().pause_queue("nowhere").await.unwrap_err();
    assert!(matches!(err, Error::UnknownQueue(_)), "{err:?}");
    // The other executor learns of the pause at its next claim (it polls every 50 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Enqueues on either executor are accepted, and nobody claims them.
    let mut waiting = Vec::new();
    for i in 0..6 {
        let rt = b.as_ref().filter(|_| i % 2 == 1).unwrap_or(&a);
        waiting.push(enqueue(rt, format!("waiting-{i}"), "").await);
    }
    // Running work finishes while paused.
    open(&db, "gate");
    assert_eq!(common::within(running.result::<String>()).await.unwrap(), "running");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let enqueued = checks.count(&count("ENQUEUED")).await.unwrap();
    assert_eq!(enqueued, 6, "no executor claimed from the paused queue");
    assert_eq!(checks.count(&count("PENDING")).await.unwrap(), 0);

    // The pause is the fleet's: every process sees it, also in the queue listing.
    let observer = b.as_ref().unwrap_or(&a).client();
    let paused = observer.paused_queues().await.unwrap();
    assert_eq!(paused.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), [QUEUE]);
    let load = observer.queue_loads().await.unwrap();
    let work = load.iter().find(|l| l.queue.name() == QUEUE).unwrap();
    assert_eq!((work.enqueued, work.paused_at_ms), (6, Some(paused[0].paused_at_ms)));

    // Resumed (from the other executor on Postgres), the waiting work runs promptly.
    let resumed_at = Instant::now();
    assert!(observer.resume_queue(QUEUE).await.unwrap());
    for h in &waiting {
        common::within(h.result::<String>()).await.unwrap();
    }
    let took = resumed_at.elapsed();
    // Behaviour: the resume woke the queue rather than its poll; six short runs take well under
    // 3 s on a loaded machine.
    assert!(took < Duration::from_secs(3), "the resume woke the queue: {took:?}");
    assert!(a.client().paused_queues().await.unwrap().is_empty());
    assert!(!a.client().resume_queue(QUEUE).await.unwrap(), "already running");

    if let Some(b) = b {
        b.shutdown(Duration::from_secs(5)).await.unwrap();
    }
    a.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

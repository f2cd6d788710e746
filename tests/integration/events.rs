//! Events: `get_event` waits for a later `set_event`; a workflow's read is recorded, so its
//! replay returns the first run's value even after the event changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stead::{Context, WorkflowOptions};

use crate::common;

/// Publishes `status` = "started", waits for a message, then publishes "done".
async fn publisher(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.set_event("status", &"started").await?;
    ctx.recv::<String>(Some("go"), Duration::from_secs(30))
        .await?;
    ctx.set_event("status", &"done").await
}

both_backends! {
async fn get_event_waits_for_a_later_set_event(db) {
    async fn late(ctx: Context, _: ()) -> stead::Result<()> {
        ctx.sleep(Duration::from_millis(300)).await?;
        ctx.set_event("answer", &42).await
    }
    let rt = common::builder(&db)
        .workflow("late", late)
        .launch()
        .await
        .unwrap();
    let began = Instant::now();
    rt.start("late", (), WorkflowOptions::with_id("late"))
        .await
        .unwrap();
    let missing: Option<u32> = rt
        .client()
        .get_event("late", "other", Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(missing, None, "times out");
    let answer: Option<u32> = rt
        .client()
        .get_event("late", "answer", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(answer, Some(42));
    // A lower bound (the set_event comes after a 300 ms sleep): load only lengthens it.
    assert!(began.elapsed() >= Duration::from_millis(300));
    // Behaviour: woken by the set_event; 2.7 s past the sleep absorbs a loaded machine, while the
    // wait's polling fallback would not come back within the 10 s timeout's share.
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "woken, not polled slowly"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_replayed_get_event_returns_what_the_first_run_read(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    static MAY_CRASH: AtomicBool = AtomicBool::new(false);
    async fn watcher(ctx: Context, target: String) -> stead::Result<String> {
        let seen: Option<String> = ctx
            .get_event(&target, "status", Duration::from_secs(10))
            .await?;
        // Crash once, after the publisher moved on: the replay must still see "started".
        while !MAY_CRASH.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash after reading the event");
        }
        Ok(seen.unwrap_or_default())
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    MAY_CRASH.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("publisher", publisher)
        .workflow("watcher", watcher)
        .launch()
        .await
        .unwrap();
    rt.start("publisher", (), WorkflowOptions::with_id("pub"))
        .await
        .unwrap();
    let w = rt
        .start("watcher", "pub", WorkflowOptions::with_id("watch"))
        .await
        .unwrap();
    let pool = db.checks().await;
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'watch' AND function_name = 'DBOS.getEvent'",
        1,
    )
    .await;
    rt.client().send("pub", &"go", Some("go")).await.unwrap();
    let done: Option<String> = rt
        .client()
        .get_event("pub", "status", Duration::from_secs(10))
        .await
        .unwrap();
    let deadline = Instant::now() + common::wait::SETUP;
    let mut latest = done;
    while latest.as_deref() != Some("done") {
        assert!(Instant::now() < deadline, "the publisher finishes");
        tokio::time::sleep(Duration::from_millis(20)).await;
        latest = rt
            .client()
            .get_event("pub", "status", Duration::from_millis(10))
            .await
            .unwrap();
    }
    MAY_CRASH.store(true, Ordering::SeqCst);
    assert_eq!(
        common::within(w.result::<String>()).await.unwrap(),
        "started"
    );
    assert_eq!(
        w.status().await.unwrap().recovery_attempts,
        2,
        "it did crash and replay"
    );
    let history = common::scalar(
        &pool,
        "SELECT string_agg(CAST(function_id AS TEXT) || '=' || value, ',' ORDER BY function_id) \
         FROM dbos.workflow_events_history WHERE workflow_uuid = 'pub'",
    )
    .await;
    assert_eq!(history.as_deref(), Some(r#"1="started",4="done""#));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

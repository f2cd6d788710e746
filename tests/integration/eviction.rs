//! Eviction of waiting workflows: a sleep, a recv and a child's result evicted and woken (timer,
//! local send, NOTIFY from another client, the child's end here or in another process), a
//! `get_event` woken by its event, an evicted workflow's queue slot (kept, freed by a cancel), its
//! deadline, shutdown and relaunch, step bodies never run twice, and 10,000 evicted workflows each
//! sent a message all finish.

use std::time::{Duration, Instant};

use stead::{Context, Queue, Runtime, WorkflowOptions};

use crate::common;

const IDLE: Duration = Duration::from_millis(200);

/// A counted step, a recv with a long timeout, a counted step.
async fn receiver(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    counted(&ctx, "before", 1).await?;
    let got: Option<String> = ctx.recv(Some("t"), Duration::from_secs(3600)).await?;
    counted(&ctx, "after", 2).await?;
    Ok(got)
}

/// Step `name`, counting its body's runs as call `n`.
async fn counted(ctx: &Context, name: &str, n: u32) -> stead::Result<()> {
    let id = ctx.workflow_id().to_owned();
    ctx.step(name, move || async move {
        common::count_body(&id, n);
        Ok(())
    })
    .await
}

/// A counted step, a durable sleep of `ms`, a counted step.
async fn sleeper(ctx: Context, ms: u64) -> stead::Result<u64> {
    counted(&ctx, "before", 1).await?;
    ctx.sleep(Duration::from_millis(ms)).await?;
    counted(&ctx, "after", 2).await?;
    Ok(ms)
}

/// Waits for event "k" of workflow `of`.
async fn watcher(ctx: Context, of: String) -> stead::Result<Option<String>> {
    ctx.get_event(&of, "k", Duration::from_secs(3600)).await
}

/// Sets event "k" once it receives a message.
async fn publisher(ctx: Context, _: ()) -> stead::Result<()> {
    let value: Option<String> = ctx.recv(Some("go"), Duration::from_secs(3600)).await?;
    ctx.set_event("k", &value).await
}

/// Starts child `<id>-child` (a `receiver`, here or on `queue`) and returns its result.
async fn parent(ctx: Context, queue: Option<String>) -> stead::Result<Option<String>> {
    let child = WorkflowOptions::with_id(format!("{}-child", ctx.workflow_id()));
    let handle = match &queue {
        Some(queue) => ctx.enqueue_child(queue, "receiver", (), child).await?,
        None => ctx.start_child("receiver", (), child).await?,
    };
    handle.result().await
}

/// A recv, then a step that holds the run for 300 ms (a busy run is never evicted).
async fn lingerer(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    let got: Option<String> = ctx.recv(Some("t"), Duration::from_secs(3600)).await?;
    let id = ctx.workflow_id().to_owned();
    ctx.step("linger", move || async move {
        common::count_body(&id, 1);
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    })
    .await?;
    Ok(got)
}

/// Returns at once.
async fn quick(_: Context, _: ()) -> stead::Result<()> {
    Ok(())
}

fn builder(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .evict_after(Some(IDLE))
        .workflow("receiver", receiver)
        .workflow("sleeper", sleeper)
        .workflow("watcher", watcher)
        .workflow("publisher", publisher)
        .workflow("quick", quick)
        .workflow("lingerer", lingerer)
        .workflow("parent", parent)
        .queue(Queue::new("one").worker_concurrency(1))
}

/// Waits until `n` workflows are evicted and none is resident.
async fn evicted(rt: &Runtime, n: u64) {
    let began = Instant::now();
    loop {
        let s = rt.stats();
        if s.workflows_evicted == n && s.workflows_resident == 0 {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(300),
            "expected {n} evicted, none resident: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ran_once(prefix: &str, steps: usize) {
    let runs = common::body_runs_by_step(prefix);
    assert_eq!(runs.len(), steps, "{prefix}: {} counted", runs.len());
    let twice: Vec<_> = runs.iter().filter(|(_, n)| *n != 1).collect();
    assert!(
        twice.is_empty(),
        "{prefix}: step bodies ran more than once: {twice:?}"
    );
}

both_backends! {
async fn a_sleep_is_evicted_and_woken_by_its_timer(db) {
    let rt = builder(&db).launch().await.unwrap();
    let id = format!("sleep-{:?}", db.backend);
    let h = rt.start("sleeper", 1500u64, WorkflowOptions::with_id(&id)).await.unwrap();
    evicted(&rt, 1).await;
    let pool = db.checks().await;
    assert_eq!(common::status_of(&pool, &id).await.as_deref(), Some("PENDING"));
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 1500);
    ran_once(&id, 2);
    assert_eq!(rt.stats().workflows_evicted, 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_recv_is_evicted_and_woken_by_a_local_send(db) {
    let rt = builder(&db).launch().await.unwrap();
    let id = format!("recv-{:?}", db.backend);
    let h = rt.start("receiver", (), WorkflowOptions::with_id(&id)).await.unwrap();
    evicted(&rt, 1).await;
    let sent = Instant::now();
    rt.client().send(&id, &"hello", Some("t")).await.unwrap();
    let got = common::within(h.result::<Option<String>>()).await.unwrap();
    assert_eq!(got.as_deref(), Some("hello"));
    // Behaviour: an evicted waiter is woken by the send, not by its timeout's poll (minutes away);
    // the revival is a page of a short history, well inside 2 s under load.
    assert!(sent.elapsed() < Duration::from_secs(2), "woken by the send, not a poll");
    ran_once(&id, 2);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_get_event_is_evicted_and_woken_by_the_event(db) {
    let rt = builder(&db).launch().await.unwrap();
    let (w, p) = (format!("watch-{:?}", db.backend), format!("pub-{:?}", db.backend));
    rt.start("publisher", (), WorkflowOptions::with_id(&p)).await.unwrap();
    let h = rt.start("watcher", p.clone(), WorkflowOptions::with_id(&w)).await.unwrap();
    evicted(&rt, 2).await;
    rt.client().send(&p, &"v", Some("go")).await.unwrap();
    let got = common::within(h.result::<Option<Option<String>>>()).await.unwrap();
    assert_eq!(got, Some(Some("v".to_owned())));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn an_evicted_workflow_keeps_its_queue_slot_until_cancelled(db) {
    let rt = builder(&db).launch().await.unwrap();
    let (a, b) = (format!("slot-a-{:?}", db.backend), format!("slot-b-{:?}", db.backend));
    rt.enqueue("one", "receiver", (), WorkflowOptions::with_id(&a)).await.unwrap();
    evicted(&rt, 1).await;
    let hb = rt.enqueue("one", "quick", (), WorkflowOptions::with_id(&b)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pool = db.checks().await;
    assert_eq!(
        common::status_of(&pool, &b).await.as_deref(),
        Some("ENQUEUED"),
        "the evicted workflow still holds the queue's one slot"
    );
    rt.client().cancel(&a).await.unwrap();
    common::within(hb.result::<()>()).await.unwrap();
    assert_eq!(common::status_of(&pool, &a).await.as_deref(), Some("CANCELLED"));
    assert_eq!(rt.stats().workflows_evicted, 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn an_evicted_workflow_is_cancelled_at_its_deadline(db) {
    let rt = builder(&db).launch().await.unwrap();
    let id = format!("deadline-{:?}", db.backend);
    let options = WorkflowOptions::with_id(&id).timeout(Duration::from_millis(1500));
    rt.start("sleeper", 3_600_000u64, options).await.unwrap();
    evicted(&rt, 1).await;
    let pool = db.checks().await;
    common::wait_status(&pool, &id, "CANCELLED").await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn shutdown_leaves_evicted_workflows_pending_for_the_next_launch(db) {
    let id = format!("relaunch-{:?}", db.backend);
    let rt = builder(&db).launch().await.unwrap();
    rt.start("sleeper", 2000u64, WorkflowOptions::with_id(&id)).await.unwrap();
    evicted(&rt, 1).await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    drop(rt);
    let pool = db.checks().await;
    assert_eq!(common::status_of(&pool, &id).await.as_deref(), Some("PENDING"));
    let rt = builder(&db).launch().await.unwrap();
    common::wait_status(&pool, &id, "SUCCESS").await;
    ran_once(&id, 2);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn ten_thousand_evicted_workflows_each_sent_a_message_all_finish(db) {
    const N: usize = 10_000;
    let rt = builder(&db).launch().await.unwrap();
    let prefix = format!("many-{:?}-", db.backend);
    let starts = (0..N).map(|i| {
        let id = format!("{prefix}{i}");
        let rt = &rt;
        async move { rt.start("receiver", (), WorkflowOptions::with_id(id)).await }
    });
    let handles: Vec<_> = futures::future::try_join_all(starts).await.unwrap();
    evicted(&rt, N as u64).await;
    let messages = (0..N).map(|i| {
        stead::client::Message::new(format!("{prefix}{i}"), &format!("m{i}"))
            .unwrap()
            .topic("t")
    });
    rt.client().send_bulk(messages).await.unwrap();
    let results = handles.iter().map(|h| h.result::<Option<String>>());
    let all = tokio::time::timeout(Duration::from_secs(300), futures::future::try_join_all(results))
        .await
        .unwrap_or_else(|_| panic!("not every woken workflow finished: {:?}", rt.stats()))
        .unwrap();
    for (i, got) in all.iter().enumerate() {
        assert_eq!(got.as_deref(), Some(format!("m{i}").as_str()));
    }
    ran_once(&prefix, 2 * N);
    assert_eq!(rt.stats().workflows_evicted, 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// A parent awaiting its child's result is evicted like any waiter, and the child's end wakes it.
async fn a_parent_awaiting_its_child_is_evicted_and_woken_by_its_end(db) {
    let rt = builder(&db).launch().await.unwrap();
    let id = format!("parent-{:?}", db.backend);
    let h = rt.start("parent", None::<String>, WorkflowOptions::with_id(&id)).await.unwrap();
    evicted(&rt, 2).await;
    let sent = Instant::now();
    rt.client().send(&format!("{id}-child"), &"to the child", Some("t")).await.unwrap();
    let got = common::within(h.result::<Option<String>>()).await.unwrap();
    assert_eq!(got.as_deref(), Some("to the child"));
    // Behaviour: woken by the child's end, not a poll (minutes away); 2 s holds under load.
    assert!(sent.elapsed() < Duration::from_secs(2), "woken by the child's end, not a poll");
    ran_once(&format!("{id}-child"), 2);
    assert_eq!(rt.stats().workflows_evicted, 0);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// The parent in one process, its child in another, both evicted: the child's end, announced
/// by its finish, wakes the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_evicted_in_one_process_is_woken_by_its_childs_end_in_another() {
    let db = common::TestDb::new().await;
    let here = builder(&db).executor_id("here").launch().await.unwrap();
    let there = builder(&db)
        .executor_id("there")
        .queue(Queue::new("far"))
        .launch()
        .await
        .unwrap();
    let h = here
        .start(
            "parent",
            Some("far".to_owned()),
            WorkflowOptions::with_id("afar"),
        )
        .await
        .unwrap();
    evicted(&here, 1).await;
    evicted(&there, 1).await;
    let sent = Instant::now();
    here.client()
        .send("afar-child", &"hi", Some("t"))
        .await
        .unwrap();
    let got = common::within(h.result::<Option<String>>()).await.unwrap();
    assert_eq!(got.as_deref(), Some("hi"));
    // Behaviour: woken through NOTIFY, not a poll (minutes away); 2 s holds under load.
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "woken by NOTIFY, not a poll"
    );
    ran_once("afar-child", 2);
    here.shutdown(Duration::from_secs(5)).await.unwrap();
    there.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The most resident workflows `rt` held, sampled every 2 ms until `done` resolves.
async fn peak_resident<F: std::future::Future>(rt: &Runtime, done: F) -> (u64, F::Output) {
    tokio::pin!(done);
    let mut peak = 0;
    loop {
        peak = peak.max(rt.stats().workflows_resident);
        tokio::select! {
            out = &mut done => return (peak, out),
            _ = tokio::time::sleep(Duration::from_millis(2)) => {}
        }
    }
}

both_backends! {
/// At the resident bound waiting workflows are evicted at once (not after the hour's
/// `evict_after`), so every start is admitted, direct or claimed from a queue, and all finish.
async fn the_resident_bound_evicts_waiters_at_once_and_admits_the_rest(db) {
    const BOUND: u64 = 5;
    let rt = builder(&db)
        .evict_after(Some(Duration::from_secs(3600)))
        .max_resident(Some(BOUND as usize))
        .queue(Queue::new("wide"))
        .launch()
        .await
        .unwrap();
    let client = common::client(&db, stead::runtime::DEFAULT_APP_NAME).await;
    let tag = format!("{:?}", db.backend);
    let ids: Vec<String> = (0..60).map(|i| format!("bound-{tag}-{i:03}")).collect();
    let starts = async {
        for (i, id) in ids.iter().enumerate() {
            let options = WorkflowOptions::with_id(id);
            if i % 2 == 0 {
                rt.start("receiver", (), options).await.unwrap();
            } else {
                client.enqueue("wide", "receiver", (), options).await.unwrap();
            }
        }
        let began = Instant::now();
        while rt.stats().workflows_evicted < ids.len() as u64 - BOUND {
            assert!(began.elapsed() < Duration::from_secs(60), "{:?}", rt.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let (peak, ()) = peak_resident(&rt, starts).await;
    // Soft by the runs handed to their queue actor but not yet spawned (a few, under load).
    assert!(peak <= 2 * BOUND, "about {BOUND} resident, not {}: {peak}", ids.len());
    // Sent through the runtime: an embedded database hears no other writer.
    for id in &ids {
        rt.client().send(id, &"go", Some("t")).await.unwrap();
    }
    for id in &ids {
        let got: Option<String> = common::within(client.handle(id.as_str()).result()).await.unwrap();
        assert_eq!(got.as_deref(), Some("go"), "{id}");
        ran_once(id, 2);
    }
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// Every evicted waiter woken at once (a message to each) comes back as room frees, not all at
/// once: the resident bound holds for resumed runs as it does for starts.
async fn a_wake_of_every_evicted_waiter_at_once_keeps_to_the_resident_bound(db) {
    const BOUND: u64 = 5;
    let rt = builder(&db)
        .max_resident(Some(BOUND as usize))
        .launch()
        .await
        .unwrap();
    let tag = format!("{:?}", db.backend);
    let ids: Vec<String> = (0..40).map(|i| format!("storm-{tag}-{i:02}")).collect();
    for id in &ids {
        rt.start("lingerer", (), WorkflowOptions::with_id(id))
            .await
            .unwrap();
    }
    evicted(&rt, ids.len() as u64).await;
    let woken = async {
        for id in &ids {
            rt.client().send(id, &"go", Some("t")).await.unwrap();
        }
        for id in &ids {
            let got: Option<String> = common::within(rt.client().handle(id.as_str()).result())
                .await
                .unwrap();
            assert_eq!(got.as_deref(), Some("go"), "{id}");
        }
    };
    let (peak, ()) = peak_resident(&rt, woken).await;
    // Each resumed run stays 300 ms: unbounded, all 40 would be resident together.
    assert!(peak <= 2 * BOUND, "about {BOUND} resident, not {}: {peak}", ids.len());
    for id in &ids {
        ran_once(id, 1);
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// A send from another process's client reaches the evicted workflow through NOTIFY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recv_evicted_on_postgres_is_woken_by_another_clients_send() {
    let db = common::TestDb::new().await;
    let rt = builder(&db).launch().await.unwrap();
    let h = rt
        .start("receiver", (), WorkflowOptions::with_id("notified"))
        .await
        .unwrap();
    evicted(&rt, 1).await;
    let other = common::client(&db, "stead").await;
    let sent = Instant::now();
    other
        .send("notified", &"from afar", Some("t"))
        .await
        .unwrap();
    let got = common::within(h.result::<Option<String>>()).await.unwrap();
    assert_eq!(got.as_deref(), Some("from afar"));
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "woken by NOTIFY, not a poll"
    );
    ran_once("notified", 2);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Eviction off: a waiting workflow stays resident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_eviction_off_a_waiting_workflow_stays_resident() {
    let db = common::TestDb::sqlite().await;
    let rt = builder(&db).evict_after(None).launch().await.unwrap();
    rt.start("sleeper", 800u64, WorkflowOptions::with_id("resident"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = rt.stats();
    assert_eq!((s.workflows_evicted, s.workflows_resident), (0, 1));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

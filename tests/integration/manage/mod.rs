//! Managing workflows from a client: listing with every filter, steps, cancel, resume, fork,
//! delete and delays, against a real database shared with a runtime that runs them.

use std::time::{Duration, SystemTime};

use sqlx::PgPool;
use stead::{
    client::ForkOptions, client::ListWorkflows, Client, Context, Error, Queue, Runtime, Status,
    WorkflowOptions,
};

use crate::common;
use crate::common::CheckPool;

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

async fn refuse(_ctx: Context, _: ()) -> Result<(), std::io::Error> {
    Err(std::io::Error::other("refused"))
}

async fn parent(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.run_child("double", n, WorkflowOptions::default()).await
}

async fn waiter(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    ctx.recv(Some("go"), Duration::from_secs(60)).await
}

async fn waiting_parent(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.start_child("waiter", (), WorkflowOptions::default())
        .await?;
    ctx.recv::<String>(Some("go"), Duration::from_secs(60))
        .await?;
    Ok(())
}

/// Five counted steps; each returns its number plus the input.
async fn five(ctx: Context, base: u32) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 1..=5u32 {
        let id = ctx.workflow_id().to_owned();
        sum += ctx
            .step(&format!("s{i}"), || {
                common::count_body(&id, i);
                async move { Ok(base + i) }
            })
            .await?;
    }
    Ok(sum)
}

/// Forks workflow `target` from its start, waits for a message, returns the fork's id.
async fn forker(ctx: Context, target: String) -> stead::Result<String> {
    let fork = ctx.fork_workflow(&target, 1, ForkOptions::new()).await?;
    ctx.recv::<String>(Some("go"), Duration::from_secs(60))
        .await?;
    Ok(fork.id().to_owned())
}

/// Creates a fork, then a `now`, and awaits them together with the `now` polled first: each
/// durable call is numbered when created, so the fork is call 1 either way.
async fn fork_then_now(ctx: Context, target: String) -> stead::Result<String> {
    let fork = ctx.fork_workflow(&target, 1, ForkOptions::new());
    let now = ctx.now();
    let (now, fork) = futures::future::join(now, fork).await;
    now?;
    Ok(fork?.id().to_owned())
}

const CHILD_DB: &str = "STEAD_TEST_MANAGE_CHILD_DB";

/// Records that step `step` of workflow `id` ran, in the shared `effects` table.
async fn effect(id: &str, step: &str) -> Result<(), sqlx::Error> {
    let url = std::env::var(CHILD_DB).expect("runs in the child process");
    let pool = PgPool::connect(&url).await?;
    sqlx::query("INSERT INTO effects VALUES ($1, $2)")
        .bind(id)
        .bind(step)
        .execute(&pool)
        .await?;
    pool.close().await;
    Ok(())
}

/// Step one, a wait for a message, step two; each step body leaves an effect.
async fn effects(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    let id = ctx.workflow_id().to_owned();
    ctx.step_typed("one", || effect(&id, "one")).await?;
    let got = ctx.recv(Some("go"), Duration::from_secs(60)).await?;
    ctx.step_typed("two", || effect(&id, "two")).await?;
    Ok(got)
}

fn builder(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .app_name("shop")
        .queue(Queue::new("q").polling_interval(Duration::from_millis(100)))
        .workflow("double", double)
        .workflow("refuse", refuse)
        .workflow("parent", parent)
        .workflow("waiter", waiter)
        .workflow("waiting_parent", waiting_parent)
        .workflow("five", five)
        .workflow("forker", forker)
        .workflow("fork_then_now", fork_then_now)
        .workflow("effects", effects)
}

async fn client(db: &common::TestDb) -> Client {
    common::client(db, "shop").await
}

fn ids(list: &[stead::client::WorkflowInfo]) -> Vec<&str> {
    list.iter().map(|w| w.status.id.as_str()).collect()
}

/// Workflows in every shape the filters tell apart, and the moment between d2 and d3. Shuts
/// `rt` down and returns another executor (an embedded database serves one at a time).
async fn populate(rt: Runtime, db: &common::TestDb) -> (SystemTime, Runtime) {
    for (id, n) in [("d1", 1u64), ("d2", 2)] {
        rt.start("double", n, WorkflowOptions::with_id(id))
            .await
            .unwrap()
            .result::<u64>()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mid = SystemTime::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    for id in ["d3"] {
        rt.start("double", 3u64, WorkflowOptions::with_id(id))
            .await
            .unwrap()
            .result::<u64>()
            .await
            .unwrap();
    }
    let e1 = rt
        .start("refuse", (), WorkflowOptions::with_id("e1"))
        .await
        .unwrap();
    assert!(e1.result::<()>().await.is_err());
    rt.enqueue(
        "q",
        "double",
        9u64,
        WorkflowOptions::with_id("qv").app_version("v9"),
    )
    .await
    .unwrap();
    rt.start("parent", 5u64, WorkflowOptions::with_id("p1"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let f1 = rt
        .client()
        .fork("d1", 1, ForkOptions::new().id("f1"))
        .await
        .unwrap();
    assert_eq!(common::within(f1.result::<u64>()).await.unwrap(), 2);
    // Launched last, so it claims none of the work above.
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let other = builder(db).executor_id("other").launch().await.unwrap();
    other
        .start("double", 7u64, WorkflowOptions::with_id("o1"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    (mid, other)
}

both_backends! {
async fn every_list_filter_and_pagination(db) {
    let rt = builder(&db).launch().await.unwrap();
    let (mid, other) = populate(rt, &db).await;
    let client = client(&db).await;
    let list = |f: ListWorkflows| {
        let client = client.clone();
        async move { client.list_workflows(f).await.unwrap() }
    };
    let all = ["d1", "d2", "d3", "e1", "qv", "p1", "p1-1", "f1", "o1"];
    assert_eq!(ids(&list(ListWorkflows::new()).await), all);

    assert_eq!(
        ids(&list(ListWorkflows::new().ids(["d3", "d1", "missing"])).await),
        ["d1", "d3"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().status(Status::Error)).await),
        ["e1"]
    );
    assert_eq!(
        ids(&list(
            ListWorkflows::new()
                .status(Status::Error)
                .status(Status::Enqueued)
        )
        .await),
        ["e1", "qv"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().name("refuse")).await),
        ["e1"]
    );
    assert_eq!(ids(&list(ListWorkflows::new().queue("q")).await), ["qv"]);
    assert_eq!(
        ids(&list(ListWorkflows::new().app_version("v9")).await),
        ["qv"]
    );
    assert_eq!(
        list(ListWorkflows::new().app_name("shop")).await.len(),
        all.len()
    );
    assert!(list(ListWorkflows::new().app_name("elsewhere"))
        .await
        .is_empty());
    assert_eq!(
        ids(&list(ListWorkflows::new().created_before(mid)).await),
        ["d1", "d2"]
    );
    let after = list(ListWorkflows::new().created_after(mid)).await;
    assert_eq!(ids(&after)[0], "d3");
    assert_eq!(after.len(), all.len() - 2);
    assert_eq!(
        ids(&list(ListWorkflows::new().parent("p1")).await),
        ["p1-1"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().forked_from("d1")).await),
        ["f1"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().executor("other")).await),
        ["o1"]
    );

    // Pagination, both orders.
    assert_eq!(
        ids(&list(ListWorkflows::new().limit(2)).await),
        ["d1", "d2"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().limit(3).offset(2)).await),
        ["d3", "e1", "qv"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().newest_first().limit(2)).await),
        ["o1", "f1"]
    );
    assert_eq!(
        ids(&list(ListWorkflows::new().newest_first().offset(7)).await),
        ["d2", "d1"]
    );

    // Payloads only when asked.
    let bare = &list(ListWorkflows::new().ids(["d2", "e1"])).await;
    assert!(bare
        .iter()
        .all(|w| w.input.is_none() && w.output.is_none() && w.error.is_none()));
    let full = list(ListWorkflows::new().ids(["d2", "e1"]).with_payloads()).await;
    assert_eq!(full[0].input, Some(serde_json::json!(2)));
    assert_eq!(full[0].output, Some(serde_json::json!(4)));
    let error = full[1].error.as_ref().expect("e1's error");
    assert_eq!(error.message, "refused");
    assert_eq!(full[1].status.status, Status::Error);

    // Queued: waiting, delayed or running from a queue.
    assert_eq!(
        ids(&client
            .list_queued_workflows(ListWorkflows::new())
            .await
            .unwrap()),
        ["qv"]
    );
    // The runtime offers the same operations.
    assert_eq!(
        other.client().list_workflows(ListWorkflows::new()).await.unwrap().len(),
        all.len()
    );
    other.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn steps_list_each_recorded_call_in_order(db) {
    let rt = builder(&db).launch().await.unwrap();
    rt.start("five", 10u32, WorkflowOptions::with_id("st"))
        .await
        .unwrap()
        .result::<u32>()
        .await
        .unwrap();
    rt.start("parent", 1u64, WorkflowOptions::with_id("sp"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let client = client(&db).await;
    let steps = client.steps("st").await.unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["s1", "s2", "s3", "s4", "s5"]);
    assert_eq!(steps[2].function_id, 3);
    assert_eq!(steps[2].output, Some(serde_json::json!(13)));
    assert!(steps.iter().all(|s| s.completed_at_ms >= s.started_at_ms));
    let parent = client.steps("sp").await.unwrap();
    assert_eq!(parent[0].child_workflow_id.as_deref(), Some("sp-1"));
    assert_eq!(parent[1].name, "DBOS.getResult");
    assert!(client.steps("missing").await.unwrap().is_empty());
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn cancel_alone_or_with_children(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let client = client(&db).await;
    for id in ["alone", "tree"] {
        rt.start("waiting_parent", (), WorkflowOptions::with_id(id))
            .await
            .unwrap();
        common::wait_status(&pool, &format!("{id}-1"), "PENDING").await;
    }
    client.cancel("alone").await.unwrap();
    let h = client.handle("alone");
    assert!(matches!(
        common::within(h.result::<()>()).await,
        Err(Error::Cancelled { .. })
    ));
    assert_eq!(
        common::status_of(&pool, "alone-1").await.as_deref(),
        Some("PENDING")
    );

    client.cancel_with_children("tree").await.unwrap();
    common::wait_status(&pool, "tree", "CANCELLED").await;
    common::wait_status(&pool, "tree-1", "CANCELLED").await;
    assert!(matches!(
        client.cancel("missing").await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn resume_runs_a_cancelled_workflow_on_from_its_checkpoint(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let client = client(&db).await;
    rt.start("waiter", (), WorkflowOptions::with_id("r1"))
        .await
        .unwrap();
    common::wait_status(&pool, "r1", "PENDING").await;
    client.cancel("r1").await.unwrap();
    common::wait_status(&pool, "r1", "CANCELLED").await;
    let h = client.resume("r1").await.unwrap();
    client.send("r1", &"again", Some("go")).await.unwrap();
    assert_eq!(
        common::within(h.result::<Option<String>>()).await.unwrap(),
        Some("again".into())
    );
    let status = h.status().await.unwrap();
    assert_eq!(status.queue_name.as_deref(), Some("_dbos_internal_queue"));

    // A finished workflow stays as it is; an unknown one is an error.
    client.resume("r1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(common::status_of(&pool, "r1").await.as_deref(), Some("SUCCESS"));
    assert!(matches!(
        client.resume("missing").await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn a_fork_from_step_three_replays_one_and_two_and_runs_three_to_five(db) {
    let rt = builder(&db).launch().await.unwrap();
    let original = rt
        .start("five", 100u32, WorkflowOptions::with_id("fk"))
        .await
        .unwrap();
    assert_eq!(original.result::<u32>().await.unwrap(), 515);
    let client = client(&db).await;
    let fork = client.fork("fk", 3, ForkOptions::new()).await.unwrap();
    assert_ne!(fork.id(), "fk");
    assert_eq!(common::within(fork.result::<u32>()).await.unwrap(), 515);
    let per_step: Vec<u32> = (1..=5).map(|i| common::body_run(fork.id(), i)).collect();
    assert_eq!(per_step, [0, 0, 1, 1, 1], "steps 1-2 replayed, 3-5 run");
    let status = fork.status().await.unwrap();
    assert_eq!(status.forked_from.as_deref(), Some("fk"));
    assert_eq!(client.steps(fork.id()).await.unwrap().len(), 5);

    // A new version and queue for the copy.
    let moved = client
        .fork(
            "fk",
            5,
            ForkOptions::new().id("fk-v9").app_version("v9").queue("q"),
        )
        .await
        .unwrap();
    let status = moved.status().await.unwrap();
    assert_eq!(status.app_version.as_deref(), Some("v9"));
    assert_eq!(status.queue_name.as_deref(), Some("q"));
    assert_eq!(status.status, Status::Enqueued);
    assert!(matches!(
        client.fork("missing", 1, ForkOptions::new()).await,
        Err(Error::NotFound(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn a_replayed_fork_inside_a_workflow_returns_the_same_copy(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    rt.start("double", 1u64, WorkflowOptions::with_id("src"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    rt.start("forker", "src", WorkflowOptions::with_id("fw"))
        .await
        .unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'fw'",
        1,
        20,
    )
    .await;
    // Stop it mid-way and run it again: the fork call replays.
    rt.client().cancel("fw").await.unwrap();
    common::wait_status(&pool, "fw", "CANCELLED").await;
    let h = rt.client().resume("fw").await.unwrap();
    rt.client().send("fw", &"go", Some("go")).await.unwrap();
    let fork_id = common::within(h.result::<String>()).await.unwrap();
    assert_eq!(fork_id, "fw-1");
    let forks = rt
        .client()
        .list_workflows(ListWorkflows::new().forked_from("src"))
        .await
        .unwrap();
    assert_eq!(ids(&forks), ["fw-1"]);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_fork_is_numbered_when_created_not_when_first_polled(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    rt.start("double", 1u64, WorkflowOptions::with_id("src"))
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let h = rt
        .start("fork_then_now", "src", WorkflowOptions::with_id("fn"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "fn-1");
    let calls = common::scalar(
        &pool,
        "SELECT string_agg(CAST(function_id AS TEXT) || ':' || function_name, ',' \
         ORDER BY function_id) FROM dbos.operation_outputs WHERE workflow_uuid = 'fn'",
    )
    .await;
    assert_eq!(calls.as_deref(), Some("1:stead.fork,2:stead.now"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn delete_alone_or_with_children_removes_every_row(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    for id in ["x", "y"] {
        rt.start("parent", 2u64, WorkflowOptions::with_id(id))
            .await
            .unwrap()
            .result::<u64>()
            .await
            .unwrap();
    }
    let client = client(&db).await;
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move { pool.count(sql).await.unwrap() }
    };
    client.delete("x").await.unwrap();
    assert_eq!(common::status_of(&pool, "x").await, None);
    assert_eq!(common::status_of(&pool, "x-1").await.as_deref(), Some("SUCCESS"));
    assert_eq!(
        count("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'x'").await,
        0
    );
    assert!(matches!(
        client.handle("x").status().await,
        Err(Error::NotFound(_))
    ));
    client.delete_with_children("y").await.unwrap();
    assert_eq!(common::status_of(&pool, "y").await, None);
    assert_eq!(common::status_of(&pool, "y-1").await, None);
    assert_eq!(
        count("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid IN ('y', 'y-1')")
            .await,
        0
    );
    assert!(matches!(client.delete("y").await, Err(Error::NotFound(_))));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

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
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Entry point of the process that runs the workflow the test resumes from outside.
#[tokio::test]
#[ignore = "run by resuming_a_live_workflow_from_another_process_runs_each_step_once"]
async fn resume_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = common::TestDb::existing(&url);
    let rt = builder(&db).executor_id("worker").launch().await.unwrap();
    rt.start("effects", (), WorkflowOptions::with_id("live"))
        .await
        .unwrap();
    std::future::pending::<()>().await;
}

/// Postgres only: the resume stops the run in the other process through NOTIFY.
#[tokio::test]
async fn resuming_a_live_workflow_from_another_process_runs_each_step_once() {
    let db = common::TestDb::new().await;
    let pool = db.pool().await;
    sqlx::query("CREATE TABLE effects (id text, step text)")
        .execute(&pool)
        .await
        .unwrap();
    let _child = common::KillOnDrop(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "manage::resume_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_DB, &db.url)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Step one is checkpointed: the live run waits in recv.
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'live' AND function_name = 'one'",
        1,
        60,
    )
    .await;
    let owner = |pool: PgPool| async move {
        common::scalar(
            &pool,
            "SELECT owner_xid FROM dbos.workflow_status WHERE workflow_uuid = 'live'",
        )
        .await
    };
    let before = owner(pool.clone()).await;
    // A resume hands the workflow to a new run under a new owner.
    let client = client(&db).await;
    client.resume("live").await.unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'live' AND status = 'PENDING'",
        1,
        20,
    )
    .await;
    client.send("live", &"go", Some("go")).await.unwrap();
    let got = common::within(client.handle("live").result::<Option<String>>())
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some("go"));
    assert_ne!(owner(pool.clone()).await, before, "a new run took over");
    let runs: Vec<(String, i64)> =
        sqlx::query_as("SELECT step, count(*) FROM effects GROUP BY step ORDER BY step")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(runs, [("one".into(), 1), ("two".into(), 1)]);
}

//! The client: what a producer or an operator does without running workflow code (enqueue,
//! talk to workflows, versions, queues), against a database shared with a runtime that runs
//! them. Managing workflows is in `manage.rs`.

use std::time::Duration;

use futures::StreamExt;
use stead::{Client, Context, Error, Queue, Status, WorkflowOptions};

use crate::common;

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

async fn waiter(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    ctx.recv(Some("go"), Duration::from_secs(60)).await
}

/// Receives a message, publishes it as an event, streams three values and returns it.
async fn chat(ctx: Context, _: ()) -> stead::Result<String> {
    let got: String = ctx
        .recv(Some("in"), Duration::from_secs(60))
        .await?
        .unwrap_or_default();
    ctx.set_event("got", &got).await?;
    for i in 0..3u32 {
        ctx.write_stream("out", &i).await?;
    }
    ctx.close_stream("out").await?;
    Ok(got)
}

fn builder(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .app_name("shop")
        .queue(Queue::new("q").polling_interval(Duration::from_millis(100)))
        .workflow("double", double)
        .workflow("waiter", waiter)
        .workflow("chat", chat)
}

async fn client(db: &common::TestDb) -> Client {
    common::client(db, "shop").await
}

both_backends! {
async fn a_client_refuses_an_unmigrated_database_and_never_migrates(db) {
    let table_sql = if db.is_sqlite() {
        "SELECT max(name) FROM dbos.sqlite_master WHERE name = 'workflow_status'"
    } else {
        "SELECT to_regclass('dbos.workflow_status')::text"
    };
    if db.is_sqlite() {
        // A missing file is not created (a mistyped path would leave an empty database).
        let file = db.url.trim_start_matches("sqlite://");
        let err = Client::connect(&db.url).await.err().expect("refused");
        assert!(matches!(err, Error::Connect { .. }), "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!std::path::Path::new(file).exists(), "the client created {file}");
        std::fs::File::create(file).unwrap();
    }
    let err = Client::connect(&db.url).await.err().expect("refused");
    assert!(
        matches!(err, Error::SchemaTooOld { found: None, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("stead migrate"), "{err}");
    let pool = db.checks().await;
    let table = common::scalar(&pool, table_sql).await;
    assert_eq!(table, None, "the client created tables");
}
}

both_backends! {
async fn a_client_enqueues_by_name_talks_to_the_workflow_and_waits_for_it(db) {
    let rt = builder(&db).launch().await.unwrap();
    let client = client(&db).await;
    let h = client
        .enqueue("q", "chat", (), WorkflowOptions::with_id("c1"))
        .await
        .unwrap();
    client.send("c1", &"hello", Some("in")).await.unwrap();
    let got: Option<String> = client
        .get_event("c1", "got", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some("hello"));
    let values: Vec<u32> = client
        .read_stream::<u32>("c1", "out")
        .map(|v| v.unwrap().value)
        .collect()
        .await;
    assert_eq!(values, [0, 1, 2]);
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "hello");
    assert_eq!(
        client.handle("c1").status().await.unwrap().status,
        Status::Success
    );
    assert!(matches!(
        client.send("nobody", &1, None).await,
        Err(Error::NotFound(_))
    ));
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// A client of no application (or another one) feeding an application's queue: the run is the
/// queue owner's, so the owner's executors claim it (it would wait forever as the client's).
async fn an_enqueue_onto_another_applications_queue_is_that_applications(db) {
    let rt = builder(&db).launch().await.unwrap();
    let unnamed = Client::connect(&db.url).await.unwrap();
    let h = unnamed
        .enqueue("q", "double", 21u64, WorkflowOptions::with_id("from-unnamed"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 42);
    let app = common::scalar(
        &db.checks().await,
        "SELECT application_name FROM dbos.workflow_status WHERE workflow_uuid = 'from-unnamed'",
    )
    .await;
    assert_eq!(app.as_deref(), Some("shop"));
    unnamed.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn an_enqueue_for_another_version_waits_for_an_executor_of_that_version(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    let client = client(&db).await;
    client
        .enqueue(
            "q",
            "double",
            1u64,
            WorkflowOptions::with_id("v9").app_version("v9"),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(common::status_of(&pool, "v9").await.as_deref(), Some("ENQUEUED"));
    // One executor at a time: an embedded database serves one.
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let v9 = builder(&db)
        .app_version("v9")
        .executor_id("v9-executor")
        .launch()
        .await
        .unwrap();
    let h = client.handle("v9");
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 2);
    assert_eq!(h.status().await.unwrap().app_version.as_deref(), Some("v9"));
    v9.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn versionless_enqueues_go_to_the_latest_version_which_an_operator_chooses(db) {
    // One executor at a time (an embedded database serves one): test-1, then test-2, then
    // test-1 again, which stays behind test-2.
    let old = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    old.shutdown(Duration::from_secs(5)).await.unwrap();
    let new = builder(&db)
        .app_version("test-2")
        .executor_id("new-executor")
        .launch()
        .await
        .unwrap();
    new.shutdown(Duration::from_secs(5)).await.unwrap();
    let old = builder(&db).launch().await.unwrap();
    let client = client(&db).await;
    let versions: Vec<String> = client
        .app_versions()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(versions, ["test-2", "test-1"], "latest first");

    client
        .enqueue("q", "double", 4u64, WorkflowOptions::with_id("nv"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        common::status_of(&pool, "nv").await.as_deref(),
        Some("ENQUEUED"),
        "test-1 is not the latest: not its to run"
    );
    client.set_latest_app_version("test-1").await.unwrap();
    assert_eq!(client.app_versions().await.unwrap()[0].name, "test-1");
    assert_eq!(
        common::within(client.handle("nv").result::<u64>())
            .await
            .unwrap(),
        8
    );
    assert!(matches!(
        client.set_latest_app_version("nope").await,
        Err(Error::UnknownAppVersion(v)) if v == "nope"
    ));
    old.shutdown(Duration::from_secs(5)).await.unwrap();
}
}
both_backends! {
async fn a_client_manages_queues_that_executors_follow(db) {
    let rt = builder(&db)
        .queue_refresh(Duration::from_millis(100))
        .launch()
        .await
        .unwrap();
    let client = client(&db).await;
    client
        .create_queue(Queue::new("fresh").worker_concurrency(2))
        .await
        .unwrap();
    assert!(matches!(
        client.create_queue(Queue::new("fresh")).await,
        Err(Error::QueueExists(_))
    ));
    client
        .set_queue(Queue::new("fresh").worker_concurrency(3))
        .await
        .unwrap();
    assert!(client
        .queues()
        .await
        .unwrap()
        .contains(&Queue::new("fresh").worker_concurrency(3)));
    let h = client
        .enqueue("fresh", "double", 21u64, WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 42);
    client.delete_queue("fresh").await.unwrap();
    assert!(client
        .queues()
        .await
        .unwrap()
        .iter()
        .all(|q| q.name() != "fresh"));
    assert!(matches!(
        client.delete_queue("fresh").await,
        Err(Error::UnknownQueue(_))
    ));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn an_enqueue_to_a_queue_no_definition_names_is_refused_unless_allowed(db) {
    let rt = builder(&db).launch().await.unwrap();
    let client = client(&db).await;
    let refused = [
        rt.enqueue("nope", "double", 1u64, WorkflowOptions::with_id("u1")).await.err(),
        client.enqueue("nope", "double", 1u64, WorkflowOptions::with_id("u2")).await.err(),
        client
            .debounce("k", Duration::from_secs(1), "double", 1u64,
                      stead::client::DebounceOptions::default().queue("nope"))
            .await
            .err(),
    ];
    for err in refused {
        let err = err.expect("refused");
        assert!(matches!(&err, Error::UnknownQueue(q) if q == "nope"), "{err}");
        assert_eq!(err.to_string(), "queue \"nope\" not found");
    }
    let pool = db.checks().await;
    let rows = common::scalar(&pool, "SELECT CAST(count(*) AS TEXT) FROM dbos.workflow_status").await;
    assert_eq!(rows.as_deref(), Some("0"), "a refused enqueue wrote a row");

    // Opting out: the queue is defined later (here by the runtime), and the work then runs.
    let early = client
        .enqueue("later", "double", 4u64,
                 WorkflowOptions::with_id("early").allow_undefined_queue())
        .await
        .unwrap();
    common::wait_status(&pool, "early", "ENQUEUED").await;
    rt.client()
        .create_queue(Queue::new("later").polling_interval(Duration::from_millis(100)))
        .await
        .unwrap();
    assert_eq!(common::within(early.result::<u64>()).await.unwrap(), 8);
    // A queue defined after the client connected is found without the opt-out.
    let after = client
        .enqueue("later", "double", 5u64, WorkflowOptions::with_id("after"))
        .await
        .unwrap();
    assert_eq!(common::within(after.result::<u64>()).await.unwrap(), 10);
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

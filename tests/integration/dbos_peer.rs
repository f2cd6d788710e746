//! stead as a peer of DBOS apps on one database (issue 14), each against the real DBOS 3.4
//! (skipped without it, see `common::dbos_py`): cancels by DBOS's client stop stead's runs,
//! terminal rows are DBOS's, sends are idempotent by DBOS's key scheme.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead::{Context, Queue, WorkflowOptions};

use crate::common;
use crate::common::dbos_py::py_client;
use crate::common::TestDb;

/// The application name stead runs as and the Python client acts for.
const APP: &str = "peer";

/// Ids whose step after the sleep ran its body: a visible side effect.
static AFTER_SLEEP: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Sleeps `secs` seconds, then a step with a side effect.
async fn nap_then_act(ctx: Context, secs: u64) -> stead::Result<()> {
    ctx.sleep(Duration::from_secs(secs)).await?;
    let id = ctx.workflow_id().to_owned();
    ctx.step("act", || async move {
        AFTER_SLEEP.lock().unwrap().push(id);
        Ok(())
    })
    .await
}

/// Waits for a message that never comes.
async fn wait_for_mail(ctx: Context, _: ()) -> stead::Result<Option<Value>> {
    ctx.recv::<Value>(Some("never"), Duration::from_secs(60))
        .await
}

async fn quick(_: Context, _: ()) -> stead::Result<()> {
    Ok(())
}

fn acted(id: &str) -> bool {
    AFTER_SLEEP.lock().unwrap().iter().any(|a| a == id)
}

fn builder(db: &TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .app_name(APP)
        // One slot in this process: a run that keeps it holds up the queue.
        .queue(Queue::new("single").worker_concurrency(1))
        .queue(Queue::new("wide"))
        .workflow("nap_then_act", nap_then_act)
        .workflow("wait_for_mail", wait_for_mail)
        .workflow("quick", quick)
}

/// The `ok` answer of the Python client, failing the test on its `error`.
fn ok(answer: Value) -> Value {
    match answer {
        Value::Object(mut m) if m.contains_key("ok") => m.remove("ok").unwrap_or_default(),
        other => panic!("the Python client failed: {other}"),
    }
}

async fn wait_recorded(db: &TestDb, id: &str, call: &str) {
    let sql = format!(
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{id}' \
         AND function_name = '{call}'"
    );
    common::wait_count(&db.pool().await, &sql, 1).await;
}

/// A cancel by DBOS's client (no announcement) stops a sleeping and a receiving run within the
/// sweep interval: their slots come free and no later step body runs.
#[tokio::test]
async fn a_cancel_by_the_dbos_client_frees_the_slot_and_runs_no_further_step() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.pool().await;
    for (id, workflow) in [
        ("dbos-cancels-sleep", "nap_then_act"),
        ("dbos-cancels-recv", "wait_for_mail"),
    ] {
        let input = if workflow == "nap_then_act" {
            json!(30)
        } else {
            Value::Null
        };
        rt.enqueue("single", workflow, input, WorkflowOptions::with_id(id))
            .await
            .unwrap();
        common::wait_status(&pool, id, "PENDING").await;
        let behind = format!("{id}-behind");
        rt.enqueue("single", "quick", (), WorkflowOptions::with_id(&behind))
            .await
            .unwrap();
        // Both are waiting once their (timeout's) sleep is recorded.
        wait_recorded(&db, id, "DBOS.sleep").await;

        ok(py_client(&db.url, APP, "cancel", json!({"id": id})).await);
        let cancelled = Instant::now();
        let handle = rt.client().handle(&behind);
        common::within(handle.result::<()>()).await.unwrap();
        // Behaviour: DBOS's cancel (no announcement) is found by the sweep within its period, not
        // the run's 60 s wait; 10 s holds a loaded Python client's exit.
        assert!(
            cancelled.elapsed() < Duration::from_secs(10),
            "{id}: the slot came free {:?} after DBOS's cancel",
            cancelled.elapsed()
        );
        assert_eq!(
            common::status_of(&pool, id).await.as_deref(),
            Some("CANCELLED")
        );
    }
    assert!(
        !acted("dbos-cancels-sleep"),
        "no step body ran after the cancel"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// With the sweep out of the way, a sleep that ends after DBOS's cancel re-reads the row and
/// stops before the next step's body.
#[tokio::test]
async fn a_sleep_cancelled_by_dbos_stops_before_its_next_step_body() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = builder(&db)
        .cancel_sweep(Duration::from_secs(600))
        .launch()
        .await
        .unwrap();
    let id = "dbos-cancels-nap";
    let h = rt
        // Long enough for the Python client to start and cancel on a loaded machine (a sleep
        // that ended first would let the run finish).
        .start("nap_then_act", 15u64, WorkflowOptions::with_id(id))
        .await
        .unwrap();
    wait_recorded(&db, id, "DBOS.sleep").await;
    ok(py_client(&db.url, APP, "cancel", json!({"id": id})).await);
    let outcome = common::within(h.result::<()>()).await;
    assert!(
        matches!(outcome, Err(stead::Error::Cancelled { .. })),
        "{outcome:?}"
    );
    assert!(!acted(id), "the step after the sleep did not run its body");
    assert_eq!(
        common::status_of(&db.pool().await, id).await.as_deref(),
        Some("CANCELLED")
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The columns a terminal transition writes, as text; times reduced to whether they are set.
async fn terminal_row(db: &TestDb, id: &str) -> Value {
    let sql = format!(
        "SELECT json_build_object('status', status, 'queue', queue_name, 'owner', owner_xid, \
           'dedup', deduplication_id, 'started', started_at_epoch_ms IS NOT NULL, \
           'completed', completed_at IS NOT NULL)::text \
         FROM dbos.workflow_status WHERE workflow_uuid = '{id}'"
    );
    let text = common::scalar(&db.pool().await, &sql)
        .await
        .unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{id}: {e} in {text:?}"))
}

/// stead's cancels (by its client, by a timeout) leave the row DBOS's cancel leaves, so DBOS's
/// completed-after filter finds them.
#[tokio::test]
async fn stead_cancels_leave_the_row_dbos_cancels_leave() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = builder(&db).launch().await.unwrap();
    let on_queue =
        |id: &str| WorkflowOptions::with_id(id).deduplication_id(id, stead::queues::Dedup::Reject);
    for id in ["by-stead", "by-dbos"] {
        rt.enqueue("wide", "nap_then_act", 30u64, on_queue(id))
            .await
            .unwrap();
        wait_recorded(&db, id, "DBOS.sleep").await;
    }
    rt.start(
        "nap_then_act",
        30u64,
        WorkflowOptions::with_id("by-timeout").timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    rt.client().cancel("by-stead").await.unwrap();
    ok(py_client(&db.url, APP, "cancel", json!({"id": "by-dbos"})).await);
    common::wait_status(&db.pool().await, "by-timeout", "CANCELLED").await;

    let dbos = terminal_row(&db, "by-dbos").await;
    assert_eq!(
        dbos,
        json!({"status": "CANCELLED", "queue": null, "owner": null, "dedup": null,
               "started": false, "completed": true})
    );
    assert_eq!(terminal_row(&db, "by-stead").await, dbos);
    assert_eq!(terminal_row(&db, "by-timeout").await, dbos);

    let filter = json!({"status": "CANCELLED", "completed_after": "2000-01-01T00:00:00+00:00",
                        "load_input": false, "load_output": false});
    let listed = ok(py_client(&db.url, APP, "list", filter).await);
    let mut listed: Vec<String> = serde_json::from_value(listed).unwrap();
    listed.sort();
    assert_eq!(listed, ["by-dbos", "by-stead", "by-timeout"]);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Messages per destination, as (message id, message) in sending order.
async fn mail(db: &TestDb, destination: &str) -> Vec<(String, String)> {
    let sql = format!(
        "SELECT COALESCE(json_agg(json_build_array(message_uuid, message) \
           ORDER BY created_at_epoch_ms, message_uuid), '[]')::text \
         FROM dbos.notifications WHERE destination_uuid = '{destination}'"
    );
    let text = common::scalar(&db.pool().await, &sql)
        .await
        .unwrap_or_default();
    serde_json::from_str(&text).unwrap()
}

/// A keyed send is delivered once whoever resends it, stead or DBOS's client; a bulk send
/// writes every message under DBOS's `<key>::<destination>` ids.
#[tokio::test]
async fn idempotency_keys_deduplicate_sends_across_stead_and_dbos() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = builder(&db).launch().await.unwrap();
    for id in ["inbox-a", "inbox-b"] {
        rt.start("wait_for_mail", (), WorkflowOptions::with_id(id))
            .await
            .unwrap();
    }
    let client = rt.client();

    // DBOS first, then stead's retry with the same key: one message.
    let by_dbos = json!({"to": "inbox-a", "topic": "t", "message": "from python", "key": "k1"});
    ok(py_client(&db.url, APP, "send", by_dbos).await);
    client
        .send_with_key("inbox-a", &"from stead", Some("t"), "k1")
        .await
        .unwrap();
    // stead first, then DBOS's retry: one message.
    client
        .send_with_key("inbox-a", &"stead first", Some("t"), "k2")
        .await
        .unwrap();
    let retry = json!({"to": "inbox-a", "topic": "t", "message": "python retry", "key": "k2"});
    ok(py_client(&db.url, APP, "send", retry).await);
    assert_eq!(
        mail(&db, "inbox-a").await,
        [
            ("k1::inbox-a".to_owned(), "\"from python\"".to_owned()),
            ("k2::inbox-a".to_owned(), "\"stead first\"".to_owned())
        ]
    );

    // A bulk send: one key may go to two destinations; resending the batch adds nothing.
    let batch = || {
        [
            stead::client::Message::new("inbox-b", &1)
                .unwrap()
                .idempotency_key("b1"),
            stead::client::Message::new("inbox-b", &2)
                .unwrap()
                .topic("t")
                .idempotency_key("b2"),
            stead::client::Message::new("inbox-a", &3)
                .unwrap()
                .idempotency_key("b3"),
        ]
    };
    client.send_bulk(batch()).await.unwrap();
    client.send_bulk(batch()).await.unwrap();
    let ids: Vec<String> = mail(&db, "inbox-b")
        .await
        .into_iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(ids, ["b1::inbox-b", "b2::inbox-b"]);
    assert_eq!(mail(&db, "inbox-a").await.len(), 3);

    // Refusals: a repeated key in one batch, a missing destination (nothing is written).
    let twice = [
        stead::client::Message::new("inbox-a", &1)
            .unwrap()
            .idempotency_key("same"),
        stead::client::Message::new("inbox-b", &1)
            .unwrap()
            .idempotency_key("same"),
    ];
    let refused = client.send_bulk(twice).await.unwrap_err();
    assert!(
        matches!(refused, stead::Error::InvalidArgument(_)),
        "{refused}"
    );
    let lost = [
        stead::client::Message::new("inbox-a", &1)
            .unwrap()
            .idempotency_key("x"),
        stead::client::Message::new("nobody", &1).unwrap(),
    ];
    let missing = client.send_bulk(lost).await.unwrap_err();
    assert!(
        matches!(&missing, stead::Error::NotFound(n) if n.contains("nobody")),
        "{missing}"
    );
    assert_eq!(mail(&db, "inbox-a").await.len(), 3);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The Python app's name, and the queue it serves.
const PY_APP: &str = "pyapp";
const PY_QUEUE: &str = "py-work";

/// An unnamed stead (runtime and client) owns its rows: a DBOS app on the same database leaves
/// its queue and its work alone, and a row written with no owner becomes stead's when stead
/// runs it.
#[tokio::test]
async fn an_unnamed_stead_keeps_its_work_from_a_dbos_app() {
    require_dbos!();
    let db = TestDb::new().await;
    let unnamed = || {
        common::builder(&db)
            .queue(Queue::new("stead-q").polling_interval(Duration::from_millis(100)))
            .workflow("quick", quick)
    };
    // Declares its queue and version, then stops: only the DBOS app runs meanwhile.
    unnamed()
        .launch()
        .await
        .unwrap()
        .shutdown(Duration::from_secs(5))
        .await
        .unwrap();
    let client = stead::Client::connect(&db.url).await.unwrap();
    client
        .enqueue("stead-q", "quick", (), WorkflowOptions::with_id("mine"))
        .await
        .unwrap();
    let py = common::dbos_py::PyApp::launch(&db.url, PY_APP, PY_QUEUE).await;
    // Several of the app's polling intervals (0.1 s, and DBOS's 1 s queue refresh).
    tokio::time::sleep(Duration::from_secs(4)).await;
    py.stop().await;
    let pool = db.pool().await;
    let row = |id: &str| {
        format!(
            "SELECT status || ' ' || COALESCE(executor_id, '-') || ' ' || \
             COALESCE(application_name, '-') FROM dbos.workflow_status WHERE workflow_uuid = '{id}'"
        )
    };
    assert_eq!(
        common::scalar(&pool, &row("mine")).await.as_deref(),
        Some("ENQUEUED - stead"),
        "the DBOS app left stead's work alone"
    );

    // Another writer's unowned row, run by stead, is stead's from then on.
    sqlx::query("SELECT dbos.enqueue_workflow('quick', 'stead-q', workflow_id => 'unowned')")
        .execute(&pool)
        .await
        .unwrap();
    let rt = unnamed().launch().await.unwrap();
    for id in ["mine", "unowned"] {
        common::within(rt.client().handle(id).result::<()>())
            .await
            .unwrap();
        let got = common::scalar(&pool, &row(id)).await;
        assert_eq!(got.as_deref(), Some("SUCCESS test-executor stead"), "{id}");
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[derive(Debug, serde::Deserialize, PartialEq)]
struct PySum {
    sum: i64,
    by: String,
}

/// Python's `add(a, b)`, declared here with its real signature; nothing registers it.
const PY_ADD: stead::Workflow<stead::workflow::Args, PySum> = stead::Workflow::new("add");

/// Orchestrates Python workflows as durable children: a typed one with two positional
/// arguments, one taking none, one with a named argument.
async fn orchestrate(ctx: Context, _: ()) -> stead::Result<Value> {
    let on_py = || WorkflowOptions::default().app_name(PY_APP);
    let sum = ctx
        .enqueue_child(
            PY_QUEUE,
            PY_ADD,
            stead::workflow::Args::new().arg(2).arg(3),
            on_py(),
        )
        .await?;
    let nothing = ctx.enqueue_child(PY_QUEUE, "noargs", (), on_py()).await?;
    let greeting = stead::workflow::Args::new()
        .arg("Ada")
        .named("punctuation", "!");
    let greet = ctx
        .enqueue_child(PY_QUEUE, "greet", greeting, on_py())
        .await?;
    let sum: PySum = sum.result().await?;
    let nothing: String = nothing.result().await?;
    let greet: String = greet.result().await?;
    Ok(json!([sum.sum, sum.by, nothing, greet]))
}

/// stead calls Python workflows with their real signatures, from a client and as durable
/// children of a stead workflow, though nothing here implements them.
#[tokio::test]
async fn stead_calls_python_workflows_with_their_real_signatures() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = builder(&db)
        .workflow("orchestrate", orchestrate)
        .launch()
        .await
        .unwrap();
    let py = common::dbos_py::PyApp::launch(&db.url, PY_APP, PY_QUEUE).await;

    // From a client acting for the Python app.
    let client = common::client(&db, PY_APP).await;
    let args = stead::workflow::Args::new().arg(40).arg(2);
    let h = client
        .enqueue(
            PY_QUEUE,
            PY_ADD,
            args,
            WorkflowOptions::with_id("client-add"),
        )
        .await
        .unwrap();
    let sum = common::within(h.result()).await.unwrap();
    assert_eq!(
        sum,
        PySum {
            sum: 42,
            by: "python".into()
        }
    );
    let h = client
        .enqueue(
            PY_QUEUE,
            "noargs",
            stead::workflow::Args::new(),
            WorkflowOptions::default(),
        )
        .await
        .unwrap();
    let got: String = common::within(h.result()).await.unwrap();
    assert_eq!(got, "called with nothing");

    // As durable children, enqueued by name for the Python app.
    let h = rt
        .start("orchestrate", (), WorkflowOptions::with_id("orchestra"))
        .await
        .unwrap();
    let got: Value = common::within(h.result()).await.unwrap();
    assert_eq!(
        got,
        json!([5, "python", "called with nothing", "Hello, Ada!"])
    );
    let calls = common::scalar(
        &db.pool().await,
        "SELECT string_agg(function_name || '=' || COALESCE(child_workflow_id, '-'), ',' \
           ORDER BY function_id) FROM dbos.operation_outputs WHERE workflow_uuid = 'orchestra'",
    )
    .await;
    assert_eq!(
        calls.as_deref(),
        Some(
            "add=orchestra-1,noargs=orchestra-2,greet=orchestra-3,\
             DBOS.getResult=orchestra-1,DBOS.getResult=orchestra-2,DBOS.getResult=orchestra-3"
        )
    );
    let owner = common::scalar(
        &db.pool().await,
        "SELECT string_agg(DISTINCT application_name || '/' || executor_id, ',') \
         FROM dbos.workflow_status WHERE parent_workflow_id = 'orchestra'",
    )
    .await;
    assert_eq!(owner.as_deref(), Some("pyapp/py-pyapp"));
    py.stop().await;
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

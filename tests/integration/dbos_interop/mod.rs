//! Interoperability with the real DBOS Transact 3.4 (PyPI `dbos`, installed by `.ci/test-deps`;
//! skipped without it, see `common::dbos_py`): databases migrated by either side, work
//! enqueued by the Python client, DBOS's CLI reading stead's workflows, messages and events
//! across the two, paused workflows as DBOS's tools read them. DBOS's default formats, against
//! real processes with their default settings: Python's pickle (`py_defaults`) and TypeScript's
//! SuperJSON (`ts_defaults`, npm `@dbos-inc/dbos-sdk`, see `common::dbos_ts`).

mod py_defaults;
mod ts_defaults;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::PgPool;
use stead::{error::PortableError, Context, Error, Queue, Runtime, WorkflowOptions};

use crate::common;
use crate::common::catalog::{assert_same, migration_rows, snapshot, user_schemas};
use crate::common::dbos_py::{
    dbos_cli_async, dbos_migrate, dbos_workflow_cli, listed_entry, py_client,
};
use crate::common::TestDb;

/// The application name stead runs as and the Python client acts for.
const APP: &str = "interop";
/// The queue the Python client enqueues on.
const QUEUE: &str = "py";

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Sum {
    sum: i64,
    by: String,
}

/// Two positional arguments from Python arrive as a tuple.
async fn add(ctx: Context, (a, b): (i64, i64)) -> stead::Result<Sum> {
    let sum = ctx.step("add", || async move { Ok(a + b) }).await?;
    Ok(Sum {
        sum,
        by: "stead".into(),
    })
}

#[derive(Serialize, Deserialize)]
struct Person {
    name: String,
}

/// Keyword arguments from Python arrive as an object.
async fn greet(_: Context, who: Person) -> stead::Result<String> {
    Ok(format!("Hello, {}", who.name))
}

#[derive(Serialize, Deserialize)]
struct Order {
    item: String,
    qty: u32,
}

/// Two named steps around a sleep, and an event: what `dbos workflow steps` lists.
async fn order(ctx: Context, order: Order) -> stead::Result<Value> {
    let qty = order.qty;
    let hold = ctx
        .step("reserve", || async move { Ok(format!("held-{qty}")) })
        .await?;
    ctx.sleep(Duration::from_millis(1)).await?;
    let total = ctx
        .step("charge", || async move { Ok(f64::from(qty) * 1.5) })
        .await?;
    ctx.set_event("state", &"charged").await?;
    Ok(json!({"item": order.item, "hold": hold, "total": total}))
}

async fn refuse(_: Context, _: ()) -> Result<(), PortableError> {
    Err(PortableError::new("OutOfStock", "no pears left"))
}

/// Answers a message from Python and one sent by SQL with an event.
async fn conversation(ctx: Context, _: ()) -> stead::Result<String> {
    let wait = Duration::from_secs(20);
    let question: Option<Value> = ctx.recv(Some("question"), wait).await?;
    let by_sql: Option<Value> = ctx.recv(Some("sql"), wait).await?;
    let reply = format!(
        "got {} and {}",
        question.unwrap_or_default(),
        by_sql.unwrap_or_default()
    );
    ctx.set_event("reply", &reply).await?;
    Ok(reply)
}

/// Receives one message and returns it.
async fn inbox(ctx: Context, _: ()) -> stead::Result<Option<Value>> {
    ctx.recv(Some("in"), Duration::from_secs(20)).await
}

/// Continues as new twice: a chain of three runs, the last answering 20.
async fn relay(ctx: Context, n: u32) -> stead::Result<u32> {
    ctx.step("work", || async move { Ok(n) }).await?;
    if n < 2 {
        return ctx.continue_as_new(n + 1).await;
    }
    Ok(n * 10)
}

async fn launch(db: &TestDb) -> Runtime {
    common::builder(db)
        .app_name(APP)
        // DBOS clients do not announce their enqueues: the queue finds them by polling.
        .queue(Queue::new(QUEUE).polling_interval(Duration::from_millis(100)))
        .workflow("add", add)
        .workflow("greet", greet)
        .workflow("order", order)
        .workflow("refuse", refuse)
        .workflow("conversation", conversation)
        .workflow("inbox", inbox)
        .workflow("relay", relay)
        .workflow("echo_py", py_defaults::echo)
        .workflow("watch_py", py_defaults::watch)
        .workflow("echo_js", ts_defaults::echo)
        .workflow("reply", ts_defaults::reply)
        .launch()
        .await
        .unwrap()
}

/// The `ok` answer of the Python client, failing the test on its `error`.
fn ok(answer: Value) -> Value {
    match answer {
        Value::Object(mut m) if m.contains_key("ok") => m.remove("ok").unwrap_or_default(),
        other => panic!("the Python client failed: {other}"),
    }
}

async fn status_row(pool: &PgPool, id: &str) -> Value {
    let text: String = sqlx::query_scalar(
        "SELECT to_jsonb(w)::text FROM dbos.workflow_status w WHERE workflow_uuid = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("status row of {id}: {e}"));
    serde_json::from_str(&text).expect("to_jsonb gives JSON")
}

#[tokio::test]
async fn a_database_dbos_migrated_runs_stead_workflows_unchanged() {
    require_dbos!();
    let db = TestDb::new().await;
    dbos_cli_async().await;
    dbos_migrate(&db.url);
    let pool = db.pool().await;
    let (before, schemas) = (snapshot(&pool, "dbos").await, user_schemas(&pool).await);

    let rt = launch(&db).await;
    let h = rt
        .enqueue(QUEUE, "add", (2, 3), WorkflowOptions::with_id("on-dbos"))
        .await
        .unwrap();
    let sum: Sum = common::within(h.result()).await.unwrap();
    assert_eq!(sum.sum, 5);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    assert_same(
        &before,
        &snapshot(&pool, "dbos").await,
        "DBOS's schema after a stead run",
    );
    assert_eq!(user_schemas(&pool).await, schemas, "no schema added");
    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);
}

#[tokio::test]
async fn dbos_migrate_takes_a_stead_database_in_use_as_up_to_date() {
    require_dbos!();
    let db = TestDb::new().await;
    dbos_cli_async().await;
    let rt = launch(&db).await;
    let h = rt
        .start("add", (20, 22), WorkflowOptions::with_id("before-dbos"))
        .await
        .unwrap();
    common::within(h.result::<Sum>()).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let pool = db.pool().await;
    let (before, row) = (
        snapshot(&pool, "dbos").await,
        status_row(&pool, "before-dbos").await,
    );

    dbos_migrate(&db.url);
    assert_same(
        &before,
        &snapshot(&pool, "dbos").await,
        "stead's schema after dbos migrate",
    );
    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);
    assert_eq!(
        status_row(&pool, "before-dbos").await,
        row,
        "rows untouched"
    );

    // And stead still reads what it wrote.
    let client = stead::Client::connect(&db.url).await.unwrap();
    let sum: Sum = client.handle("before-dbos").result().await.unwrap();
    assert_eq!(sum.sum, 42);
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_workflow_enqueued_by_the_python_client_runs_on_stead() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;

    let positional = json!({"workflow": "add", "queue": QUEUE, "id": "py-add",
                            "args": [2, 3], "wait": true});
    let got = ok(py_client(&db.url, APP, "enqueue", positional).await);
    assert_eq!(got, json!({"sum": 5, "by": "stead"}));

    let named = json!({"workflow": "greet", "queue": QUEUE, "id": "py-greet",
                       "kwargs": {"name": "Ada"}, "wait": true});
    let got = ok(py_client(&db.url, APP, "enqueue", named).await);
    assert_eq!(got, json!("Hello, Ada"));

    let row = status_row(&db.pool().await, "py-add").await;
    for (column, want) in [
        ("status", json!("SUCCESS")),
        ("serialization", json!("portable_json")),
        ("application_name", json!(APP)),
        ("executor_id", json!("test-executor")),
        ("queue_name", json!(QUEUE)),
    ] {
        assert_eq!(row[column], want, "{column} of {row}");
    }
    // Stead's own client reads the same outcome.
    assert_eq!(
        rt.client()
            .handle("py-add")
            .result::<Sum>()
            .await
            .unwrap()
            .sum,
        5
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn the_dbos_cli_shows_stead_workflows_readably() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let input = Order {
        item: "apples".into(),
        qty: 3,
    };
    let done = rt
        .start("order", &input, WorkflowOptions::with_id("cli-order"))
        .await
        .unwrap();
    let output: Value = common::within(done.result()).await.unwrap();
    let failed = rt
        .start("refuse", (), WorkflowOptions::with_id("cli-refuse"))
        .await
        .unwrap();
    assert!(common::within(failed.result::<()>()).await.is_err());
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    let want_input = json!({"args": [{"item": "apples", "qty": 3}], "kwargs": {}});
    let list = dbos_workflow_cli(&db.url, &["list"]).await;
    let listed = listed_entry(&list, "cli-order");
    assert_eq!(
        (
            &listed["name"],
            &listed["status"],
            &listed["application_name"]
        ),
        (&json!("order"), &json!("SUCCESS"), &json!(APP)),
        "{listed}"
    );
    assert_eq!(listed["input"], want_input, "{listed}");
    assert_eq!(listed["output"], output, "{listed}");
    assert_eq!(output["total"], json!(4.5));
    let refused = listed_entry(&list, "cli-refuse");
    assert_eq!(refused["status"], "ERROR", "{refused}");
    assert_eq!(refused["error"], "no pears left", "{refused}");

    let got = dbos_workflow_cli(&db.url, &["get", "cli-order"]).await;
    assert_eq!(
        (&got["workflow_id"], &got["input"], &got["output"]),
        (&json!("cli-order"), &want_input, &output),
        "{got}"
    );

    let steps = dbos_workflow_cli(&db.url, &["steps", "cli-order"]).await;
    let steps: Vec<(i64, String, Value)> = steps
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {steps}"))
        .iter()
        .map(|s| {
            let name = s["function_name"].as_str().unwrap_or_default().to_owned();
            (
                s["function_id"].as_i64().unwrap_or(-1),
                name,
                s["output"].clone(),
            )
        })
        .collect();
    let names: Vec<(i64, &str)> = steps.iter().map(|(i, n, _)| (*i, n.as_str())).collect();
    assert_eq!(
        names,
        [
            (1, "reserve"),
            (2, "DBOS.sleep"),
            (3, "charge"),
            (4, "DBOS.setEvent")
        ]
    );
    assert_eq!(steps[0].2, json!("held-3"));
    assert!(
        steps[1].2.is_f64(),
        "wake-up time in epoch seconds: {:?}",
        steps[1]
    );
    assert_eq!(steps[2].2, json!(4.5));
}

#[tokio::test]
async fn messages_and_events_cross_between_python_and_stead() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let h = rt
        .start("conversation", (), WorkflowOptions::with_id("talk"))
        .await
        .unwrap();
    let send = json!({"to": "talk", "topic": "question", "message": {"q": "why?"}});
    assert_eq!(ok(py_client(&db.url, APP, "send", send).await), Value::Null);
    sqlx::query(r#"SELECT dbos.send_message('talk', '"by sql"'::json, 'sql')"#)
        .execute(&db.pool().await)
        .await
        .unwrap();

    let event = json!({"id": "talk", "key": "reply", "timeout": 20});
    let reply = ok(py_client(&db.url, APP, "get_event", event).await);
    let want = r#"got {"q":"why?"} and "by sql""#;
    assert_eq!(reply, json!(want));
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), want);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The error a stead handle reports for `id`, which must have failed.
async fn failure(rt: &Runtime, id: &str) -> PortableError {
    match common::within(rt.client().handle(id).result::<Value>()).await {
        Err(Error::WorkflowFailed { error, .. }) => *error,
        other => panic!("{id}: expected a failure, got {other:?}"),
    }
}

/// `stead::workflow::Args` writes the envelope a Python caller writes: a stead workflow reads both alike.
#[tokio::test]
async fn args_from_stead_read_like_a_python_callers() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let args = stead::workflow::Args::new().arg(2).arg(3);
    let h = rt
        .start("add", args, WorkflowOptions::with_id("rust-args"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<Sum>()).await.unwrap().sum, 5);
    let named = stead::workflow::Args::new().named("name", "Ada");
    let h = rt
        .enqueue(
            QUEUE,
            "greet",
            named,
            WorkflowOptions::with_id("rust-named"),
        )
        .await
        .unwrap();
    assert_eq!(
        common::within(h.result::<String>()).await.unwrap(),
        "Hello, Ada"
    );
    // A registered workflow is checked against what it will receive.
    let wrong = rt.start(
        "add",
        stead::workflow::Args::new().arg("two"),
        WorkflowOptions::default(),
    );
    assert!(matches!(wrong.await, Err(Error::Input { .. })));
    let inputs = common::scalar(
        &db.pool().await,
        "SELECT inputs FROM dbos.workflow_status WHERE workflow_uuid = 'rust-args'",
    )
    .await;
    let inputs: Value = serde_json::from_str(&inputs.unwrap_or_default()).unwrap();
    assert_eq!(inputs, json!({"positionalArgs": [2, 3], "namedArgs": {}}));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn dbos_tools_read_a_paused_workflow_by_its_dbos_status() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let pool = db.pool().await;
    rt.enqueue(QUEUE, "inbox", (), WorkflowOptions::with_id("held"))
        .await
        .unwrap();
    common::wait_status(&pool, "held", "PENDING").await;
    // Paused inside its wait: the run stops and its row goes back on its queue.
    assert!(rt.client().pause_workflow("held").await.unwrap());
    common::wait_status(&pool, "held", "ENQUEUED").await;

    let listed = py_client(&db.url, APP, "statuses", json!({"workflow_ids": ["held"]})).await;
    assert_eq!(
        ok(listed),
        json!([{"id": "held", "status": "ENQUEUED", "queue": QUEUE}]),
        "the DBOS client lists it by its DBOS status"
    );
    let got = dbos_workflow_cli(&db.url, &["get", "held"]).await;
    assert_eq!(got["status"], "ENQUEUED", "{got}");
    let all = dbos_workflow_cli(&db.url, &["list"]).await;
    assert_eq!(listed_entry(&all, "held")["status"], "ENQUEUED", "{all}");

    // Resumed, it continues on stead and finishes.
    let h = rt.client().resume("held").await.unwrap();
    rt.client()
        .send("held", &json!("go"), Some("in"))
        .await
        .unwrap();
    let got: Option<Value> = common::within(h.result()).await.unwrap();
    assert_eq!(got, Some(json!("go")));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A continued chain is, to DBOS, finished workflows and their successors: its client lists
/// and reads each run, the continued ones' result naming the next run, and its CLI shows them.
#[tokio::test]
async fn a_dbos_client_reads_a_continued_chain_as_ordinary_workflows() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let h = rt
        .start("relay", 0u32, WorkflowOptions::with_id("can"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 20);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    let ids = ok(py_client(&db.url, APP, "list", json!({})).await);
    for id in ["can", "can-can-1", "can-can-2"] {
        assert!(
            ids.as_array().unwrap().contains(&json!(id)),
            "{id} in {ids}"
        );
    }
    let first = ok(py_client(&db.url, APP, "result", json!({"id": "can"})).await);
    assert_eq!(first, json!({"stead.continuedAs": "can-can-1"}));
    let last = ok(py_client(&db.url, APP, "result", json!({"id": "can-can-2"})).await);
    assert_eq!(last, json!(20));

    let list = dbos_workflow_cli(&db.url, &["list"]).await;
    for id in ["can", "can-can-1", "can-can-2"] {
        let listed = listed_entry(&list, id);
        assert_eq!(
            (&listed["name"], &listed["status"]),
            (&json!("relay"), &json!("SUCCESS")),
            "{listed}"
        );
    }
    let got = dbos_workflow_cli(&db.url, &["get", "can-can-1"]).await;
    assert_eq!(got["input"], json!({"args": [1], "kwargs": {}}), "{got}");
    assert_eq!(
        got["output"],
        json!({"stead.continuedAs": "can-can-2"}),
        "{got}"
    );
}

//! DBOS Python with its default settings (pickle, `py_pickle`): its default client enqueues to
//! stead and reads the result, and sends stead's workflows messages; a stead workflow reads
//! inputs of every plain type; stead reads a default app's outputs, events, streams, steps and
//! errors, and the default app reads the message stead sends. A pickle naming anything else is
//! refused by name and never run.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stead::error::Refusal;
use stead::{Context, Error, WorkflowOptions};

use super::{failure, launch, ok, status_row, APP, QUEUE};
use crate::common;
use crate::common::dbos_py::{dbos_workflow_cli, py_client, PyApp};
use crate::common::TestDb;

/// Every type DBOS Python apps commonly pass, as a stead workflow declares it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct Everything {
    none: Option<i64>,
    flag: bool,
    n: i64,
    /// An int past 64 bits arrives as its decimal text.
    big: String,
    f: f64,
    s: String,
    raw: Vec<u8>,
    items: Vec<Value>,
    pair: (i64, String),
    m: BTreeMap<String, Value>,
    /// A dict with int keys.
    keys: BTreeMap<String, String>,
    tags: Vec<i64>,
    frozen: Vec<String>,
    at: String,
    naive: String,
    day: String,
    price: String,
    id: String,
}

/// Returns its input: what stead read is what the caller gets back.
pub(super) async fn echo(_: Context, all: Everything) -> stead::Result<Everything> {
    Ok(all)
}

/// Reads event "ev" of workflow `id` (a durable call, recorded as portable JSON).
pub(super) async fn watch(ctx: Context, id: String) -> stead::Result<Option<Value>> {
    ctx.get_event(&id, "ev", Duration::from_secs(30)).await
}

/// The Python client's tagged arguments (tests/py/client.py, `typed`) for [`Everything`].
fn everything_in_python() -> Value {
    json!({
        "none": null, "flag": true, "n": 7, "big": {"$py": "int", "text": "1180591620717411303424"},
        "f": 1.5, "s": "héllo ✓", "raw": {"$py": "bytes", "hex": "00ff61"},
        "items": [1, "a", null, 2.5], "pair": {"$py": "tuple", "items": [1, "a"]},
        "m": {"k": {"nested": [true]}},
        "keys": {"$py": "intkeys", "pairs": [[1, "one"], [-2, "minus two"]]},
        "tags": {"$py": "set", "items": [3, 1, 2]},
        "frozen": {"$py": "frozenset", "items": ["only"]},
        "at": {"$py": "datetime", "iso": "2025-06-15T12:30:00.123456+02:00"},
        "naive": {"$py": "datetime", "iso": "2025-06-15T10:30:00"},
        "day": {"$py": "date", "iso": "2025-06-15"},
        "price": {"$py": "decimal", "text": "12.50"},
        "id": {"$py": "uuid", "text": "6F1E7C1A-3B5D-4C2E-9A8B-0123456789AB"},
    })
}

/// What stead reads from [`everything_in_python`], as JSON.
fn everything_read() -> Value {
    json!({
        "none": null, "flag": true, "n": 7, "big": "1180591620717411303424", "f": 1.5,
        "s": "héllo ✓", "raw": [0, 255, 97], "items": [1, "a", null, 2.5], "pair": [1, "a"],
        "m": {"k": {"nested": [true]}}, "keys": {"1": "one", "-2": "minus two"},
        "tags": [1, 2, 3], "frozen": ["only"], "at": "2025-06-15T10:30:00.123456Z",
        "naive": "2025-06-15T10:30:00.000Z", "day": "2025-06-15", "price": "12.50",
        "id": "6f1e7c1a-3b5d-4c2e-9a8b-0123456789ab",
    })
}

#[tokio::test]
async fn a_default_python_client_enqueues_every_plain_type_and_reads_the_result() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;

    let all = json!({"workflow": "echo_py", "queue": QUEUE, "id": "py-all", "portable": false,
                     "args": [everything_in_python()], "wait": true});
    let got = ok(py_client(&db.url, APP, "enqueue", all).await);
    assert_eq!(got, everything_read(), "the default client's get_result");
    let typed: Everything = rt.client().handle("py-all").result().await.unwrap();
    assert_eq!(typed.pair, (1, "a".to_owned()));

    // Several positional arguments, and named ones only, pickled.
    let positional = json!({"workflow": "add", "queue": QUEUE, "id": "py-add",
                            "args": [2, 3], "portable": false, "wait": true});
    let got = ok(py_client(&db.url, APP, "enqueue", positional).await);
    assert_eq!(got, json!({"sum": 5, "by": "stead"}));
    let named = json!({"workflow": "greet", "queue": QUEUE, "id": "py-greet",
                       "kwargs": {"name": "Ada"}, "portable": false, "wait": true});
    let got = ok(py_client(&db.url, APP, "enqueue", named).await);
    assert_eq!(got, json!("Hello, Ada"));

    // The row was adopted: portable from then on, the inputs as stead read them.
    let pool = db.pool().await;
    let row = status_row(&pool, "py-add").await;
    assert_eq!(
        (&row["status"], &row["serialization"]),
        (&json!("SUCCESS"), &json!("portable_json")),
        "{row}"
    );
    let inputs = common::scalar(
        &pool,
        "SELECT inputs FROM dbos.workflow_input WHERE workflow_uuid = 'py-add'",
    )
    .await;
    assert_eq!(
        inputs.as_deref(),
        Some(r#"{"positionalArgs":[2,3],"namedArgs":{}}"#)
    );
    let shown = dbos_workflow_cli(&db.url, &["get", "py-all"]).await;
    assert_eq!(
        shown["input"],
        json!({"args": [everything_read()], "kwargs": {}}),
        "{shown}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_default_python_client_sends_stead_a_pickled_message() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let h = rt
        .start("inbox", (), WorkflowOptions::with_id("py-inbox"))
        .await
        .unwrap();
    let message = json!({"at": {"$py": "datetime", "iso": "2025-06-15T10:30:00"},
                         "n": {"$py": "int", "text": "-18446744073709551617"},
                         "tags": {"$py": "set", "items": [1]}, "who": "py"});
    let send = json!({"to": "py-inbox", "topic": "in", "message": message, "portable": false});
    assert_eq!(ok(py_client(&db.url, APP, "send", send).await), Value::Null);
    let want = json!({"at": "2025-06-15T10:30:00.000Z", "n": "-18446744073709551617",
                      "tags": [1], "who": "py"});
    let got: Option<Value> = common::within(h.result()).await.unwrap();
    assert_eq!(got, Some(want.clone()));
    let read = ok(py_client(&db.url, APP, "result", json!({"id": "py-inbox"})).await);
    assert_eq!(read, want, "the default client reads stead's result");

    // Recorded as it came (DBOS reads its own format there) and replayed from that record.
    let pool = db.pool().await;
    let format = common::scalar(
        &pool,
        "SELECT serialization FROM dbos.operation_outputs \
         WHERE workflow_uuid = 'py-inbox' AND function_name = 'DBOS.recv'",
    )
    .await;
    assert_eq!(format.as_deref(), Some("py_pickle"));
    let fork = rt
        .client()
        .fork(
            "py-inbox",
            3,
            stead::client::ForkOptions::new().id("py-inbox-again"),
        )
        .await
        .unwrap();
    let again: Option<Value> = common::within(fork.result()).await.unwrap();
    assert_eq!(again, Some(want), "the fork replays the pickled message");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A pickle of anything but plain data fails its workflow, naming what it asked for; nothing
/// in it runs, and the queue goes on.
#[tokio::test]
async fn hostile_pickles_are_refused_by_name_and_never_run() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let marker = std::env::temp_dir().join(format!("stead-pwned-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let cases = [
        (
            "py-point",
            json!({"$py": "point", "x": 1, "y": 2}),
            "__main__",
            "Point",
        ),
        (
            "py-system",
            json!({"$py": "system", "cmd": format!("touch {}", marker.display())}),
            "posix",
            "system",
        ),
    ];
    for (id, arg, _, _) in &cases {
        let enqueue = json!({"workflow": "echo_py", "queue": QUEUE, "id": id,
                             "args": [arg], "portable": false});
        assert_eq!(ok(py_client(&db.url, APP, "enqueue", enqueue).await), *id);
    }
    for (id, _, module, name) in cases {
        let error = failure(&rt, id).await;
        assert_eq!(error.name, "PayloadRefused", "{error}");
        let want = format!(
            "cannot decode the workflow's input stored as \"py_pickle\": it names \
             {module}.{name}, which stead never imports or calls"
        );
        assert_eq!(error.message, want);
        // The refusal is portable JSON, and the row says so: the default client reads it.
        let row = status_row(&db.pool().await, id).await;
        assert_eq!(row["serialization"], "portable_json", "{row}");
        let answer = py_client(&db.url, APP, "result", json!({"id": id})).await;
        assert_eq!(
            (&answer["error"]["name"], &answer["error"]["message"]),
            (&json!("PayloadRefused"), &json!(want)),
            "{answer}"
        );
    }
    assert!(!marker.exists(), "the pickled os.system ran");

    // A message holding NaN fails only the workflow receiving it, typed.
    rt.start("inbox", (), WorkflowOptions::with_id("py-nan"))
        .await
        .unwrap();
    let nan = json!({"to": "py-nan", "topic": "in", "portable": false,
                     "message": {"x": {"$py": "float", "text": "nan"}}});
    ok(py_client(&db.url, APP, "send", nan).await);
    let handle = rt.client().handle("py-nan");
    match common::within(handle.result::<Value>()).await {
        Err(Error::WorkflowFailed { error, .. }) => {
            assert!(error.message.contains("non-finite number nan"), "{error}")
        }
        other => panic!("{other:?}"),
    }

    let after = json!({"workflow": "add", "queue": QUEUE, "id": "after-hostile",
                       "args": [4, 5], "portable": false, "wait": true});
    let got = ok(py_client(&db.url, APP, "enqueue", after).await);
    assert_eq!(got["sum"], 9, "the queue keeps running: {got}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The Python app's name and queue, beside stead's.
const PY_APP: &str = "py-defaults";
const PY_QUEUE: &str = "pyq";

#[tokio::test]
async fn stead_reads_a_default_python_apps_payloads_and_the_app_reads_steads() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let app = PyApp::launch_script("default_app.py", &db.url, PY_APP, PY_QUEUE).await;
    let produce = json!({"workflow": "produce", "queue": PY_QUEUE, "id": "py-produce",
                         "portable": false});
    ok(py_client(&db.url, PY_APP, "enqueue", produce).await);

    let client = rt.client();
    let ev: Option<Value> = client
        .get_event("py-produce", "ev", Duration::from_secs(30))
        .await
        .unwrap();
    let want_ev = json!({"at": "2025-06-15T10:30:00.123456Z", "price": "12.50",
                         "id": "6f1e7c1a-3b5d-4c2e-9a8b-0123456789ab", "tags": ["x"],
                         "raw": [0, 255]});
    assert_eq!(ev, Some(want_ev.clone()));
    // A stead workflow reads it too, and records it as portable JSON.
    let watched = rt
        .start(
            "watch_py",
            "py-produce".to_owned(),
            WorkflowOptions::with_id("py-watch"),
        )
        .await
        .unwrap();
    let seen: Option<Value> = common::within(watched.result()).await.unwrap();
    assert_eq!(seen, Some(want_ev));
    // A class instance is refused, typed, naming the class.
    let bad = client
        .get_event::<Value>("py-produce", "bad", Duration::from_secs(5))
        .await;
    match bad {
        Err(Error::PayloadRefused {
            refusal: Refusal::UnsupportedGlobal { module, name },
            format,
            ..
        }) => assert_eq!(
            (module, name, format),
            ("__main__".into(), "Point".into(), "py_pickle".into())
        ),
        other => panic!("{other:?}"),
    }
    let recorded = common::scalar(
        &db.pool().await,
        "SELECT serialization FROM dbos.operation_outputs WHERE workflow_uuid = 'py-watch' \
         AND function_name = 'DBOS.getEvent'",
    )
    .await;
    assert_eq!(recorded.as_deref(), Some("portable_json"));

    let stream: Vec<Value> = client
        .read_stream::<Value>("py-produce", "st")
        .map(|v| v.unwrap().value)
        .collect()
        .await;
    assert_eq!(
        stream,
        [
            json!({"n": 1, "at": "2025-06-15T10:30:00.123456Z"}),
            json!([2, [3]])
        ]
    );

    // stead's message, in portable JSON, is what the default workflow receives.
    client
        .send("py-produce", &json!({"from": "stead", "n": 3}), Some("in"))
        .await
        .unwrap();
    let result: Value = common::within(client.handle("py-produce").result())
        .await
        .unwrap();
    let stepped = json!({"at": "2025-06-15T10:30:00.123456Z", "big": "1180591620717411303424",
                         "day": "2025-06-15"});
    assert_eq!(
        result,
        json!({"stepped": stepped, "got": {"from": "stead", "n": 3}, "pair": [1, "a"],
               "keys": {"1": "one"}, "none": null})
    );
    let steps = client.steps("py-produce").await.unwrap();
    assert_eq!(steps[0].name, "stepped");
    assert_eq!(steps[0].output, Some(stepped));

    // A raised exception reads as its class and message.
    let fail = json!({"workflow": "fail", "queue": PY_QUEUE, "id": "py-fail",
                      "args": ["bad amount"], "portable": false});
    ok(py_client(&db.url, PY_APP, "enqueue", fail).await);
    match common::within(client.handle("py-fail").result::<Value>()).await {
        Err(Error::WorkflowFailed { error, .. }) => {
            assert_eq!(
                (error.name.as_str(), error.message.as_str()),
                ("ValueError", "bad amount")
            )
        }
        other => panic!("{other:?}"),
    }
    app.stop().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

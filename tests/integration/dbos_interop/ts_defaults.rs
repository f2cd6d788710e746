//! DBOS TypeScript with its default settings (SuperJSON, `js_superjson`; npm
//! `@dbos-inc/dbos-sdk`, installed by `.ci/test-deps`, see `common::dbos_ts`): its default
//! client enqueues to stead and reads the result, sends stead's workflows messages and reads
//! their events; stead reads a default app's outputs, events, streams, steps and errors, and the
//! default app reads the message stead sends. Values SuperJSON cannot make JSON of are refused.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stead::{Context, Error, WorkflowOptions};

use super::{failure, launch, status_row, APP, QUEUE};
use crate::common;
use crate::common::dbos_ts::{ok_answer as ok, ts_client, TsApp};
use crate::common::TestDb;

/// An `Error` as SuperJSON stores it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct ErrorLike {
    name: String,
    message: String,
}

/// What DBOS TypeScript apps commonly pass, as a stead workflow declares it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct JsThings {
    at: String,
    big: String,
    m: BTreeMap<String, Value>,
    s: Vec<i64>,
    /// `undefined`: absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    u: Option<i64>,
    re: String,
    e: ErrorLike,
    buf: Vec<u8>,
    nested: Vec<BTreeMap<String, String>>,
}

/// Three positional arguments arrive as a tuple.
pub(super) async fn echo(
    _: Context,
    (things, n, s): (JsThings, i64, String),
) -> stead::Result<Value> {
    Ok(json!({"things": things, "n": n, "s": s}))
}

/// Receives one message, publishes it as event "reply" and returns it.
pub(super) async fn reply(ctx: Context, _: ()) -> stead::Result<Option<Value>> {
    let got: Option<Value> = ctx.recv(Some("in"), Duration::from_secs(30)).await?;
    ctx.set_event("reply", &got).await?;
    Ok(got)
}

/// The client's tagged arguments (tests/ts/typed.js) for [`echo`].
fn things_in_js() -> Value {
    json!({
        "at": {"$js": "Date", "iso": "2025-06-15T10:30:00.123Z"},
        "big": {"$js": "BigInt", "text": "-12345678901234567890"},
        "m": {"$js": "Map", "entries": [["k", {"$js": "Set", "items": [1]}], [2, "two"]]},
        "s": {"$js": "Set", "items": [3, 1, 2]},
        "u": {"$js": "undefined"},
        "re": {"$js": "RegExp", "source": "ab+c", "flags": "gi"},
        "e": {"$js": "Error", "name": "TypeError", "message": "bad type"},
        "buf": {"$js": "Buffer", "hex": "00ff61"},
        "nested": [{"d": {"$js": "Date", "iso": "2025-01-01T00:00:00Z"}}],
    })
}

fn things_read() -> Value {
    json!({
        "at": "2025-06-15T10:30:00.123Z", "big": "-12345678901234567890",
        "m": {"k": [1], "2": "two"}, "s": [3, 1, 2], "re": "/ab+c/gi",
        "e": {"name": "TypeError", "message": "bad type"}, "buf": [0, 255, 97],
        "nested": [{"d": "2025-01-01T00:00:00.000Z"}],
    })
}

#[tokio::test]
async fn a_default_typescript_client_enqueues_to_stead_and_reads_the_result() {
    require_dbos_ts!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let enqueue = json!({"workflow": "echo_js", "queue": QUEUE, "id": "ts-echo",
                         "args": [things_in_js(), 7, "x"], "wait": true});
    let got = ok(ts_client(&db.url, APP, "enqueue", enqueue).await);
    assert_eq!(got, json!({"things": things_read(), "n": 7, "s": "x"}));
    let row = status_row(&db.pool().await, "ts-echo").await;
    assert_eq!(
        (&row["status"], &row["serialization"]),
        (&json!("SUCCESS"), &json!("portable_json")),
        "{row}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_default_typescript_client_sends_a_message_and_reads_the_event() {
    require_dbos_ts!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    // Enqueued with no arguments (`[]` in SuperJSON): the workflow's `()`.
    let enqueue = json!({"workflow": "reply", "queue": QUEUE, "id": "ts-reply"});
    assert_eq!(
        ok(ts_client(&db.url, APP, "enqueue", enqueue).await),
        "ts-reply"
    );
    let message = json!({"hello": "world", "at": {"$js": "Date", "iso": "2025-06-15T10:30:00Z"},
                         "big": {"$js": "BigInt", "text": "1"}, "gone": {"$js": "undefined"},
                         "m": {"$js": "Map", "entries": [[1, "one"]]}});
    let send = json!({"to": "ts-reply", "topic": "in", "message": message});
    assert_eq!(ok(ts_client(&db.url, APP, "send", send).await), Value::Null);
    let want = json!({"hello": "world", "at": "2025-06-15T10:30:00.000Z", "big": "1",
                      "m": {"1": "one"}});
    let event = json!({"id": "ts-reply", "key": "reply", "timeout": 30});
    assert_eq!(ok(ts_client(&db.url, APP, "get_event", event).await), want);
    assert_eq!(
        ok(ts_client(&db.url, APP, "result", json!({"id": "ts-reply"})).await),
        want
    );
    let got: Option<Value> = rt.client().handle("ts-reply").result().await.unwrap();
    assert_eq!(got, Some(want));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Values with no JSON form fail their workflow, typed; the queue goes on.
#[tokio::test]
async fn superjson_without_a_json_form_is_refused() {
    require_dbos_ts!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let cases = [
        ("ts-nan", json!({"$js": "NaN"}), "the non-finite number NaN"),
        (
            "ts-cycle",
            json!({"$js": "cycle"}),
            "it contains itself (0.self)",
        ),
    ];
    for (id, arg, _) in &cases {
        let enqueue = json!({"workflow": "echo_js", "queue": QUEUE, "id": id,
                             "args": [arg, 1, "x"]});
        assert_eq!(ok(ts_client(&db.url, APP, "enqueue", enqueue).await), *id);
    }
    for (id, _, why) in cases {
        let error = failure(&rt, id).await;
        assert_eq!(error.name, "PayloadRefused", "{error}");
        assert!(
            error
                .message
                .starts_with("cannot decode the workflow's input stored as \"js_superjson\": ")
                && error.message.contains(why),
            "{error}"
        );
        let answer = ts_client(&db.url, APP, "result", json!({"id": id})).await;
        assert_eq!(
            (&answer["error"]["name"], &answer["error"]["message"]),
            (&json!("PayloadRefused"), &json!(error.message)),
            "the default client reads the refusal: {answer}"
        );
    }
    let enqueue = json!({"workflow": "echo_js", "queue": QUEUE, "id": "ts-after",
                         "args": [things_in_js(), 1, "y"], "wait": true});
    let got = ok(ts_client(&db.url, APP, "enqueue", enqueue).await);
    assert_eq!(got["s"], "y", "the queue keeps running: {got}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The TypeScript app's name and queue, beside stead's.
const TS_APP: &str = "ts-defaults";
const TS_QUEUE: &str = "tsq";

#[tokio::test]
async fn stead_reads_a_default_typescript_apps_payloads_and_the_app_reads_steads() {
    require_dbos_ts!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let app = TsApp::launch(&db.url, TS_APP, TS_QUEUE).await;
    let produce = json!({"workflow": "produce", "queue": TS_QUEUE, "id": "ts-produce"});
    ok(ts_client(&db.url, TS_APP, "enqueue", produce).await);

    let client = rt.client();
    let ev: Option<Value> = client
        .get_event("ts-produce", "ev", Duration::from_secs(30))
        .await
        .unwrap();
    let at = "2025-06-15T10:30:00.123Z";
    assert_eq!(
        ev,
        Some(
            json!({"at": at, "big": "12345678901234567890", "m": {"k": 1}, "tags": ["x"],
                    "re": "/ab+c/gi"})
        )
    );
    let stream: Vec<Value> = client
        .read_stream::<Value>("ts-produce", "st")
        .map(|v| v.unwrap().value)
        .collect()
        .await;
    assert_eq!(stream, [json!({"n": 1, "at": at}), json!(["2", null])]);

    client
        .send("ts-produce", &json!({"from": "stead", "n": 3}), Some("in"))
        .await
        .unwrap();
    let result: Value = common::within(client.handle("ts-produce").result())
        .await
        .unwrap();
    let stepped = json!({"at": at, "big": "7"});
    assert_eq!(
        result,
        json!({"stepped": stepped, "got": {"from": "stead", "n": 3}, "big": "1",
               "m": {"1": "one"}, "s": [1, 2], "nested": [{"d": at}]})
    );
    let steps = client.steps("ts-produce").await.unwrap();
    let step = steps.iter().find(|s| s.name == "stepped").expect("listed");
    assert_eq!(step.output, Some(stepped));

    let fail = json!({"workflow": "fail", "queue": TS_QUEUE, "id": "ts-fail", "args": ["boom"]});
    ok(ts_client(&db.url, TS_APP, "enqueue", fail).await);
    match common::within(client.handle("ts-fail").result::<Value>()).await {
        Err(Error::WorkflowFailed { error, .. }) => {
            assert_eq!(
                (error.name.as_str(), error.message.as_str()),
                ("Error", "boom")
            );
            assert_eq!(error.code, Some(json!("E_BOOM")));
        }
        other => panic!("{other:?}"),
    }
    app.stop().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// A direct start of `echo_js` from Rust takes the same tuple the TypeScript caller sends.
#[tokio::test]
async fn a_rust_start_reads_as_a_typescript_callers() {
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let things: JsThings = serde_json::from_value(things_read()).unwrap();
    let h = rt
        .start(
            "echo_js",
            (things, 7, "x"),
            WorkflowOptions::with_id("rust-echo"),
        )
        .await
        .unwrap();
    let got: Value = common::within(h.result()).await.unwrap();
    assert_eq!(got, json!({"things": things_read(), "n": 7, "s": "x"}));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

//! Updates and signal-with-start through the faces an operator uses: the `stead` binary
//! (`workflow update`, `workflow signal-with-start`) and the admin API's POST routes, against a
//! runtime on the same database. The semantics are `updates.rs`'s; this checks the wiring, the
//! output and the errors each face answers.

use std::time::Duration;

use serde_json::{json, Value};
use stead::admin::{self, AdminOptions};
use stead::{Context, Queue, WorkflowOptions};

use crate::cli::stead;
use crate::common;
use crate::common::http;

/// Accepts two `add` updates (refusing negative numbers) and returns their sum.
async fn adder(ctx: Context, _: ()) -> stead::Result<i64> {
    let mut sum = 0;
    for _ in 0..2 {
        let positive = |n: &i64| (*n >= 0).then_some(()).ok_or("negative".to_owned());
        let added = ctx
            .accept_update_validated(
                "add",
                Duration::from_secs(60),
                positive,
                |n: i64| async move { Ok::<_, String>(sum + n) },
            )
            .await?;
        sum = added.and_then(|u| u.output.ok()).unwrap_or(sum);
    }
    Ok(sum)
}

/// Receives two messages on `in` and returns them in arrival order.
async fn inbox(ctx: Context, _: ()) -> stead::Result<Vec<Value>> {
    let mut got = Vec::new();
    for _ in 0..2 {
        got.extend(
            ctx.recv::<Value>(Some("in"), Duration::from_secs(60))
                .await?,
        );
    }
    Ok(got)
}

both_backends! {
async fn the_cli_and_the_admin_api_send_updates_and_signal_with_start(db) {
    let rt = common::builder(&db)
        .queue(Queue::new("q"))
        .workflow("adder", adder)
        .workflow("inbox", inbox)
        .launch()
        .await
        .unwrap();
    let server = admin::serve(rt.client(), AdminOptions::new()).await.unwrap();
    let api = |path: &str| format!("{}{path}", server.url());
    let handle = rt.start("adder", (), WorkflowOptions::with_id("sum")).await.unwrap();

    let args = ["--json", "workflow", "update", "sum", "add", "--input", "5", "--id", "c1"];
    for _ in 0..2 {
        let run = stead(&db.url, &args).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        let out: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(out["output"], json!(5), "{out}");
        assert_eq!(out["update_id"], json!("c1"));
    }
    let refused = stead(&db.url, &["workflow", "update", "sum", "add", "--input", "-1"]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("rejected: negative"), "{}", refused.stderr);
    let ghost = stead(&db.url, &["workflow", "update", "ghost", "add"]).await;
    assert_eq!(ghost.code, 3, "{}", ghost.stderr);

    let body = r#"{"name": "add", "input": 7, "update_id": "h1"}"#;
    for _ in 0..2 {
        let answered = http::post(&api("/api/workflows/sum/update"), None, Some(body)).await;
        assert_eq!(answered.status, 200, "{}", answered.body);
        assert_eq!(answered.json()["output"], json!(12));
    }
    assert_eq!(common::within(handle.result::<i64>()).await.unwrap(), 12);
    let late = r#"{"name": "add", "input": 1}"#;
    let finished = http::post(&api("/api/workflows/sum/update"), None, Some(late)).await;
    assert_eq!(finished.status, 409, "{}", finished.body);
    let missing = http::post(&api("/api/workflows/ghost/update"), None, Some(late)).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    let bad = http::post(&api("/api/workflows/sum/update"), None, Some("{}")).await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    let started = stead(&db.url, &[
        "workflow", "signal-with-start", "box", "inbox", "--message", "\"first\"",
        "--topic", "in", "--queue", "q",
    ])
    .await;
    assert_eq!(started.code, 0, "{}", started.stderr);
    let second = r#"{"workflow": "inbox", "message": "second", "topic": "in", "queue": "q"}"#;
    let signalled =
        http::post(&api("/api/workflows/box/signal-with-start"), None, Some(second)).await;
    assert_eq!(signalled.status, 200, "{}", signalled.body);
    let got: Vec<Value> = common::within(rt.client().handle("box").result()).await.unwrap();
    assert_eq!(got, [json!("first"), json!("second")]);
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

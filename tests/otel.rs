//! OpenTelemetry (feature `otel`) with an in-memory exporter: a start or enqueue inside a span
//! records its W3C context under the `dbos.otelContext` attribute, a workflow run's span (and
//! its steps') continue the recorded trace (direct starts, claims, a carrier written by another
//! process), and a trace crosses a real DBOS Python app into stead and back into Python.
//!
//! A binary of its own (the other integration tests are `tests/integration`): it installs the
//! process's tracing subscriber with the OpenTelemetry layer, which would export every other
//! test's spans beside it and have their starts inside a span record a `dbos.otelContext`.
#![cfg(feature = "otel")]

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::dbos_py::py_script;
use common::TestDb;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use stead::otel::opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use stead::otel::tracing_opentelemetry::{self, OpenTelemetrySpanExt};
use stead::{
    client::ListWorkflows, workflow::OTEL_CONTEXT_KEY, Client, Context, Queue, Runtime,
    WorkflowOptions,
};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

const QUEUE: &str = "otel-q";

/// Every span of this test process, exported as it ends. Tests tell theirs apart by trace id.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    let (exporter, _) = EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("stead-tests"));
        tracing_subscriber::registry()
            // Steps are DEBUG spans; ractor's per-actor spans are noise here.
            .with(tracing_subscriber::EnvFilter::new(
                "info,stead=debug,ractor=warn",
            ))
            .with(layer)
            .init();
        (exporter, provider)
    });
    exporter
}

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

/// The trace and span id of a `tracing` span, as OpenTelemetry sees it.
fn ids_of(span: &tracing::Span) -> (TraceId, SpanId) {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    (sc.trace_id(), sc.span_id())
}

/// The exported span whose `operationUUID` is `id` and whose `operationType` is `kind`,
/// waiting for it to end.
async fn span_of(id: &str, kind: &str) -> SpanData {
    // A progress wait: the span ends when its workflow or step does, later on a loaded machine.
    let deadline = Instant::now() + common::wait::SETUP;
    loop {
        let spans = exporter().get_finished_spans().unwrap();
        let found = spans.into_iter().find(|s| {
            let attr = |k: &str| {
                s.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == k)
                    .map(|kv| kv.value.to_string())
            };
            attr("operationUUID").as_deref() == Some(id)
                && attr("operationType").as_deref() == Some(kind)
        });
        if let Some(span) = found {
            return span;
        }
        assert!(Instant::now() < deadline, "no {kind} span of {id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn launch(db: &TestDb, app: &str) -> Runtime {
    common::builder(db)
        .app_name(app)
        .queue(Queue::new(QUEUE).polling_interval(Duration::from_millis(100)))
        .workflow("double", double)
        .launch()
        .await
        .unwrap()
}

async fn attributes_of(client: &Client, id: &str) -> Value {
    let found = client
        .list_workflows(ListWorkflows::new().ids([id]))
        .await
        .unwrap();
    found[0].status.attributes.clone().unwrap_or_default()
}

/// Checks that workflow `id` ran as a child of `parent` in its trace, and its step under it.
async fn assert_continues(id: &str, (trace, parent): (TraceId, SpanId)) {
    let run = span_of(id, "workflow").await;
    assert_eq!(run.span_context.trace_id(), trace, "{id}'s trace");
    assert_eq!(run.parent_span_id, parent, "{id}'s parent");
    assert_eq!(run.name, "double", "named after the workflow, as DBOS does");
    let step = span_of(id, "step").await;
    assert_eq!(step.span_context.trace_id(), trace);
    assert_eq!(step.parent_span_id, run.span_context.span_id());
}

both_backends! {
async fn starts_and_enqueues_record_the_callers_trace_and_runs_continue_it(db) {
    exporter();
    let rt = launch(&db, "otel-rs").await;
    let client = common::client(&db, "otel-rs").await;

    // Both backends' runs share this process's exporter: their ids differ.
    let id = |name: &str| format!("{name}-{}", if db.is_sqlite() { "lite" } else { "pg" });
    let caller = tracing::info_span!("caller");
    let h = rt
        .start("double", 1u64, WorkflowOptions::with_id(id("direct")))
        .instrument(caller.clone())
        .await
        .unwrap();
    assert_eq!(h.result::<u64>().await.unwrap(), 2);
    let queued = client
        .enqueue(QUEUE, "double", 2u64, WorkflowOptions::with_id(id("queued")))
        .instrument(caller.clone())
        .await
        .unwrap();
    assert_eq!(queued.result::<u64>().await.unwrap(), 4);
    let (trace, span) = ids_of(&caller);
    drop(caller);
    let traceparent = format!("00-{trace}-{span}-01");
    for wf in [id("direct"), id("queued")] {
        let carrier = &attributes_of(&client, &wf).await[OTEL_CONTEXT_KEY];
        assert_eq!(carrier, &json!({"traceparent": traceparent}), "{wf}");
        assert_continues(&wf, (trace, span)).await;
    }

    // A carrier another process wrote (here by hand, outside any span) is continued too.
    let foreign = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let options = WorkflowOptions::with_id(id("foreign"))
        .attribute(OTEL_CONTEXT_KEY, json!({"traceparent": foreign}))
        .attribute("customer", "acme");
    let h = client.enqueue(QUEUE, "double", 3u64, options).await.unwrap();
    assert_eq!(h.result::<u64>().await.unwrap(), 6);
    let ids = (
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
        SpanId::from_hex("b7ad6b7169203331").unwrap(),
    );
    assert_continues(&id("foreign"), ids).await;

    // Outside a span nothing is recorded, and a bad carrier only starts a trace of its own.
    let plain = client
        .enqueue(QUEUE, "double", 4u64, WorkflowOptions::with_id(id("plain")))
        .await
        .unwrap();
    plain.result::<u64>().await.unwrap();
    assert_eq!(attributes_of(&client, &id("plain")).await, Value::Null);
    let bad = WorkflowOptions::with_id(id("bad")).attribute(OTEL_CONTEXT_KEY, json!({"traceparent": 7}));
    client.enqueue(QUEUE, "double", 5u64, bad).await.unwrap().result::<u64>().await.unwrap();
    let run = span_of(&id("bad"), "workflow").await;
    assert_eq!(run.parent_span_id, SpanId::INVALID);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// The stead client that enqueues onto the Python app (by name: stead does not run `py_tail`).
static PY_CLIENT: OnceLock<Client> = OnceLock::new();

/// Enqueues the Python app's `py_tail` from a step (so inside the step's span) and returns its
/// result.
async fn relay(ctx: Context, n: i64) -> stead::Result<i64> {
    ctx.step("call-python", || async move {
        let client = PY_CLIENT.get().expect("set by the test");
        let options = WorkflowOptions::with_id("otel-py-tail");
        let tail = client.enqueue("py-q", "py_tail", n, options).await?;
        Ok(tail.result::<i64>().await?)
    })
    .await
}

fn hex_ids(span: &Value) -> (String, String, Option<String>) {
    let text = |k: &str| span[k].as_str().map(str::to_owned);
    (
        text("trace_id").unwrap(),
        text("span_id").unwrap(),
        text("parent_span_id"),
    )
}

/// Python (a root span, DBOS's client enqueuing with its context) → stead (the workflow and its
/// step continue that trace; the step enqueues a Python workflow) → Python (DBOS's span of that
/// workflow continues the trace under stead's step): one trace, parent links unbroken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_crosses_from_python_through_stead_back_into_python() {
    require_dbos_otel!();
    exporter();
    let db = TestDb::new().await;
    let rt = common::builder(&db)
        .app_name("otel-rs")
        .queue(Queue::new(QUEUE).polling_interval(Duration::from_millis(100)))
        .workflow("relay", relay)
        .launch()
        .await
        .unwrap();
    let _ = PY_CLIENT.set(common::client(&db, "otel-py").await);

    let settings = json!({"app": "otel-py", "queue": "py-q", "stead_app": "otel-rs",
        "stead_queue": QUEUE, "stead_workflow": "relay", "stead_id": "otel-relay",
        "tail_id": "otel-py-tail"});
    let out = py_script("otel_app.py", &db.url, settings).await;
    assert_eq!(out["result"], json!(2), "{out}");

    let (trace, root, _) = hex_ids(&out["root"]);
    let run = span_of("otel-relay", "workflow").await;
    assert_eq!(
        run.span_context.trace_id().to_string(),
        trace,
        "stead joins Python's trace"
    );
    assert_eq!(
        run.parent_span_id.to_string(),
        root,
        "under Python's root span"
    );
    let step = span_of("otel-relay", "step").await;
    assert_eq!(step.parent_span_id, run.span_context.span_id());

    let spans = out["spans"].as_array().unwrap();
    let tail = spans
        .iter()
        .find(|s| s["attributes"]["operationUUID"] == "otel-py-tail")
        .unwrap_or_else(|| panic!("no span of the Python tail in {out}"));
    let (tail_trace, _, tail_parent) = hex_ids(tail);
    assert_eq!(tail_trace, trace, "Python's tail joins the same trace");
    assert_eq!(
        tail_parent,
        Some(step.span_context.span_id().to_string()),
        "under stead's step that enqueued it"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

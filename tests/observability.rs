//! Metrics and tracing from day one: counters, histograms and the running gauge through the
//! `metrics` facade, and one span per workflow with one child span per step.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use stead::{Context, WorkflowOptions};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::Layer;

async fn good(ctx: Context, _: ()) -> stead::Result<u32> {
    let a = ctx.step("first", || async { Ok(1) }).await?;
    ctx.step("second", || async move { Ok(a + 1) }).await
}

async fn bad(_ctx: Context, _: ()) -> Result<u32, std::io::Error> {
    Err(std::io::Error::other("no"))
}

type Spans = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

/// Records every new span's name and fields, with its parent's fields as `parent.<field>`.
struct SpanLog(Spans);

/// A span's own fields, kept in its extensions for its children to read.
#[derive(Clone)]
struct Own(HashMap<String, String>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> Layer<S> for SpanLog
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: LayerContext<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let span = ctx.span(id).expect("a new span is registered");
        span.extensions_mut().insert(Own(fields.clone()));
        if let Some(parent) = span.parent() {
            fields.insert("parent".into(), parent.name().into());
            if let Some(Own(theirs)) = parent.extensions().get::<Own>() {
                for (k, v) in theirs {
                    fields.insert(format!("parent.{k}"), v.clone());
                }
            }
        }
        self.0
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_owned(), fields));
    }
}

/// A recorded value, detached from the snapshot.
#[derive(Debug, PartialEq)]
enum V {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

type Snapshot = [(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)];

fn value(snapshot: &Snapshot, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<V> {
    snapshot.iter().find_map(|(key, _, _, v)| {
        let k = key.key();
        let matches = key.kind() == kind
            && k.name() == name
            && labels
                .iter()
                .all(|(lk, lv)| k.labels().any(|l| l.key() == *lk && l.value() == *lv));
        matches.then(|| match v {
            DebugValue::Counter(c) => V::Counter(*c),
            DebugValue::Gauge(g) => V::Gauge(g.into_inner()),
            DebugValue::Histogram(h) => V::Histogram(h.iter().map(|x| x.into_inner()).collect()),
        })
    })
}

/// The process's recorder and span log, installed once: both backends' runs share them.
fn instruments() -> &'static (Snapshotter, Spans) {
    static INSTRUMENTS: OnceLock<(Snapshotter, Spans)> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        let spans: Spans = Arc::default();
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(SpanLog(spans.clone())),
        )
        .unwrap();
        (snapshotter, spans)
    })
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

both_backends! {
async fn workflows_and_steps_emit_metrics_and_spans(db) {
    // One backend's run at a time; each starts from drained metrics and an empty span log.
    let _serial = SERIAL.lock().await;
    let (snapshotter, spans) = instruments();
    snapshotter.snapshot();
    spans.lock().unwrap().clear();

    let rt = common::builder(&db)
        .workflow("good", good)
        .workflow("bad", bad)
        .queue(stead::Queue::new("metered").rate_limit(2, Duration::from_secs(60)))
        .launch()
        .await
        .unwrap();
    // Three enqueues on a queue allowing two starts a minute: two run, one is held back.
    let mut queued = Vec::new();
    for _ in 0..3 {
        queued.push(
            rt.enqueue("metered", "good", (), WorkflowOptions::default())
                .await
                .unwrap(),
        );
    }
    for h in &queued[..2] {
        common::within(h.result::<u32>()).await.unwrap();
    }
    let dedup = WorkflowOptions::default().deduplication_id("k", stead::Dedup::ReturnExisting);
    rt.enqueue("metered", "good", (), dedup.clone())
        .await
        .unwrap();
    rt.enqueue("metered", "good", (), dedup).await.unwrap();
    let ok = rt
        .start("good", (), WorkflowOptions::with_id("ok-1"))
        .await
        .unwrap();
    assert_eq!(common::within(ok.result::<u32>()).await.unwrap(), 2);
    let failed = rt
        .start("bad", (), WorkflowOptions::with_id("bad-1"))
        .await
        .unwrap();
    assert!(common::within(failed.result::<u32>()).await.is_err());
    rt.shutdown(Duration::from_secs(1)).await.unwrap();

    let snap = snapshotter.snapshot().into_vec();
    let counter = |name, labels: &[(&str, &str)]| value(&snap, MetricKind::Counter, name, labels);
    // One direct start, three enqueues and one deduplicated enqueue that created a workflow.
    assert_eq!(
        counter(stead::metrics::WORKFLOWS_STARTED, &[("workflow", "good")]),
        Some(V::Counter(5))
    );
    assert_eq!(
        counter(stead::metrics::WORKFLOWS_STARTED, &[("workflow", "bad")]),
        Some(V::Counter(1))
    );
    assert_eq!(
        counter(
            stead::metrics::WORKFLOWS_FINISHED,
            &[("workflow", "good"), ("status", "SUCCESS")]
        ),
        Some(V::Counter(3)),
        "the direct start and the two enqueues the rate limit let through"
    );
    assert_eq!(
        counter(
            stead::metrics::WORKFLOWS_FINISHED,
            &[("workflow", "bad"), ("status", "ERROR")]
        ),
        Some(V::Counter(1))
    );
    match value(
        &snap,
        MetricKind::Histogram,
        stead::metrics::STEP_DURATION,
        &[("workflow", "good")],
    ) {
        Some(V::Histogram(samples)) => assert_eq!(samples.len(), 6),
        other => panic!("step durations: {other:?}"),
    }
    assert_eq!(
        counter(
            stead::metrics::STEPS,
            &[("workflow", "good"), ("outcome", "ok")]
        ),
        Some(V::Counter(6))
    );
    match value(
        &snap,
        MetricKind::Histogram,
        stead::metrics::DB_FLUSH_SIZE,
        &[("lane", "checkpoint")],
    ) {
        Some(V::Histogram(sizes)) => assert_eq!(sizes.iter().sum::<f64>(), 6.0, "six checkpoints"),
        other => panic!("flush sizes: {other:?}"),
    }
    assert!(value(
        &snap,
        MetricKind::Histogram,
        stead::metrics::DB_FLUSH_SECONDS,
        &[("lane", "finish")]
    )
    .is_some());
    match value(
        &snap,
        MetricKind::Gauge,
        stead::metrics::WORKFLOWS_RUNNING,
        &[],
    ) {
        Some(V::Gauge(g)) => assert_eq!(g, 0.0, "nothing left running"),
        other => panic!("running gauge: {other:?}"),
    }

    let queue = [("queue", "metered")];
    assert_eq!(
        counter(stead::metrics::QUEUE_CLAIMED, &queue),
        Some(V::Counter(2))
    );
    assert!(
        matches!(counter(stead::metrics::QUEUE_RATE_LIMITED, &queue), Some(V::Counter(n)) if n >= 1),
        "the rate limit held a claim back"
    );
    assert_eq!(
        counter(stead::metrics::QUEUE_DEDUPLICATED, &queue),
        Some(V::Counter(1))
    );
    match value(
        &snap,
        MetricKind::Histogram,
        stead::metrics::QUEUE_CLAIM_SECONDS,
        &queue,
    ) {
        Some(V::Histogram(latencies)) => assert!(!latencies.is_empty()),
        other => panic!("claim latency: {other:?}"),
    }
    match value(
        &snap,
        MetricKind::Gauge,
        stead::metrics::QUEUE_ENQUEUED,
        &queue,
    ) {
        Some(V::Gauge(depth)) => assert!(depth >= 0.0),
        other => panic!("queue depth: {other:?}"),
    }
    assert!(value(
        &snap,
        MetricKind::Gauge,
        stead::metrics::QUEUE_RUNNING,
        &queue
    )
    .is_some());

    let spans = spans.lock().unwrap().clone();
    let workflow = spans
        .iter()
        .find(|(name, f)| {
            name == "workflow" && f.get("workflow_id").map(String::as_str) == Some("ok-1")
        })
        .expect("a workflow span");
    assert_eq!(workflow.1.get("workflow").map(String::as_str), Some("good"));
    assert_eq!(
        workflow.1.get("queue").map(String::as_str),
        Some("_dbos_internal_queue"),
        "a direct start runs under the internal queue"
    );
    let steps: Vec<_> = spans
        .iter()
        .filter(|(name, f)| {
            name == "step" && f.get("parent.workflow_id").map(String::as_str) == Some("ok-1")
        })
        .map(|(_, f)| (f["function_id"].clone(), f["name"].clone()))
        .collect();
    assert_eq!(
        steps,
        vec![("1".into(), "first".into()), ("2".into(), "second".into())]
    );
    // An enqueued workflow's span names its queue; its steps nest in it.
    let queued_id = queued[0].id();
    let workflow = spans
        .iter()
        .find(|(name, f)| {
            name == "workflow" && f.get("workflow_id").map(String::as_str) == Some(queued_id)
        })
        .expect("the enqueued workflow's span");
    assert_eq!(workflow.1.get("queue").map(String::as_str), Some("metered"));
    let step = spans
        .iter()
        .find(|(name, f)| {
            name == "step" && f.get("parent.workflow_id").map(String::as_str) == Some(queued_id)
        })
        .expect("a step span of the enqueued workflow");
    for (field, want) in [
        ("function_id", "1"),
        ("name", "first"),
        ("parent", "workflow"),
        ("parent.workflow", "good"),
        ("parent.queue", "metered"),
    ] {
        assert_eq!(step.1.get(field).map(String::as_str), Some(want), "{field}");
    }
}
}

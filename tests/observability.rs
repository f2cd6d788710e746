//! Metrics and tracing from day one: counters, histograms, the running gauge and a saturated
//! queue's lag through the `metrics` facade, one span per workflow with one child span per step,
//! and one log line per failure (a workflow's error, a retried step attempt, a parked workflow, a
//! cancel).
//!
//! A binary of its own (the other integration tests are `tests/integration`): it installs the
//! process's metrics recorder and tracing subscriber, which would record every other test's
//! workflows beside it, and which only one suite per process can install.

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

/// Log lines (events): level and fields (`message` among them).
type Events = Arc<Mutex<Vec<(tracing::Level, HashMap<String, String>)>>>;

/// Records every new span's name and fields, with its parent's fields as `parent.<field>`, and
/// every event.
struct SpanLog(Spans, Events);

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

    fn on_event(&self, event: &tracing::Event<'_>, _: LayerContext<'_, S>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        self.1
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
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

/// The process's recorder, span log and log lines, installed once: both backends' runs share
/// them.
fn instruments() -> &'static (Snapshotter, Spans, Events) {
    static INSTRUMENTS: OnceLock<(Snapshotter, Spans, Events)> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        let spans: Spans = Arc::default();
        let events: Events = Arc::default();
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(SpanLog(spans.clone(), events.clone())),
        )
        .unwrap();
        (snapshotter, spans, events)
    })
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

both_backends! {
async fn workflows_and_steps_emit_metrics_and_spans(db) {
    // One backend's run at a time; each starts from drained metrics and an empty span log.
    let _serial = SERIAL.lock().await;
    let (snapshotter, spans, _) = instruments();
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
    let dedup = WorkflowOptions::default().deduplication_id("k", stead::queues::Dedup::ReturnExisting);
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
        // Six steps in three workflows: each one's last step is written with its finish.
        Some(V::Histogram(sizes)) => assert_eq!(sizes.iter().sum::<f64>(), 3.0, "three checkpoints"),
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

/// The start delays `snapshot` took of queue `labels`.
fn start_delays(snapshot: &Snapshot, labels: &[(&str, &str)]) -> Vec<f64> {
    let delay = stead::metrics::QUEUE_START_DELAY;
    match value(snapshot, MetricKind::Histogram, delay, labels) {
        Some(V::Histogram(samples)) => samples,
        _ => Vec::new(),
    }
}

both_backends! {
async fn a_queue_behind_shows_its_lag_until_drained_and_each_starts_wait(db) {
    let _serial = SERIAL.lock().await;
    let (snapshotter, _, _) = instruments();
    snapshotter.snapshot();
    // One slot: the first workflow waits for a message in it, the others wait in the queue.
    let rt = common::builder(&db)
        .workflow("waits", waits)
        .queue(
            stead::Queue::new("behind")
                .worker_concurrency(1)
                .polling_interval(Duration::from_millis(100)),
        )
        .launch()
        .await
        .unwrap();
    let tag = format!("{:?}", db.backend);
    let mut handles = Vec::new();
    for i in 0..3 {
        let options = WorkflowOptions::with_id(format!("behind-{tag}-{i}"));
        handles.push(rt.enqueue("behind", "waits", (), options).await.unwrap());
    }
    let queue = [("queue", "behind")];
    // A snapshot takes the values (gauges read 0 after it until set again): the histogram's
    // samples are gathered across snapshots.
    let mut delays = Vec::new();
    let mut sample = || {
        let snap = snapshotter.snapshot().into_vec();
        delays.extend(start_delays(&snap, &queue));
        let gauge = |name| match value(&snap, MetricKind::Gauge, name, &queue) {
            Some(V::Gauge(g)) => g,
            other => panic!("{name}: {other:?}"),
        };
        (gauge(stead::metrics::QUEUE_LAG), gauge(stead::metrics::QUEUE_ENQUEUED))
    };
    // The slot stays busy, so no tick claims: the gauges move by the queue's reads.
    let mut seen = (0.0, 0.0);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        seen = sample();
        if seen.0 >= 1.5 {
            break;
        }
    }
    assert!(seen.0 >= 1.5 && seen.0 < 30.0, "the oldest waiting one's age: {seen:?}");
    assert_eq!(seen.1, 2.0, "two wait behind the running one");

    for i in 0..3 {
        let to = format!("behind-{tag}-{i}");
        rt.client().send(&to, &"go", Some("go")).await.unwrap();
    }
    for h in &handles {
        let got = common::within(h.result::<Option<String>>()).await.unwrap();
        assert_eq!(got.as_deref(), Some("go"));
    }
    // Drained: a poll's claim samples nothing waiting (several polls pass between snapshots).
    let mut drained = (f64::NAN, f64::NAN);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        drained = sample();
        if drained == (0.0, 0.0) {
            break;
        }
    }
    assert_eq!(drained, (0.0, 0.0), "lag and depth once drained");
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
    delays.extend(start_delays(&snapshotter.snapshot().into_vec(), &queue));
    // One start each: the first ran at once, the others waited at least as long as the lag.
    assert_eq!(delays.len(), 3, "{delays:?}");
    let waited = delays.iter().filter(|d| **d >= 1.5).count();
    assert_eq!(waited, 2, "{delays:?}");
    assert!(delays.iter().all(|d| *d < 60.0), "{delays:?}");
}
}

/// Its one step fails on the first attempt and is retried.
async fn flaky(ctx: Context, _: ()) -> stead::Result<u32> {
    let id = ctx.workflow_id().to_owned();
    ctx.step("charge", || async {
        common::count_body(&id, 1);
        if common::body_run(&id, 1) == 1 {
            return Err("card declined".into());
        }
        Ok(7)
    })
    .retry(stead::RetryPolicy::attempts(3).interval(Duration::from_millis(10)))
    .await
}

async fn crashes(_ctx: Context, _: ()) -> stead::Result<()> {
    panic!("poisoned input");
}

async fn waits(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    ctx.recv(Some("go"), Duration::from_secs(60)).await
}

/// The INFO-or-louder lines logged about workflow `id`, as (level, message, fields).
fn lines_about(events: &Events, id: &str) -> Vec<(tracing::Level, HashMap<String, String>)> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, f)| {
            *level <= tracing::Level::INFO && f.get("workflow_id").map(String::as_str) == Some(id)
        })
        .cloned()
        .collect()
}

/// Waits until a line with `message` about workflow `id` was logged, and returns it.
async fn line(
    events: &Events,
    id: &str,
    message: &str,
) -> (tracing::Level, HashMap<String, String>) {
    for _ in 0..500 {
        let found = lines_about(events, id)
            .into_iter()
            .find(|(_, f)| f.get("message").map(String::as_str) == Some(message));
        if let Some(found) = found {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "no {message:?} line about {id}: {:?}",
        lines_about(events, id)
    );
}

both_backends! {
async fn each_failure_logs_one_line_at_its_level_with_the_workflow_and_error(db) {
    let _serial = SERIAL.lock().await;
    let (_, _, events) = instruments();
    let tag = format!("{:?}", db.backend);
    let rt = common::builder(&db)
        .workflow("bad", bad)
        .workflow("flaky", flaky)
        .workflow_with("crashes", stead::workflow::WorkflowConfig::default().max_recovery_attempts(0), crashes)
        .workflow("waits", waits)
        .launch()
        .await
        .unwrap();
    let id = |name: &str| format!("{name}-{tag}");
    let start = |name: &'static str| rt.start(name, (), WorkflowOptions::with_id(id(name)));
    let failed = start("bad").await.unwrap();
    assert!(common::within(failed.result::<u32>()).await.is_err());
    let retried = start("flaky").await.unwrap();
    assert_eq!(common::within(retried.result::<u32>()).await.unwrap(), 7);
    let parked = start("crashes").await.unwrap();
    assert!(common::within(parked.result::<()>()).await.is_err());
    let waiting = start("waits").await.unwrap();
    common::wait_status(&db.checks().await, &id("waits"), "PENDING").await;
    rt.client().cancel(&id("waits")).await.unwrap();

    use tracing::Level;
    for (name, level, message, error) in [
        ("bad", Level::ERROR, "workflow failed", "no"),
        ("flaky", Level::WARN, "step attempt failed; retrying", "card declined"),
        ("crashes", Level::ERROR, "workflow parked after its recovery budget", "recovery attempts"),
        ("waits", Level::INFO, "workflow cancelled", "was cancelled"),
    ] {
        let (got, fields) = line(events, &id(name), message).await;
        assert_eq!(got, level, "{name}: {fields:?}");
        assert_eq!(fields.get("workflow").map(String::as_str), Some(name), "{fields:?}");
        let logged = fields.get("error").cloned().unwrap_or_default();
        assert!(logged.contains(error), "{name}: {logged}");
        // One line for the event, not one per layer that saw it.
        let same = lines_about(events, &id(name))
            .into_iter()
            .filter(|(_, f)| f.get("message").map(String::as_str) == Some(message))
            .count();
        assert_eq!(same, 1, "{name}: {:?}", lines_about(events, &id(name)));
    }
    // The failing workflow and the retried step log nothing else at INFO or above.
    for name in ["bad", "flaky"] {
        assert_eq!(lines_about(events, &id(name)).len(), 1, "{:?}", lines_about(events, &id(name)));
    }
    drop(waiting);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Nine steps under a limit of ten calls: past the eighth (80%), one warning; the last step's
/// refusal is counted too.
async fn near_limit(ctx: Context, n: u32) -> stead::Result<u32> {
    for _ in 0..n {
        ctx.step("s", || async { Ok(1) }).await?;
    }
    match ctx.step("past", || async { Ok(1) }).await {
        Err(stead::Error::HistoryLimit { .. }) => Ok(n),
        other => Err(stead::Error::InvalidArgument(format!(
            "not refused: {other:?}"
        ))),
    }
}

both_backends! {
async fn a_history_past_eighty_percent_warns_once_and_a_refusal_is_counted(db) {
    let _serial = SERIAL.lock().await;
    let (snapshotter, _, events) = instruments();
    snapshotter.snapshot();
    events.lock().unwrap().clear();
    let rt = common::builder(&db)
        .history_limits(stead::HistoryLimits::default().calls(10))
        .workflow("near_limit", near_limit)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("near_limit", 10u32, WorkflowOptions::with_id("near-1"))
        .await
        .unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 10);
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
    let snap = snapshotter.snapshot().into_vec();
    let counter = |name| value(&snap, MetricKind::Counter, name, &[("workflow", "near_limit")]);
    assert_eq!(counter(stead::metrics::HISTORY_WARNINGS), Some(V::Counter(1)));
    assert_eq!(counter(stead::metrics::HISTORY_REFUSALS), Some(V::Counter(1)));
    let warnings: Vec<_> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, f)| {
            *level == tracing::Level::WARN
                && f.get("workflow_id").map(String::as_str) == Some("near-1")
                && f.get("message").is_some_and(|m| m.contains("passed 80%"))
        })
        .cloned()
        .collect();
    assert_eq!(warnings.len(), 1, "one warning: {warnings:?}");
    assert_eq!(warnings[0].1.get("calls").map(String::as_str), Some("8"));
}
}

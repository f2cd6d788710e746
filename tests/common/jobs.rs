//! A test workflow for queue tests: `job` waits for its gate, sleeps, and logs when it ran, so
//! a test can check order and overlap as seen inside the workflows.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use stead::{Context, Queue, Runtime};

use super::TestDb;

static GATES: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
/// (tag, workflow id, started, ended) of every `job` run.
type Run = (String, String, Instant, Instant);
static LOG: OnceLock<Mutex<Vec<Run>>> = OnceLock::new();

/// Opens `gate` of `db`'s test (every test shares this process, so names are qualified by the
/// test's database).
pub fn open(db: &TestDb, gate: &str) {
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(format!("{}:{gate}", db.name), true);
}

pub fn is_open(gate: &str) -> bool {
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(gate)
        .copied()
        .unwrap_or(false)
}

/// Input: (tag, gate or "", sleep ms). Waits for its gate, sleeps, logs (tag, id, start, end).
pub async fn job(ctx: Context, (tag, gate, ms): (String, String, u64)) -> stead::Result<String> {
    let started = Instant::now();
    while !gate.is_empty() && !is_open(&gate) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let id = ctx.workflow_id().to_owned();
    LOG.get_or_init(Default::default).lock().unwrap().push((
        tag.clone(),
        id,
        started,
        Instant::now(),
    ));
    // A tag qualified by its test's database returns unqualified.
    let bare = tag
        .split_once(':')
        .map_or(tag.as_str(), |(_, t)| t)
        .to_owned();
    ctx.step("done", || {
        let bare = bare.clone();
        async move { Ok(bare) }
    })
    .await
}

/// The runs of `db`'s test whose tag starts with `tag_prefix`, tags unqualified.
pub fn runs(db: &TestDb, tag_prefix: &str) -> Vec<(String, Instant, Instant)> {
    let qualified = format!("{}:{tag_prefix}", db.name);
    LOG.get_or_init(Default::default)
        .lock()
        .unwrap()
        .iter()
        .filter(|(tag, ..)| tag.starts_with(&qualified))
        .map(|(tag, _, s, e)| (tag[qualified.len() - tag_prefix.len()..].to_owned(), *s, *e))
        .collect()
}

pub fn max_overlap(spans: &[(Instant, Instant)]) -> usize {
    spans
        .iter()
        .map(|(s, _)| spans.iter().filter(|(s2, e2)| s2 <= s && s < e2).count())
        .max()
        .unwrap_or(0)
}

pub async fn launch(db: &TestDb, queues: Vec<Queue>) -> Runtime {
    let mut builder = super::builder(db).workflow("job", job);
    for q in queues {
        builder = builder.queue(q);
    }
    builder.launch().await.unwrap()
}

pub fn input(tag: &str, gate: &str, ms: u64) -> (String, String, u64) {
    (tag.to_owned(), gate.to_owned(), ms)
}

/// `input` with the tag and gate qualified by `db` (its test's own database).
pub fn tagged(db: &TestDb, tag: &str, gate: &str, ms: u64) -> (String, String, u64) {
    let d = &db.name;
    let gate = if gate.is_empty() {
        String::new()
    } else {
        format!("{d}:{gate}")
    };
    (format!("{d}:{tag}"), gate, ms)
}

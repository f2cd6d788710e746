//! The `stead` binary, end to end: the built executable against a database a real runtime
//! filled (workflows in every status, a queue, a schedule). Checks the tables, the `--json`
//! output, that management commands change state (seen through a `Client`), migration of an
//! empty database, and the one-line errors and exit codes.

mod batch;
mod listing;
mod management;
mod queues_and_schedules;
mod setup;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use stead::{
    client::ListWorkflows, schedules::Schedule, schedules::ScheduleStatus,
    schedules::ScheduledTime, Client, Context, Queue, Runtime, Status, WorkflowOptions,
};

use crate::common;

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

async fn refuse(_ctx: Context, _: ()) -> Result<(), std::io::Error> {
    Err(std::io::Error::other("refused"))
}

async fn waiter(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    ctx.recv(Some("go"), Duration::from_secs(60)).await
}

async fn report(_ctx: Context, _at: ScheduledTime) -> stead::Result<()> {
    Ok(())
}

fn builder(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .queue(
            Queue::new("q")
                .worker_concurrency(2)
                .rate_limit(10, Duration::from_secs(1))
                .polling_interval(Duration::from_millis(100)),
        )
        .workflow("double", double)
        .workflow("refuse", refuse)
        .workflow("waiter", waiter)
        .workflow("report", report)
        // Fires once a year: listed, paused and resumed, never run during the test.
        .schedule(Schedule::new("yearly", "report", "0 0 3 1 1 *"))
}

/// What one run of the binary did.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    took: Duration,
}

/// The binary with no database URL in its environment.
fn command(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stead"));
    cmd.args(args)
        .env_remove("STEAD_DATABASE_URL")
        .env_remove("DATABASE_URL");
    cmd
}

async fn exec(mut cmd: tokio::process::Command) -> Run {
    let began = Instant::now();
    let out = common::within(cmd.output()).await.expect("run stead");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        took: began.elapsed(),
    }
}

/// `stead --database-url <url> <args>`.
pub(crate) async fn stead(url: &str, args: &[&str]) -> Run {
    let mut all = vec!["--database-url", url];
    all.extend_from_slice(args);
    exec(command(&all)).await
}

/// Runs a command that must succeed; its stdout.
async fn ok(url: &str, args: &[&str]) -> String {
    let r = stead(url, args).await;
    assert_eq!(r.code, 0, "stead {args:?} failed: {}", r.stderr);
    assert_eq!(r.stderr, "", "stead {args:?} wrote to stderr");
    r.stdout
}

/// Runs a command with `--json` that must succeed; its output parsed.
async fn json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = ok(url, &all).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("stead {args:?}: {e}: {out}"))
}

/// Asserts a failure: exit code, and exactly one line on stderr, `error: ...`.
fn failed(r: &Run, code: i32) -> &str {
    assert_eq!(r.code, code, "stdout {:?} stderr {:?}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{:?}", r.stderr);
    assert!(r.stderr.starts_with("error: "), "{:?}", r.stderr);
    assert_eq!(r.stdout, "", "a failure prints nothing on stdout");
    r.stderr.trim_end()
}

fn ids_of(list: &Value) -> Vec<String> {
    let array = list.as_array().expect("a JSON array");
    array
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_owned())
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

async fn wait_for(client: &Client, id: &str, want: &[Status]) {
    let deadline = Instant::now() + common::wait::SETUP;
    loop {
        let now = client.handle(id).status().await.map(|s| s.status);
        if now.as_ref().is_ok_and(|s| want.contains(s)) {
            return;
        }
        assert!(Instant::now() < deadline, "{id} stayed {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One workflow in each status, created in this order.
const SEEDED: [(&str, &str); 6] = [
    ("ok-1", "SUCCESS"),
    ("bad-1", "ERROR"),
    ("stop-1", "CANCELLED"),
    ("wait-1", "PENDING"),
    ("later-1", "DELAYED"),
    ("other-1", "ENQUEUED"),
];

async fn seed(rt: &Runtime) {
    let ok = rt.start("double", 1u64, WorkflowOptions::with_id("ok-1"));
    assert_eq!(ok.await.unwrap().result::<u64>().await.unwrap(), 2);
    let bad = rt.start("refuse", (), WorkflowOptions::with_id("bad-1"));
    assert!(bad.await.unwrap().result::<()>().await.is_err());
    rt.start("waiter", (), WorkflowOptions::with_id("stop-1"))
        .await
        .unwrap();
    rt.client().cancel("stop-1").await.unwrap();
    rt.start("waiter", (), WorkflowOptions::with_id("wait-1"))
        .await
        .unwrap();
    let later = WorkflowOptions::with_id("later-1").delay(Duration::from_secs(3600));
    rt.enqueue("q", "double", 5u64, later).await.unwrap();
    // No executor runs this version, so it stays enqueued.
    let other = WorkflowOptions::with_id("other-1").app_version("nobody-runs-this");
    rt.enqueue("q", "double", 6u64, other).await.unwrap();
    for (id, status) in SEEDED {
        wait_for(rt.client(), id, &[Status::parse(status).unwrap()]).await;
    }
}

//! Patching (`Context::patch`, `Context::deprecate_patch`): a run recorded by old code replays
//! the old branch on patched code; new runs take the new branch; deprecating the patch keeps
//! patched histories replaying; DBOS Python's `DBOS.patch-<name>` markers read the same way.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use stead::{client::ForkOptions, Context, WorkflowOptions};

use crate::common;
use crate::common::TestDb;

/// Runs of each step per workflow id (both backends share this process: ids are per test).
static RUNS: OnceLock<Mutex<HashMap<String, Vec<String>>>> = OnceLock::new();

fn ran(ctx: &Context, step: &str) {
    RUNS.get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(ctx.workflow_id().to_owned())
        .or_default()
        .push(step.to_owned());
}

fn runs(id: &str) -> Vec<String> {
    RUNS.get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(id)
        .cloned()
        .unwrap_or_default()
}

async fn named(ctx: &Context, name: &str, value: &str) -> stead::Result<String> {
    let value = value.to_owned();
    ctx.step(name, || async {
        ran(ctx, name);
        Ok(value)
    })
    .await
}

/// The code before the patch: a, old_b, then c (which parks the first time it is reached
/// under `hold-` ids, so the run is interrupted with a and old_b recorded).
async fn old_code(ctx: Context, _x: i64) -> stead::Result<String> {
    named(&ctx, "a", "a").await?;
    let b = named(&ctx, "old_b", "old").await?;
    if ctx.workflow_id().starts_with("hold-") {
        std::future::pending::<()>().await;
    }
    let c = named(&ctx, "c", "c").await?;
    Ok(format!("{b}+{c}"))
}

/// The patched code.
async fn patched(ctx: Context, _x: i64) -> stead::Result<String> {
    named(&ctx, "a", "a").await?;
    let b = if ctx.patch("v2").await? {
        named(&ctx, "new_b", "new").await?
    } else {
        named(&ctx, "old_b", "old").await?
    };
    let c = named(&ctx, "c", "c").await?;
    Ok(format!("{b}+{c}"))
}

/// The code once every pre-patch run has finished.
async fn deprecated(ctx: Context, _x: i64) -> stead::Result<String> {
    named(&ctx, "a", "a").await?;
    ctx.deprecate_patch("v2")?;
    let b = named(&ctx, "new_b", "new").await?;
    let c = named(&ctx, "c", "c").await?;
    Ok(format!("{b}+{c}"))
}

async fn step_names(rt: &stead::Runtime, id: &str) -> Vec<String> {
    rt.client()
        .steps(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect()
}

both_backends! {
async fn old_runs_replay_the_old_branch_and_new_runs_take_the_new_one(db) {
    let tag = format!("{:?}", db.backend);
    let held = format!("hold-{tag}");
    // Old code records a and old_b, then the process stops mid-run.
    let rt = common::builder(&db).workflow("upgrade", old_code).launch().await.unwrap();
    rt.start("upgrade", 1, WorkflowOptions::with_id(&held)).await.unwrap();
    common::wait_count(
        &db.checks().await,
        &format!("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{held}'"),
        2,
    )
    .await;
    rt.shutdown(Duration::from_millis(200)).await.unwrap();

    // Patched code resumes it: the old branch, replayed; no marker, no number consumed.
    let rt = common::builder(&db).workflow("upgrade", patched).launch().await.unwrap();
    let out: String = common::within(rt.client().handle(&held).result()).await.unwrap();
    assert_eq!(out, "old+c");
    assert_eq!(runs(&held), ["a", "old_b", "c"], "a and old_b ran once, before the upgrade");
    assert_eq!(step_names(&rt, &held).await, ["a", "old_b", "c"]);

    // A new run takes the new branch, with the marker at the next number.
    let fresh = format!("fresh-{tag}");
    let h = rt.start("upgrade", 1, WorkflowOptions::with_id(&fresh)).await.unwrap();
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "new+c");
    assert_eq!(step_names(&rt, &fresh).await, ["a", "DBOS.patch-v2", "new_b", "c"]);
    // Replaying it (a fork from its last call) takes the new branch again.
    let replay = rt.client().fork(&fresh, 4, ForkOptions::new()).await.unwrap();
    assert_eq!(common::within(replay.result::<String>()).await.unwrap(), "new+c");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    // Deprecated: the patched history still replays, and new runs record no marker.
    let rt = common::builder(&db).workflow("upgrade", deprecated).launch().await.unwrap();
    let replay = rt.client().fork(&fresh, 4, ForkOptions::new()).await.unwrap();
    assert_eq!(common::within(replay.result::<String>()).await.unwrap(), "new+c");
    assert!(runs(replay.id()).iter().all(|s| s == "c"), "only c ran: {:?}", runs(replay.id()));
    let newest = format!("newest-{tag}");
    let h = rt.start("upgrade", 1, WorkflowOptions::with_id(&newest)).await.unwrap();
    assert_eq!(common::within(h.result::<String>()).await.unwrap(), "new+c");
    assert_eq!(step_names(&rt, &newest).await, ["a", "new_b", "c"]);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Runs `tests/py/patching.py <version> <id>`.
async fn py_upgrade(db: &TestDb, version: &str, id: &str) -> serde_json::Value {
    let python = common::dbos_py::dbos_cli().with_file_name("python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/patching.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args([&common::dbos_py::sqlalchemy_url(&db.url), version, id])
        .current_dir(std::env::temp_dir())
        .env_remove("DBOS_SYSTEM_DATABASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "patching.py: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str::<serde_json::Value>(stdout.lines().last().unwrap()).unwrap()["ok"].clone()
}

both_backends! {
async fn dbos_python_patch_markers_read_the_same_way(db) {
    require_dbos!();
    common::dbos_py::dbos_migrate(&db.url);
    assert_eq!(py_upgrade(&db, "old", "py-old").await, "old");
    assert_eq!(py_upgrade(&db, "new", "py-new").await, "new");
    // Queues serve their own application: the name the Python app ran under.
    let rt = common::builder(&db)
        .app_name("stead-patching")
        .workflow("upgrade", patched)
        .launch()
        .await
        .unwrap();
    // Each Python history replayed on stead's patched code, then one more call (c) runs.
    let old = rt.client().fork("py-old", 3, ForkOptions::new().app_version("test-1")).await.unwrap();
    assert_eq!(common::within(old.result::<String>()).await.unwrap(), "old+c");
    let new = rt.client().fork("py-new", 4, ForkOptions::new().app_version("test-1")).await.unwrap();
    assert_eq!(common::within(new.result::<String>()).await.unwrap(), "new+c");
    assert_eq!(runs(old.id()), ["c"]);
    assert_eq!(runs(new.id()), ["c"]);
    assert_eq!(step_names(&rt, new.id()).await, ["a", "DBOS.patch-v2", "new_b", "c"]);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

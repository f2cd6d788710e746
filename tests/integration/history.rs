//! History files (feature `testing`): runs exported by the client and by `stead workflow
//! export` / `export-all` replay with no database on the same code, report a renamed step (or a missing patch)
//! at its call number on changed code, pass a change guarded by `ctx.patch`, and report an
//! output that no longer decodes with its step and call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use stead::client::ListWorkflows;
use stead::testing::{
    check_dir, replay_dir, replay_file, replay_report, Divergence, History, KitError,
};
use stead::{Context, Runtime, RuntimeBuilder, WorkflowOptions};

use crate::common;

/// The deployed code: reserve, a durable sleep, charge.
async fn v1(ctx: Context, n: u32) -> stead::Result<u32> {
    let a: u32 = ctx.step("reserve", || async move { Ok(n) }).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    let b: u32 = ctx.step("charge", || async { Ok(2) }).await?;
    Ok(a + b)
}

/// The second step renamed, without a patch.
async fn renamed(ctx: Context, n: u32) -> stead::Result<u32> {
    let a: u32 = ctx.step("reserve", || async move { Ok(n) }).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    let b: u32 = ctx.step("charge-card", || async { Ok(2) }).await?;
    Ok(a + b)
}

/// The same rename, guarded by a patch: old runs keep `charge`.
async fn patched(ctx: Context, n: u32) -> stead::Result<u32> {
    let a: u32 = ctx.step("reserve", || async move { Ok(n) }).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    let b: u32 = if ctx.patch("card").await? {
        ctx.step("charge-card", || async { Ok(2) }).await?
    } else {
        ctx.step("charge", || async { Ok(2) }).await?
    };
    Ok(a + b)
}

/// The first step now returns a string: the recorded number no longer decodes.
async fn retyped(ctx: Context, _n: u32) -> stead::Result<u32> {
    let a: String = ctx
        .step("reserve", || async { Ok("one".to_string()) })
        .await?;
    Ok(a.len() as u32)
}

fn build<F>(code: F) -> RuntimeBuilder
where
    F: stead::workflow::WorkflowFn<u32, u32>,
{
    Runtime::builder().workflow("order", code)
}

/// A folder of its own for one test's history files.
fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stead-histories-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn finish(rt: &Runtime, id: &str, n: u32) {
    let h = rt
        .start("order", n, WorkflowOptions::with_id(id))
        .await
        .unwrap();
    common::within(h.result::<u32>()).await.unwrap();
}

fn incompatible(err: KitError) -> (PathBuf, String, String) {
    match err {
        KitError::Incompatible {
            file,
            workflow_id,
            problem,
            ..
        } => (file, workflow_id, problem),
        other => panic!("expected an incompatible history, got {other}"),
    }
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

both_backends! {
async fn exported_runs_replay_without_a_database_and_changes_are_reported_at_their_call(db) {
    let dir = folder("v1");
    let rt = common::builder(&db).workflow("order", v1).launch().await.unwrap();
    finish(&rt, "o-1", 1).await;
    finish(&rt, "o-2", 40).await;
    let client = rt.client();

    // One by the client call, one by the CLI; both by filter, in the same format.
    let one = client.export_history("o-1").await.unwrap();
    assert_eq!((one.format.as_str(), one.version), ("stead.history", 1));
    let names: Vec<_> = one.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["reserve", "DBOS.sleep", "charge"]);
    assert_eq!(one.steps[0].output, Some(serde_json::json!(1)));
    assert_eq!(one.workflow.status, "SUCCESS");
    assert_eq!(one.workflow.input, Some(serde_json::json!(1)));
    assert_eq!(one.workflow.output, Some(serde_json::json!(3)));
    one.write(dir.join(one.file_name())).unwrap();
    let target = dir.join("o-2.json");
    let cli = crate::cli::stead(&db.url, &["workflow", "export", "o-2", "-o", target.to_str().unwrap()]).await;
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    assert!(cli.stderr.contains("3 calls"), "{}", cli.stderr);
    let all = client.export_histories(ListWorkflows::new().name("order")).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], one);
    assert_eq!(History::read(&target).unwrap(), all[1]);
    assert!(matches!(client.export_history("nobody").await, Err(stead::Error::NotFound(_))));
    // Without -o the history is the output; an unknown id is exit code 3.
    let printed = crate::cli::stead(&db.url, &["workflow", "export", "o-1"]).await;
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    assert_eq!(History::from_json(&printed.stdout, "stdout").unwrap(), one);
    let missing = crate::cli::stead(&db.url, &["workflow", "export", "nobody"]).await;
    assert_eq!(missing.code, 3, "{}", missing.stderr);
    // Many by the CLI's filters, one file each.
    let all_dir = folder("all");
    let args = ["workflow", "export-all", "-n", "order", "--dir", all_dir.to_str().unwrap()];
    let many = crate::cli::stead(&db.url, &args).await;
    assert_eq!(many.code, 0, "{}", many.stderr);
    assert!(many.stderr.contains("exported 2 workflow(s)"), "{}", many.stderr);
    let mut written: Vec<_> = std::fs::read_dir(&all_dir).unwrap().map(|e| name_of(&e.unwrap().path())).collect();
    written.sort();
    assert_eq!(written, ["o-1.json", "o-2.json"]);
    assert_eq!(History::read(all_dir.join("o-1.json")).unwrap(), one);
    std::fs::remove_dir_all(&all_dir).unwrap();
    let queued = crate::cli::stead(&db.url, &["workflow", "export-all", "--queued", "--dir", "x"]).await;
    assert_eq!(queued.code, 2, "{}", queued.stderr);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    // A run of the patched code, kept in another folder.
    let patched_dir = folder("patched");
    let rt = common::builder(&db).workflow("order", patched).launch().await.unwrap();
    finish(&rt, "p-1", 5).await;
    let p = rt.client().export_history("p-1").await.unwrap();
    p.write(patched_dir.join(p.file_name())).unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    // The database is gone: what follows reads files only.
    drop(db);

    // The same code replays every history, every call matched.
    let verdicts = replay_dir(build(v1), &dir).await.unwrap();
    let files: Vec<_> = verdicts.iter().map(|(f, _)| name_of(f)).collect();
    assert_eq!(files, ["o-1.json", "o-2.json"]);
    for (_, v) in &verdicts {
        assert!(v.is_compatible(), "{v:?}");
        assert_eq!((v.recorded_calls, v.matched_calls), (3, 3), "{v:?}");
    }
    assert_eq!(check_dir(build(v1), &dir).await.unwrap(), 2);

    // A renamed step: its call, the recorded name and the new one; the first file fails.
    let v = replay_file(build(renamed), dir.join("o-1.json")).await.unwrap();
    let expected = vec![Divergence {
        function_id: 3,
        recorded: "charge".into(),
        called: Some("charge-card".into()),
    }];
    assert_eq!(v.divergences, expected);
    let (file, id, problem) = incompatible(check_dir(build(renamed), &dir).await.unwrap_err());
    assert_eq!((name_of(&file).as_str(), id.as_str()), ("o-1.json", "o-1"));
    assert!(problem.contains("call #3") && problem.contains("charge-card"), "{problem}");

    // The rename behind a patch replays the old runs, and its own.
    assert_eq!(check_dir(build(patched), &dir).await.unwrap(), 2);
    assert_eq!(check_dir(build(patched), &patched_dir).await.unwrap(), 1);
    // Code without the patch does not replay a patched run: the marker is missing.
    let (_, id, problem) = incompatible(check_dir(build(v1), &patched_dir).await.unwrap_err());
    assert_eq!(id, "p-1");
    assert!(problem.contains("call #3") && problem.contains("patch"), "{problem}");

    // An output that no longer decodes: the step and its call are named.
    let v = replay_file(build(retyped), dir.join("o-1.json")).await.unwrap();
    let failed = v.failed.expect("a decode failure");
    assert!(failed.message.contains("\"reserve\" (call #1)"), "{failed:?}");

    // The command's report: a line per history, false on a divergence (a file and a folder).
    let (mut out, paths) = (Vec::new(), [dir.join("o-2.json"), patched_dir.clone()]);
    assert!(!replay_report(build(v1), &paths, &mut out).await.unwrap());
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("ok ") && lines[0].contains("o-2.json"), "{out}");
    assert!(lines[1].starts_with("DIVERGED") && lines[1].contains("(p-1)"), "{out}");
    assert!(replay_report(build(patched), &paths, &mut Vec::new()).await.unwrap());

    // Files that are not histories are refused, naming the file.
    std::fs::write(dir.join("zz.json"), r#"{"format":"other"}"#).unwrap();
    let err = check_dir(build(v1), &dir).await.unwrap_err();
    assert!(matches!(&err, KitError::Format { source_name, .. } if source_name.ends_with("zz.json")), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&patched_dir).unwrap();
}
}

//! Batches with the binary: `workflow cancel|resume|move|delete --where ...`, a dry run, a
//! stopped batch run again, progress lines on stderr, and the usage errors.

use super::*;

/// Enqueues `double` as `<prefix>-<n>` for `team` on a version nobody runs: it waits.
async fn park(rt: &Runtime, prefix: &str, n: u64, team: &str) {
    let attributes = serde_json::json!({ "team": team });
    let options = WorkflowOptions::with_id(format!("{prefix}-{n}"))
        .app_version("nobody-runs-this")
        .attributes(attributes.as_object().unwrap().clone());
    rt.enqueue("q", "double", n, options).await.unwrap();
}

/// Runs a batch that must succeed: stdout, stderr.
async fn batch(url: &str, args: &[&str]) -> (String, String) {
    let r = stead(url, args).await;
    assert_eq!(r.code, 0, "stead {args:?} failed: {}", r.stderr);
    (r.stdout, r.stderr)
}

async fn statuses(client: &Client, prefix: &str) -> BTreeMap<String, Status> {
    let all = client.list_workflows(ListWorkflows::new()).await.unwrap();
    all.into_iter()
        .filter(|w| w.status.id.starts_with(prefix))
        .map(|w| (w.status.id, w.status.status))
        .collect()
}

both_backends! {
async fn batches_by_filter_count_change_and_report_each_page(db) {
    let rt = builder(&db).launch().await.unwrap();
    let client = rt.client();
    let url = db.url.as_str();
    for n in 0..5 {
        park(&rt, "x", n, "red").await;
    }
    for n in 0..2 {
        park(&rt, "y", n, "blue").await;
    }
    let red = ["--where", "attr.team=red", "--where", "version=nobody-runs-this"];
    let with = |args: &[&'static str]| [&["workflow"][..], args, &red].concat();

    let (out, err) = batch(url, &with(&["cancel", "--dry-run", "--page-size", "2"])).await;
    assert_eq!(out, "dry run: cancel would change 5 of 5 matching workflow(s); 0 skipped\n");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "cancel: page 1: 2 matched, 2 would change, 0 skipped",
            "cancel: page 2: 4 matched, 4 would change, 0 skipped",
            "cancel: page 3: 5 matched, 5 would change, 0 skipped",
        ]
    );
    assert!(statuses(client, "x-").await.values().all(|s| *s == Status::Enqueued));

    let (out, _) = batch(url, &with(&["cancel", "--page-size", "2", "--max-pages", "1"])).await;
    assert!(out.contains("changed 2 of 2") && out.contains("run it again"), "{out}");
    let mut all = vec!["--json"];
    all.extend(with(&["cancel", "--page-size", "2"]));
    let (out, err) = batch(url, &all).await;
    assert_eq!(err, "", "no progress lines under --json");
    let totals: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&totals["action"], &totals["matched"], &totals["changed"], &totals["skipped"]),
        (&"cancel".into(), &5.into(), &3.into(), &2.into())
    );
    assert_eq!((&totals["done"], &totals["dry_run"]), (&true.into(), &false.into()));
    assert!(statuses(client, "x-").await.values().all(|s| *s == Status::Cancelled));

    // Onto this runtime's version, then resumed: they run here.
    let (out, _) = batch(url, &with(&["move", "--to", "test-1"])).await;
    assert_eq!(out, "move: changed 5 of 5 matching workflow(s); 0 skipped\n");
    let args = ["workflow", "resume", "--where", "attr.team=red", "--where", "status=cancelled"];
    let (out, _) = batch(url, &args).await;
    assert_eq!(out, "resume: changed 5 of 5 matching workflow(s); 0 skipped\n");
    for n in 0..5u64 {
        let got: u64 = common::within(client.handle(format!("x-{n}")).result()).await.unwrap();
        assert_eq!(got, 2 * n);
    }
    let args = ["workflow", "delete", "--where", "attr.team=red", "--where", "status=SUCCESS"];
    let (out, _) = batch(url, &args).await;
    assert_eq!(out, "delete: changed 5 of 5 matching workflow(s); 0 skipped\n");
    assert!(statuses(client, "x-").await.is_empty());
    // One workflow moves as a batch of one.
    let (out, _) = batch(url, &["workflow", "move", "--to", "v9", "y-0"]).await;
    assert_eq!(out, "move: changed 1 of 1 matching workflow(s); 0 skipped\n");
    let y0 = client.handle("y-0").status().await.unwrap();
    assert_eq!((y0.status, y0.app_version.as_deref()), (Status::Enqueued, Some("v9")));
    let (out, _) = batch(url, &["workflow", "delete", "--all", "--dry-run"]).await;
    assert_eq!(out, "dry run: delete would change 2 of 2 matching workflow(s); 0 skipped\n");
    assert_eq!(statuses(client, "y-").await.len(), 2);

    // A bad filter is one line naming it; a batch with no filter needs --all.
    let r = stead(url, &["workflow", "cancel", "--where", "colour=red"]).await;
    let message = failed(&r, 2);
    assert!(message.contains("\"colour\"") && message.contains("keys:"), "{message}");
    let r = stead(url, &["workflow", "cancel", "--where", "created>=tomorrow"]).await;
    assert!(failed(&r, 2).contains("is not a time"), "{}", r.stderr);
    for args in [
        &["workflow", "cancel"][..],
        &["workflow", "delete", "--dry-run"],
        &["workflow", "cancel", "y-1", "--where", "name=double"],
        &["workflow", "resume", "y-1", "--all"],
        &["workflow", "move", "--where", "name=double"],
    ] {
        let r = stead(url, args).await;
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert_eq!(r.stdout, "");
    }
    assert_eq!(statuses(client, "y-").await.len(), 2, "nothing changed");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

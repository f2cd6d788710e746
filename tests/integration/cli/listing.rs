//! Reading with the binary: `list`, `get` and `steps` over every status, as tables and as
//! `--json`, and attributes filtered, shown and changed.

use super::*;

both_backends! {
async fn list_get_and_steps_show_every_status_as_tables_and_json(db) {
    let rt = builder(&db).launch().await.unwrap();
    seed(&rt).await;
    let url = db.url.as_str();

    let table = ok(url, &["workflow", "list"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "STATUS", "NAME", "QUEUE", "VERSION", "CREATED", "UPDATED", "ERROR"]
    );
    // Times say their zone; a failed workflow shows its error in the list.
    let bad_row = table.lines().find(|l| l.starts_with("bad-1 ")).expect(&table);
    assert!(bad_row.contains("refused"), "{bad_row}");
    assert_eq!(bad_row.matches('Z').count(), 2, "created and updated in UTC: {bad_row}");
    let ok_row = table.lines().find(|l| l.starts_with("ok-1 ")).expect(&table);
    assert_eq!(ok_row.split_whitespace().last(), Some("-"), "no error: {ok_row}");
    let rows: BTreeMap<&str, &str> = lines
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells[0], cells[1])
        })
        .collect();
    assert_eq!(rows, BTreeMap::from(SEEDED));
    assert!(table.contains("nobody-runs-this"), "{table}");

    let listed = json(url, &["workflow", "list"]).await;
    let statuses: BTreeMap<String, String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let id = w["id"].as_str().unwrap().to_owned();
            (id, w["status"].as_str().unwrap().to_owned())
        })
        .collect();
    let expected = SEEDED.map(|(i, s)| (i.to_owned(), s.to_owned()));
    assert_eq!(statuses, BTreeMap::from(expected));
    assert_eq!(ids_of(&listed)[0], "other-1", "newest first by default");

    let oldest = json(url, &["workflow", "list", "--oldest-first"]).await;
    assert_eq!(ids_of(&oldest)[0], "ok-1");
    let page = [
        "workflow",
        "list",
        "--oldest-first",
        "--limit",
        "2",
        "--offset",
        "1",
    ];
    assert_eq!(ids_of(&json(url, &page).await), ["bad-1", "stop-1"]);
    // The same page with short flags, as a table: a hint names the next page.
    let r = stead(url, &["workflow", "list", "--oldest-first", "-l", "2", "-o", "1"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
    assert_eq!(
        r.stderr,
        "showing 2 of 6 from offset 1; use --offset 3 for the next page\n"
    );
    // The total counts what the filters match.
    let finished = ["workflow", "list", "-s", "success", "-s", "error", "-s", "cancelled", "-l", "1"];
    let r = stead(url, &finished).await;
    assert_eq!(r.stderr, "showing 1 of 3 from offset 0; use --offset 1 for the next page\n");
    let queued = stead(url, &["workflow", "list", "--queued", "-l", "1"]).await;
    assert_eq!(queued.stderr, "showing 1 of 2 from offset 0; use --offset 1 for the next page\n");
    let last = stead(url, &["workflow", "list", "--oldest-first", "-l", "2", "-o", "4"]).await;
    assert_eq!((last.code, last.stderr.as_str()), (0, ""), "the last page has no hint");
    let short = ["-j", "workflow", "list", "-s", "error", "-s", "cancelled", "-n", "refuse"];
    let listed: Value = serde_json::from_str(&ok(url, &short).await).unwrap();
    assert_eq!(ids_of(&listed), ["bad-1"]);
    let finished_badly = [
        "workflow",
        "list",
        "--status",
        "error",
        "--status",
        "CANCELLED",
    ];
    let got: BTreeSet<String> = ids_of(&json(url, &finished_badly).await)
        .into_iter()
        .collect();
    assert_eq!(got, set(&["bad-1", "stop-1"]));
    let by_name = ["workflow", "list", "--name", "double"];
    let got: BTreeSet<String> = ids_of(&json(url, &by_name).await).into_iter().collect();
    assert_eq!(got, set(&["ok-1", "later-1", "other-1"]));
    let by_queue = ["workflow", "list", "--queue", "q"];
    let got: BTreeSet<String> = ids_of(&json(url, &by_queue).await).into_iter().collect();
    assert_eq!(got, set(&["later-1", "other-1"]));

    let shown = ok(url, &["workflow", "get", "ok-1"]).await;
    for line in ["id  ", "status  ", "input  ", "output  "] {
        assert!(
            shown.lines().any(|l| l.starts_with(line)),
            "{line}: {shown}"
        );
    }
    let got = json(url, &["workflow", "get", "ok-1"]).await;
    assert_eq!(
        (&got["id"], &got["status"], &got["input"], &got["output"]),
        (
            &Value::from("ok-1"),
            &Value::from("SUCCESS"),
            &Value::from(1),
            &Value::from(2)
        )
    );
    let bad = json(url, &["workflow", "get", "bad-1"]).await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{bad}"
    );

    let steps = ok(url, &["workflow", "steps", "ok-1"]).await;
    assert!(steps.starts_with("STEP"), "{steps}");
    assert!(steps.lines().nth(1).unwrap().contains("double"), "{steps}");
    let steps = json(url, &["workflow", "steps", "ok-1"]).await;
    assert_eq!(steps[0]["name"], "double");
    assert_eq!(
        (&steps[0]["function_id"], &steps[0]["output"]),
        (&Value::from(1), &Value::from(2))
    );
    // Without outputs: the size of each, not its value.
    let bare = ok(url, &["workflow", "steps", "ok-1", "--no-outputs"]).await;
    assert!(bare.lines().nth(1).unwrap().contains("(1 bytes)"), "{bare}");
    let bare = json(url, &["workflow", "steps", "ok-1", "--no-outputs"]).await;
    assert_eq!((&bare[0]["output"], &bare[0]["output_bytes"]), (&Value::Null, &Value::from(1)));

    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn attributes_are_filtered_shown_and_changed(db) {
    let rt = builder(&db).launch().await.unwrap();
    let url = db.url.as_str();
    for (id, customer) in [("a1", "acme"), ("a2", "globex")] {
        let options = WorkflowOptions::with_id(id)
            .attribute("customer", customer)
            .attribute("tier", 1);
        rt.start("double", 1u64, options).await.unwrap().result::<u64>().await.unwrap();
    }
    let acme = json(url, &["workflow", "list", "--attribute", "customer=acme"]).await;
    assert_eq!(ids_of(&acme), ["a1"]);
    assert_eq!(acme[0]["attributes"], serde_json::json!({"customer": "acme", "tier": 1}));
    let both = ["workflow", "list", "--attribute", "tier=1", "--oldest-first"];
    assert_eq!(ids_of(&json(url, &both).await), ["a1", "a2"]);
    // `"1"` is the string, not the number.
    let text = json(url, &["workflow", "list", "--attribute", r#"tier="1""#]).await;
    assert_eq!(text, Value::Array(vec![]));

    let merged = json(url, &["workflow", "attributes", "a1", "tier=2", "--merge"]).await;
    let want = serde_json::json!({"id": "a1", "attributes": {"customer": "acme", "tier": 2}});
    assert_eq!(merged, want);
    let replaced = ok(url, &["workflow", "attributes", "a1", "only=yes"]).await;
    assert_eq!(replaced, "{\"only\":\"yes\"}\n");
    assert!(ok(url, &["workflow", "get", "a1"]).await.contains("attributes     {\"only\":\"yes\"}"));
    let cleared = ok(url, &["workflow", "attributes", "a1", "--clear"]).await;
    assert_eq!(cleared, "workflow 'a1' has no attributes\n");
    let r = stead(url, &["workflow", "attributes", "nobody", "k=v"]).await;
    assert!(failed(&r, 3).contains("nobody"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! The `stead` binary, end to end: the built executable against a database a real runtime
//! filled (workflows in every status, a queue, a schedule). Checks the tables, the `--json`
//! output, that management commands change state (seen through a `Client`), migration of an
//! empty database, and the one-line errors and exit codes.

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
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
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
async fn stead(url: &str, args: &[&str]) -> Run {
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
    let deadline = Instant::now() + Duration::from_secs(20);
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

    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn cancel_resume_fork_and_delete_change_the_workflows(db) {
    let rt = builder(&db).launch().await.unwrap();
    let client = Client::connect(&db.url).await.unwrap();
    let url = db.url.as_str();

    rt.start("waiter", (), WorkflowOptions::with_id("w"))
        .await
        .unwrap();
    wait_for(&client, "w", &[Status::Pending]).await;
    let out = ok(url, &["workflow", "cancel", "w"]).await;
    assert!(out.contains("CANCELLED"), "{out}");
    assert_eq!(
        client.handle("w").status().await.unwrap().status,
        Status::Cancelled
    );

    let resumed = json(url, &["workflow", "resume", "w"]).await;
    assert_eq!(resumed["id"], "w");
    wait_for(&client, "w", &[Status::Pending]).await;
    client.send("w", &"go", Some("go")).await.unwrap();
    let got: Option<String> = common::within(client.handle("w").result()).await.unwrap();
    assert_eq!(got.as_deref(), Some("go"));

    let d = rt.start("double", 4u64, WorkflowOptions::with_id("d"));
    assert_eq!(d.await.unwrap().result::<u64>().await.unwrap(), 8);
    let fork = ["workflow", "fork", "d", "--step", "1", "--new-id", "d-copy"];
    let forked = json(url, &fork).await;
    assert_eq!(forked["new_id"], "d-copy");
    let copy: u64 = common::within(client.handle("d-copy").result())
        .await
        .unwrap();
    assert_eq!(copy, 8);
    let fork = [
        "workflow",
        "fork",
        "d",
        "--step",
        "2",
        "--queue",
        "q",
        "--app-version",
        "test-1",
    ];
    let text = ok(url, &fork).await;
    let new_id = text.trim_end().rsplit('\'').nth(1).unwrap().to_owned();
    let second: u64 = common::within(client.handle(&new_id).result())
        .await
        .unwrap();
    assert_eq!(second, 8);
    let copy = client.handle(&new_id).status().await.unwrap();
    assert_eq!(
        (copy.queue_name.as_deref(), copy.forked_from.as_deref()),
        (Some("q"), Some("d"))
    );
    let forks = json(url, &["workflow", "list", "--forked-from", "d"]).await;
    let got: BTreeSet<String> = ids_of(&forks).into_iter().collect();
    assert_eq!(got, set(&["d-copy", &new_id]));

    let out = ok(url, &["workflow", "delete", "d-copy"]).await;
    assert_eq!(out, "deleted workflow 'd-copy'\n");
    let left = client
        .list_workflows(ListWorkflows::new().ids(["d-copy"]))
        .await
        .unwrap();
    assert!(left.is_empty(), "still there: {left:?}");

    for args in [
        ["workflow", "delete", "d-copy"],
        ["workflow", "get", "d-copy"],
        ["workflow", "cancel", "nope"],
        ["workflow", "resume", "nope"],
        ["workflow", "steps", "nope"],
    ] {
        let r = stead(url, &args).await;
        let id = args[2];
        // Worded as the library words it (and the admin API): one wording everywhere.
        assert_eq!(failed(&r, 3), format!("error: {}", stead::Error::NotFound(id.into())));
        assert_eq!(failed(&r, 3), format!("error: workflow \"{id}\" not found"));
    }
    let r = stead(url, &["workflow", "fork", "nope", "--step", "1"]).await;
    assert_eq!(failed(&r, 3), "error: workflow \"nope\" not found");

    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn queues_are_listed_and_schedules_listed_paused_and_resumed(db) {
    let rt = builder(&db).launch().await.unwrap();
    let url = db.url.as_str();

    let queues = ok(url, &["queue", "list"]).await;
    let row = queues.lines().find(|l| l.starts_with("q ")).expect(&queues);
    let cells: Vec<&str> = row.split_whitespace().collect();
    // The runtime defines its queues under its application name, `stead` by default.
    assert_eq!(cells, ["q", "stead", "-", "2", "10/1000ms", "no", "no", "100ms"]);
    let queues = json(url, &["queue", "list"]).await;
    let q = &queues.as_array().unwrap()[0];
    assert_eq!(
        (&q["name"], &q["worker_concurrency"]),
        (&Value::from("q"), &Value::from(2))
    );
    assert_eq!(q["rate_limit"]["limit"], 10);
    assert_eq!(q["concurrency"], Value::Null);
    // Every application's queues without --app; with it, that application's and shared ones.
    let other = common::client(&db, "billing-app").await;
    other.create_queue(Queue::new("invoices")).await.unwrap();
    let all = ok(url, &["queue", "list"]).await;
    let row = all.lines().find(|l| l.starts_with("invoices ")).expect(&all);
    assert_eq!(row.split_whitespace().nth(1), Some("billing-app"), "{all}");
    let theirs = json(url, &["--app", "billing-app", "queue", "list"]).await;
    let names: Vec<&str> = theirs.as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["invoices"]);
    let mine = json(url, &["-a", "stead", "queue", "list"]).await;
    let names: Vec<&str> = mine.as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["q"]);
    other.shutdown(Duration::from_secs(5)).await.unwrap();

    let table = ok(url, &["schedule", "list"]).await;
    let row = table.lines().nth(1).expect(&table);
    assert!(row.starts_with("yearly"), "{table}");
    for cell in ["ACTIVE", "report", "0 0 3 1 1 *", "UTC"] {
        assert!(row.contains(cell), "{cell}: {table}");
    }
    assert_eq!(
        ok(url, &["schedule", "pause", "yearly"]).await,
        "paused schedule 'yearly'\n"
    );
    assert_eq!(
        rt.client().schedules().await.unwrap()[0].status,
        ScheduleStatus::Paused
    );
    let listed = json(url, &["schedule", "list"]).await;
    assert_eq!(
        (&listed[0]["name"], &listed[0]["status"]),
        (&Value::from("yearly"), &Value::from("PAUSED"))
    );
    ok(url, &["schedule", "resume", "yearly"]).await;
    assert_eq!(
        rt.client().schedules().await.unwrap()[0].status,
        ScheduleStatus::Active
    );

    let r = stead(url, &["schedule", "pause", "nope"]).await;
    assert_eq!(failed(&r, 3), "error: schedule \"nope\" not found");

    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn gc_deletes_old_or_surplus_finished_workflows_only(db) {
    let rt = builder(&db).launch().await.unwrap();
    let url = db.url.as_str();
    for (i, id) in ["g1", "g2", "g3"].into_iter().enumerate() {
        let h = rt.start("double", i as u64, WorkflowOptions::with_id(id));
        h.await.unwrap().result::<u64>().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rt.start("waiter", (), WorkflowOptions::with_id("running"))
        .await
        .unwrap();
    let later = WorkflowOptions::with_id("later").delay(Duration::from_secs(3600));
    rt.enqueue("q", "double", 1u64, later).await.unwrap();

    assert_eq!(
        ok(url, &["gc", "--older-than", "1h"]).await,
        "deleted 0 finished workflow(s)\n"
    );
    let collected = json(url, &["gc", "--keep", "1"]).await;
    assert_eq!(collected["deleted"], 2);
    let left = rt.client().list_workflows(ListWorkflows::new()).await.unwrap();
    let left: BTreeSet<String> = left.into_iter().map(|w| w.status.id).collect();
    assert_eq!(left, set(&["g3", "running", "later"]));

    let r = stead(url, &["gc"]).await;
    assert_eq!(
        r.code, 2,
        "gc without a policy is a usage error: {}",
        r.stderr
    );

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

both_backends! {
async fn migrate_prepares_an_empty_database_for_clients_and_runtimes(db) {
    let url = db.url.as_str();
    if db.is_sqlite() {
        // A read-only command on a missing file leaves no empty file behind a mistyped path.
        let file = url.trim_start_matches("sqlite://");
        for args in [&["workflow", "list"][..], &["queue", "list"], &["schedule", "list"]] {
            let r = stead(url, args).await;
            let line = failed(&r, 4);
            assert!(line.contains(&format!("{file} does not exist")), "{line}");
            assert!(!std::path::Path::new(file).exists(), "{args:?} created {file}");
        }
    } else {
        let r = stead(url, &["workflow", "list"]).await;
        assert_eq!(
            failed(&r, 1),
            "error: schema 'dbos' has no stead tables: run `stead migrate` first"
        );
    }

    // A SQLite file has one schema, `main`; schemas of their own are Postgres's.
    let schema = if db.is_sqlite() { "main" } else { "dbos" };
    let out = ok(url, &["migrate"]).await;
    assert_eq!(
        out,
        format!("migrated schema '{schema}' to version 125 (was: none)\n")
    );
    let again = json(url, &["migrate"]).await;
    assert_eq!(
        (&again["applied"], &again["version"]),
        (&Value::Bool(false), &Value::from(125))
    );
    if !db.is_sqlite() {
        let other = json(url, &["migrate", "--schema", "tenant_b"]).await;
        assert_eq!(
            (&other["schema"], &other["applied"]),
            (&Value::from("tenant_b"), &Value::Bool(true))
        );
    }

    Client::connect(url)
        .await
        .unwrap()
        .shutdown(Duration::from_secs(5))
        .await
        .unwrap();
    let rt = builder(&db).launch().await.unwrap();
    let h = rt.start("double", 21u64, WorkflowOptions::with_id("after"));
    assert_eq!(h.await.unwrap().result::<u64>().await.unwrap(), 42);
    let listed = json(url, &["workflow", "list"]).await;
    assert_eq!(ids_of(&listed), ["after"]);
    if !db.is_sqlite() {
        let empty = json(url, &["--schema", "tenant_b", "workflow", "list"]).await;
        assert_eq!(empty, Value::Array(vec![]));
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

#[tokio::test]
async fn help_separates_global_options_and_says_database_url() {
    let r = exec(command(&["workflow", "list", "--help"])).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (own, global) = r.stdout.split_once("Global options:").expect(&r.stdout);
    assert!(
        own.contains("-s, --status") && own.contains("-l, --limit"),
        "{own}"
    );
    assert!(!own.contains("--database-url"), "{own}");
    assert!(
        global.contains("-d, --database-url") && global.contains("Database URL"),
        "{global}"
    );
    assert!(!r.stdout.contains("Postgres URL"), "{}", r.stdout);
}

#[tokio::test]
async fn an_unreachable_database_fails_fast_with_one_line() {
    let url = "postgres://postgres:s3cret@127.0.0.1:1/nowhere";
    for args in [&["workflow", "list"][..], &["migrate"]] {
        let r = stead(url, args).await;
        let line = failed(&r, 4);
        assert!(
            line.starts_with("error: cannot connect to database at postgres://postgres:***@127.0.0.1:1/nowhere: "),
            "{line}"
        );
        assert!(line.contains("refused"), "{line}");
        assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    }
    let quick = stead(url, &["--connect-timeout", "300ms", "queue", "list"]).await;
    failed(&quick, 4);
    assert!(quick.took < Duration::from_secs(3), "took {:?}", quick.took);
}

both_backends! {
async fn the_url_comes_from_the_flag_then_stead_database_url_then_database_url(db) {
    stead::migrate(&db.url, "dbos").await.unwrap();
    let dead = "postgres://postgres@127.0.0.1:1/nowhere";

    let r = exec(command(&["workflow", "list"])).await;
    assert_eq!(
        failed(&r, 2),
        "error: no database URL: pass --database-url or set STEAD_DATABASE_URL or DATABASE_URL"
    );
    let mut cmd = command(&["workflow", "list"]);
    cmd.env("STEAD_DATABASE_URL", &db.url)
        .env("DATABASE_URL", dead);
    assert_eq!(exec(cmd).await.code, 0);
    let mut cmd = command(&["workflow", "list"]);
    cmd.env("DATABASE_URL", &db.url);
    assert_eq!(exec(cmd).await.code, 0);
    let mut cmd = command(&["--database-url", &db.url, "workflow", "list"]);
    cmd.env("STEAD_DATABASE_URL", dead);
    assert_eq!(exec(cmd).await.code, 0);

    let r = stead(&db.url, &["workflow", "list", "--status", "running"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = stead("not a url", &["workflow", "list"]).await;
    assert_eq!(failed(&r, 2).split(':').next(), Some("error"));
}
}

//! Updates and signal-with-start: a caller's named request is answered by the workflow, once per
//! update id (across retries, crashes of either side and processes); a validator's refusal
//! records nothing; a finished or unknown workflow and a caller's timeout are typed errors.
//! Signal-with-start from two concurrent callers starts one workflow and delivers both messages,
//! and a refused message starts nothing; DBOS's CLI reads an updated workflow.

use std::time::Duration;

use serde_json::Value;
use stead::client::UpdateOptions;
use stead::{Context, Error, Queue, WorkflowOptions};

use crate::common;
use crate::common::dbos_py::{dbos_workflow_cli, listed_entry};
use common::CheckPool as _;

/// Set in a child process: the database URL it runs against.
const CHILD_DB: &str = "STEAD_TEST_UPDATE_CHILD_DB";

/// Sums prices sent as `add` updates until the total reaches 100; a price of 0 is refused by
/// the validator, a price over 1000 fails the handler. Each handler run is counted by
/// (workflow, price). In a child process it parks after its first update.
async fn cart(ctx: Context, _: ()) -> stead::Result<u64> {
    let mut total = 0u64;
    while total < 100 {
        let id = ctx.workflow_id().to_owned();
        let validator = |price: &u64| match price {
            0 => Err("a price must be positive".to_owned()),
            _ => Ok(()),
        };
        let handler = |price: u64| async move {
            common::count_body(&id, price as u32);
            match price {
                p if p > 1000 => Err(format!("{p} is too expensive")),
                p => Ok(total + p),
            }
        };
        let added = ctx
            .accept_update_validated("add", Duration::from_secs(60), validator, handler)
            .await?;
        let Some(update) = added else { break };
        if let Ok(new_total) = update.output {
            total = new_total;
        }
        if std::env::var(CHILD_DB).is_ok() {
            // The child is killed here, after its first update was answered.
            std::future::pending::<()>().await;
        }
    }
    Ok(total)
}

/// Waits for messages on `in` until it has two, and returns them sorted with its input first.
async fn inbox(ctx: Context, input: String) -> stead::Result<Vec<String>> {
    let mut got = vec![input];
    for _ in 0..2 {
        let m: Option<String> = ctx.recv(Some("in"), Duration::from_secs(30)).await?;
        got.extend(m);
    }
    got[1..].sort();
    Ok(got)
}

/// A runtime serving queue `inbox` with workflow `inbox`, and a client beside it.
async fn inbox_runtime(db: &common::TestDb) -> (stead::Runtime, stead::Client) {
    let rt = common::builder(db)
        .queue(Queue::new("inbox"))
        .workflow("inbox", inbox)
        .launch()
        .await
        .unwrap();
    (
        rt,
        common::client(db, stead::runtime::DEFAULT_APP_NAME).await,
    )
}

/// How many `stead.update` calls workflow `id` recorded.
async fn recorded_updates(pool: &impl common::CheckPool, id: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM dbos.operation_outputs \
         WHERE workflow_uuid = '{id}' AND function_name = 'stead.update'"
    );
    pool.count(&sql).await.unwrap()
}

both_backends! {
async fn an_update_is_answered_once_per_id_and_a_refusal_records_nothing(db) {
    let rt = common::builder(&db).workflow("cart", cart).launch().await.unwrap();
    let id = format!("cart-{}", db.is_sqlite());
    let handle = rt.start("cart", (), WorkflowOptions::with_id(&id)).await.unwrap();
    let client = rt.client();
    let add = |price: u64, update: &'static str| {
        let (client, id) = (client.clone(), id.clone());
        async move {
            let options = UpdateOptions::with_id(update);
            client.update::<u64, u64>(&id, "add", &price, options).await
        }
    };
    assert_eq!(common::within(add(10, "u1")).await.unwrap(), 10);
    // The same id again: the recorded answer, not a second run of the handler.
    assert_eq!(common::within(add(10, "u1")).await.unwrap(), 10);
    assert_eq!(common::body_run(&id, 10), 1, "the handler ran once");
    assert_eq!(common::within(add(5, "u2")).await.unwrap(), 15);

    let refused = common::within(add(0, "u3")).await.unwrap_err();
    assert!(
        matches!(&refused, Error::UpdateRejected { reason, update_id, .. }
            if reason.contains("positive") && update_id == "u3"),
        "{refused}"
    );
    let again = common::within(add(0, "u3")).await.unwrap_err();
    assert!(matches!(again, Error::UpdateRejected { .. }), "{again}");
    let pool = db.checks().await;
    assert_eq!(recorded_updates(&pool, &id).await, 2, "a refusal records no call");
    let history = format!(
        "SELECT count(*) FROM dbos.workflow_events_history \
         WHERE workflow_uuid = '{id}' AND key = 'stead.update::u3'"
    );
    assert_eq!(pool.count(&history).await.unwrap(), 0);

    let failed = common::within(add(5000, "u4")).await.unwrap_err();
    assert!(
        matches!(&failed, Error::UpdateFailed { error, .. } if error.contains("too expensive")),
        "{failed}"
    );
    // An update with a generated id, which ends the cart.
    let total = client
        .update::<u64, u64>(&id, "add", &100, UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(total, 115);
    assert_eq!(common::within(handle.result::<u64>()).await.unwrap(), 115);
    // Answered before it finished: still the same answer.
    assert_eq!(common::within(add(10, "u1")).await.unwrap(), 10);

    let finished = common::within(add(1, "late")).await.unwrap_err();
    assert!(
        matches!(&finished, Error::WorkflowFinished { status, .. } if status == "SUCCESS"),
        "{finished}"
    );
    let unknown = common::within(client.update::<u64, u64>(
        "no-such-cart",
        "add",
        &1,
        UpdateOptions::default(),
    ))
    .await
    .unwrap_err();
    assert!(matches!(unknown, Error::NotFound(_)), "{unknown}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_caller_times_out_and_a_later_call_gets_the_answer(db) {
    async fn slow(ctx: Context, _: ()) -> stead::Result<u64> {
        ctx.sleep(Duration::from_millis(800)).await?;
        let echoed = ctx
            .accept_update("echo", Duration::from_secs(30), |n: u64| async move {
                Ok::<_, String>(n * 2)
            })
            .await?;
        Ok(echoed.and_then(|u| u.output.ok()).unwrap_or(0))
    }
    let rt = common::builder(&db).workflow("slow", slow).launch().await.unwrap();
    rt.start("slow", (), WorkflowOptions::with_id("slow")).await.unwrap();
    let options = UpdateOptions::with_id("e1").timeout(Duration::from_millis(200));
    let client = rt.client();
    let early = client.update::<u64, u64>("slow", "echo", &21, options).await;
    assert!(
        matches!(&early, Err(Error::UpdateTimeout { update_id, .. }) if update_id == "e1"),
        "{early:?}"
    );
    // The request stayed delivered: the same id now waits for its answer.
    let answer = client.update::<u64, u64>("slow", "echo", &21, UpdateOptions::with_id("e1"));
    assert_eq!(common::within(answer).await.unwrap(), 42);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The caller is a `Client` of its own; the workflow runs in a runtime on the same database.
async fn a_client_updates_a_workflow_run_by_a_runtime(db) {
    let rt = common::builder(&db).workflow("cart", cart).launch().await.unwrap();
    let id = format!("remote-{}", db.is_sqlite());
    let handle = rt.start("cart", (), WorkflowOptions::with_id(&id)).await.unwrap();
    let client = common::client(&db, "caller").await;
    let answer = client.update::<u64, u64>(&id, "add", &60, UpdateOptions::with_id("r1"));
    assert_eq!(common::within(answer).await.unwrap(), 60);
    let answer = client.update::<u64, u64>(&id, "add", &40, UpdateOptions::with_id("r2"));
    assert_eq!(common::within(answer).await.unwrap(), 100);
    let total: u64 = common::within(handle.result()).await.unwrap();
    assert_eq!(total, 100);
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn signal_with_start_from_two_callers_starts_once_and_delivers_both(db) {
    let (rt, client) = inbox_runtime(&db).await;
    let options = || WorkflowOptions::with_id("box");
    let (a, b) = tokio::join!(
        rt.signal_with_start::<_, _, str>("inbox", "first".to_owned(), options(), "a", Some("in")),
        client.signal_with_start::<_, _, str>(
            "inbox",
            "inbox",
            "second".to_owned(),
            options(),
            "b",
            Some("in"),
        ),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.id(), "box");
    assert_eq!(b.id(), "box");
    let got: Vec<String> = common::within(a.result()).await.unwrap();
    assert!(got[0] == "first" || got[0] == "second", "{got:?}");
    assert_eq!(got[1..], ["a", "b"], "both messages arrived");
    let pool = db.checks().await;
    let runs = "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE 'box%'";
    assert_eq!(pool.count(runs).await.unwrap(), 1);
    let missing_id = rt
        .signal_with_start::<_, _, str>("inbox", String::new(), WorkflowOptions::default(), "x", None)
        .await;
    assert!(matches!(missing_id, Err(Error::InvalidArgument(_))), "{:?}", missing_id.err());
    // A queue no definition names is refused before anything is written, as for an enqueue.
    let options = WorkflowOptions::with_id("lost");
    let nowhere = client.signal_with_start::<_, _, str>("nowhere", "inbox", "x".to_owned(), options, "m", None);
    assert!(matches!(nowhere.await, Err(Error::UnknownQueue(_))));
    let lost = "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'lost'";
    assert_eq!(pool.count(lost).await.unwrap(), 0);
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// Signal-with-start is one transaction: a message the database refuses (a trigger here)
/// leaves no workflow behind, so no started workflow ever lacks its message.
async fn signal_with_start_starts_nothing_when_its_message_is_refused(db) {
    let (rt, client) = inbox_runtime(&db).await;
    let pool = db.checks().await;
    let refuse = match db.backend {
        common::Backend::Postgres | common::Backend::Citus(_) => vec![
            "CREATE FUNCTION dbos.refuse() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$",
            "CREATE TRIGGER refuse BEFORE INSERT ON dbos.notifications FOR EACH ROW \
             WHEN (NEW.topic = 'refused') EXECUTE FUNCTION dbos.refuse()",
        ],
        common::Backend::Sqlite => vec![
            "CREATE TRIGGER dbos.refuse BEFORE INSERT ON notifications \
             WHEN NEW.topic = 'refused' BEGIN SELECT RAISE(ABORT, 'refused by test'); END",
        ],
    };
    for sql in refuse {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    let by_client = common::within(client.signal_with_start::<_, _, str>(
        "inbox",
        "inbox",
        "x".to_owned(),
        WorkflowOptions::with_id("queued"),
        "m",
        Some("refused"),
    ))
    .await;
    assert!(by_client.is_err(), "the refused message fails the call");
    let direct = common::within(rt.signal_with_start::<_, _, str>(
        "inbox",
        "x".to_owned(),
        WorkflowOptions::with_id("direct"),
        "m",
        Some("refused"),
    ))
    .await;
    assert!(direct.is_err(), "the refused message fails the call");
    let runs = "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid IN ('queued', 'direct')";
    assert_eq!(pool.count(runs).await.unwrap(), 0, "no workflow started without its message");
    let ok = rt
        .signal_with_start::<_, _, str>("inbox", "y".to_owned(), WorkflowOptions::with_id("ok"), "a", Some("in"))
        .await
        .unwrap();
    client.send("ok", &"b", Some("in")).await.unwrap();
    let got: Vec<String> = common::within(ok.result()).await.unwrap();
    assert_eq!(got, ["y", "a", "b"]);
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// DBOS's CLI reads a workflow that took an update: it lists and gets it, and its steps show the
/// accepted update as a step named `stead.update`.
#[tokio::test]
async fn dbos_tools_read_an_updated_workflow() {
    crate::require_dbos!();
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .workflow("cart", cart)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("cart", (), WorkflowOptions::with_id("dbos-cart"))
        .await
        .unwrap();
    let options = UpdateOptions::with_id("dbos-u1").timeout(Duration::from_secs(30));
    let total: u64 = rt
        .client()
        .update("dbos-cart", "add", &120u64, options)
        .await
        .unwrap();
    assert_eq!(total, 120);
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 120);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    let list = dbos_workflow_cli(&db.url, &["list"]).await;
    let listed = listed_entry(&list, "dbos-cart");
    assert_eq!(listed["status"], "SUCCESS", "{listed}");
    let got = dbos_workflow_cli(&db.url, &["get", "dbos-cart"]).await;
    assert_eq!(got["output"], serde_json::json!(120), "{got}");
    let steps = dbos_workflow_cli(&db.url, &["steps", "dbos-cart"]).await;
    let names: Vec<&str> = steps
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {steps}"))
        .iter()
        .filter_map(|s| s["function_name"].as_str())
        .collect();
    assert!(names.contains(&"stead.update"), "{names:?}");
}

/// The crash test's workflow id on the database at `url` (each backend's counted apart).
fn crash_id(url: &str) -> String {
    format!("crashed-cart-{}", url.starts_with("sqlite"))
}

/// Entry point of the crash test's child process; does nothing as an ordinary test.
#[tokio::test]
#[ignore = "run by an_answer_survives_a_crash_after_acceptance"]
async fn update_child() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let db = common::TestDb::existing(&url);
    let rt = common::builder(&db)
        .workflow("cart", cart)
        .launch()
        .await
        .unwrap();
    rt.start("cart", (), WorkflowOptions::with_id(crash_id(&url)))
        .await
        .unwrap();
    std::future::pending::<()>().await;
}

both_backends! {
/// The workflow's process is killed after answering; the recovered run replays the answer
/// without running the handler, and the caller's retry gets the same answer.
async fn an_answer_survives_a_crash_after_acceptance(db) {
    let id = &crash_id(&db.url);
    stead::migrate(&db.url, "dbos").await.unwrap();
    let pool = db.checks().await;
    let child = common::child_test("updates::update_child")
        .env(CHILD_DB, &db.url)
        .spawn()
        .unwrap();
    let mut child = common::KillOnDrop(child);
    let exists = format!("SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = '{id}'");
    common::wait_count(&pool, &exists, 1).await;
    let client = common::client(&db, stead::runtime::DEFAULT_APP_NAME).await;
    let first = client.update::<u64, u64>(id, "add", &30, UpdateOptions::with_id("k1"));
    assert_eq!(common::within(first).await.unwrap(), 30);
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();

    let rt = common::builder(&db).workflow("cart", cart).launch().await.unwrap();
    let retried = client.update::<u64, u64>(id, "add", &30, UpdateOptions::with_id("k1"));
    assert_eq!(common::within(retried).await.unwrap(), 30);
    let last = client.update::<u64, u64>(id, "add", &70, UpdateOptions::with_id("k2"));
    assert_eq!(common::within(last).await.unwrap(), 100, "the recovered run kept 30");
    let total: u64 = common::within(rt.client().handle(id).result()).await.unwrap();
    assert_eq!(total, 100);
    assert_eq!(common::body_run(id, 30), 0, "the recovered run did not run the handler again");
    assert_eq!(recorded_updates(&pool, id).await, 2);
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// DBOS's own client and CLI see only ordinary rows: the Python client sends an update as a
/// message on the reserved topic and reads its answer as an event; `dbos workflow list | get |
/// steps` show the updated workflow, its updates as steps named `stead.update`.
#[tokio::test]
async fn dbos_reads_an_updated_workflow_and_can_send_an_update() {
    use common::dbos_py::{ok_answer, py_client};
    use serde_json::json;
    require_dbos!();
    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .workflow("cart", cart)
        .launch()
        .await
        .unwrap();
    let handle = rt
        .start("cart", (), WorkflowOptions::with_id("py-cart"))
        .await
        .unwrap();
    let app = stead::runtime::DEFAULT_APP_NAME;
    let request = json!({"to": "py-cart", "topic": "stead.update::add",
                         "message": {"id": "py1", "input": 60}, "key": "stead.update::py1"});
    assert_eq!(
        ok_answer(py_client(&db.url, app, "send", request).await),
        json!(null)
    );
    let event = json!({"id": "py-cart", "key": "stead.update::py1", "timeout": 20});
    let answer = ok_answer(py_client(&db.url, app, "get_event", event).await);
    assert_eq!(answer, json!({"output": 60}));
    // stead's caller with the same update id gets the same answer.
    let again =
        rt.client()
            .update::<u64, u64>("py-cart", "add", &60, UpdateOptions::with_id("py1"));
    assert_eq!(common::within(again).await.unwrap(), 60);
    let refused = rt
        .client()
        .update::<u64, u64>("py-cart", "add", &0, UpdateOptions::default());
    assert!(matches!(
        common::within(refused).await,
        Err(Error::UpdateRejected { .. })
    ));
    let last = rt
        .client()
        .update::<u64, u64>("py-cart", "add", &40, UpdateOptions::default());
    assert_eq!(common::within(last).await.unwrap(), 100);
    assert_eq!(common::within(handle.result::<u64>()).await.unwrap(), 100);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    let list = dbos_workflow_cli(&db.url, &["list"]).await;
    let listed = listed_entry(&list, "py-cart");
    assert_eq!(
        (&listed["status"], &listed["output"]),
        (&json!("SUCCESS"), &json!(100))
    );
    let got = dbos_workflow_cli(&db.url, &["get", "py-cart"]).await;
    assert_eq!(got["workflow_id"], json!("py-cart"), "{got}");
    let steps = dbos_workflow_cli(&db.url, &["steps", "py-cart"]).await;
    let updates: Vec<&Value> = steps
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {steps}"))
        .iter()
        .filter(|s| s["function_name"] == "stead.update")
        .collect();
    assert_eq!(updates.len(), 2, "{steps}");
    assert_eq!(
        updates[0]["output"]["answer"],
        json!({"output": 60}),
        "{steps}"
    );
}

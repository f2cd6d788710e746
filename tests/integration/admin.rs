//! The admin HTTP endpoints, over real HTTP against a runtime on its own database: health and
//! readiness, listing and filters, one workflow and its steps, cancel, pause, resume and fork,
//! queues with their load, throughput, metrics, and the 4xx answers to bad requests. Who may call
//! them (the token, other sites) is `admin_access.rs`.

use std::time::Duration;

use serde_json::{json, Value};
use stead::admin::{self, AdminOptions, AdminServer};
use stead::{Context, Queue, Runtime, Status, WorkflowOptions};

use crate::common;
use crate::common::http::{self, Response};

pub(crate) const TOKEN: &str = "t0ken-for-tests";

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

async fn refuse(_ctx: Context, _: ()) -> Result<(), std::io::Error> {
    Err(std::io::Error::other("refused"))
}

/// Takes a step, then sleeps a minute (a cancel interrupts the sleep).
async fn slow(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.step("prepare", || async { Ok("ready".to_owned()) })
        .await?;
    ctx.sleep(Duration::from_secs(60)).await
}

pub(crate) async fn launch(db: &common::TestDb, queues: Vec<Queue>) -> Runtime {
    let mut builder = common::builder(db)
        .workflow("double", double)
        .workflow("refuse", refuse)
        .workflow("slow", slow);
    for q in queues {
        builder = builder.queue(q);
    }
    builder.launch().await.expect("launch")
}

pub(crate) async fn serve(rt: &Runtime, options: AdminOptions) -> AdminServer {
    admin::serve(rt.client(), options).await.expect("serve")
}

pub(crate) fn url(server: &AdminServer, path: &str) -> String {
    format!("{}{path}", server.url())
}

pub(crate) async fn get(server: &AdminServer, path: &str) -> Response {
    http::get(&url(server, path), None).await
}

pub(crate) async fn post(server: &AdminServer, path: &str, body: Option<&str>) -> Response {
    http::post(&url(server, path), None, body).await
}

fn ids(listing: &Response) -> Vec<String> {
    assert_eq!(listing.status, 200, "{}", listing.body);
    listing.json()["workflows"]
        .as_array()
        .expect("a workflows array")
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_owned())
        .collect()
}

/// `GET path` is a 400 whose message names `param`.
async fn assert_bad_param(server: &AdminServer, path: &str, param: &str) {
    let bad = get(server, path).await;
    assert_eq!(bad.status, 400, "{path}: {}", bad.body);
    assert!(bad.error().contains(param), "{path}: {}", bad.body);
}

/// A runtime served with default options, with workflow `id` (a `slow` one) running.
pub(crate) async fn serving_a_pending(db: &common::TestDb, id: &str) -> (Runtime, AdminServer) {
    let rt = launch(db, vec![]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    rt.start("slow", (), WorkflowOptions::with_id(id))
        .await
        .unwrap();
    wait_status(&rt, id, Status::Pending).await;
    (rt, server)
}

/// Waits until workflow `id` has `status` in the database.
pub(crate) async fn wait_status(rt: &Runtime, id: &str, status: Status) {
    for _ in 0..300 {
        if rt.client().handle(id).status().await.map(|s| s.status).ok() == Some(status) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{id} never became {status}: {:?}",
        rt.client().handle(id).status().await
    );
}

both_backends! {
async fn probes_answer_and_readiness_follows_the_database(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new().token(TOKEN)).await;
    assert!(
        server.local_addr().ip().is_loopback(),
        "loopback by default"
    );

    let live = get(&server, "/healthz").await;
    assert_eq!(
        (live.status, live.json()["status"].clone()),
        (200, "ok".into())
    );
    let ready = get(&server, "/readyz").await;
    assert_eq!(ready.status, 200, "no token needed: {}", ready.body);
    assert_eq!(ready.json()["status"], "ready");

    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let gone = get(&server, "/readyz").await;
    assert_eq!(gone.status, 503, "{}", gone.body);
    assert!(gone.error().contains("database"), "{}", gone.body);
    assert_eq!(get(&server, "/healthz").await.status, 200);
    server.shutdown().await;
}

async fn workflows_are_listed_with_filters_and_bad_parameters_are_named(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    for i in 0..3u64 {
        let h = rt
            .start("double", i, WorkflowOptions::with_id(format!("d-{i}")))
            .await
            .unwrap();
        h.result::<u64>().await.unwrap();
    }
    let failed = rt
        .start("refuse", (), WorkflowOptions::with_id("r-0"))
        .await
        .unwrap();
    assert!(failed.result::<()>().await.is_err());
    rt.start("slow", (), WorkflowOptions::with_id("s-0"))
        .await
        .unwrap();
    wait_status(&rt, "s-0", Status::Pending).await;

    let all = ids(&get(&server, "/api/workflows").await);
    assert_eq!(all, ["s-0", "r-0", "d-2", "d-1", "d-0"], "newest first");
    let oldest = ids(&get(&server, "/api/workflows?order=asc&limit=2&offset=1").await);
    assert_eq!(oldest, ["d-1", "d-2"]);
    let named = ids(&get(&server, "/api/workflows?name=double&order=asc").await);
    assert_eq!(named, ["d-0", "d-1", "d-2"]);
    let by_status = ids(&get(&server, "/api/workflows?status=error,pending").await);
    assert_eq!(by_status, ["s-0", "r-0"]);
    let repeated = ids(&get(
        &server,
        "/api/workflows?status=ERROR&status=SUCCESS&limit=1",
    )
    .await);
    assert_eq!(repeated, ["r-0"]);
    let none = ids(&get(&server, "/api/workflows?queue=nowhere").await);
    assert!(none.is_empty());
    let row = get(&server, "/api/workflows?name=slow").await.json()["workflows"][0].clone();
    assert_eq!(
        (row["status"].as_str(), row["name"].as_str()),
        (Some("PENDING"), Some("slow"))
    );
    assert!(row["created_at_ms"].as_i64().unwrap() > 0);
    assert!(row.get("input").is_none(), "listings carry no payloads");

    for (query, param) in [
        ("status=RUNNING", "status"),
        ("limit=-1", "limit"),
        ("limit=5000", "limit"),
        ("offset=x", "offset"),
        ("order=up", "order"),
        ("colour=red", "colour"),
    ] {
        assert_bad_param(&server, &format!("/api/workflows?{query}"), param).await;
    }
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}

async fn one_workflow_shows_its_payloads_and_steps_and_unknown_ids_are_404(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    let h = rt
        .start("double", 21u64, WorkflowOptions::with_id("wf/with slash"))
        .await
        .unwrap();
    assert_eq!(h.result::<u64>().await.unwrap(), 42);
    let failed = rt
        .start("refuse", (), WorkflowOptions::with_id("bad-1"))
        .await
        .unwrap();
    assert!(failed.result::<()>().await.is_err());

    let one = get(&server, "/api/workflows/wf%2Fwith%20slash").await;
    assert_eq!(one.status, 200, "{}", one.body);
    let w = one.json();
    assert_eq!(w["id"], "wf/with slash");
    assert_eq!(
        (w["status"].clone(), w["input"].clone()),
        ("SUCCESS".into(), 21.into())
    );
    assert_eq!(w["output"], 42);
    assert_eq!(w["error"], Value::Null);
    let bad = get(&server, "/api/workflows/bad-1").await.json();
    assert_eq!(bad["status"], "ERROR");
    assert_eq!(bad["error"]["message"], "refused");

    let steps = get(&server, "/api/workflows/wf%2Fwith%20slash/steps").await;
    assert_eq!(steps.status, 200, "{}", steps.body);
    let steps = steps.json()["steps"].clone();
    assert_eq!(steps.as_array().map(Vec::len), Some(1));
    assert_eq!(steps[0]["function_id"], 1);
    assert_eq!(
        (steps[0]["name"].clone(), steps[0]["output"].clone()),
        ("double".into(), 42.into())
    );
    assert!(steps[0]["completed_at_ms"].as_i64() >= steps[0]["started_at_ms"].as_i64());

    for path in ["/api/workflows/nope", "/api/workflows/nope/steps"] {
        let missing = get(&server, path).await;
        assert_eq!(missing.status, 404, "{path}");
        // Worded as the library and the CLI word it.
        assert_eq!(missing.error(), stead::Error::NotFound("nope".into()).to_string());
    }
    let nowhere = get(&server, "/api/nothing-here").await;
    assert_eq!(nowhere.status, 404);
    assert!(nowhere.error().contains("/api/nothing-here"));
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn cancel_resume_and_fork_act_and_refuse_bad_requests(db) {
    let (rt, server) = serving_a_pending(&db, "s-1").await;

    let cancelled = post(&server, "/api/workflows/s-1/cancel", None).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.json()["status"], "CANCELLED");
    assert_eq!(
        rt.client().handle("s-1").status().await.unwrap().status,
        Status::Cancelled
    );

    let resumed = post(&server, "/api/workflows/s-1/resume", None).await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let now = resumed.json()["status"].as_str().unwrap().to_owned();
    assert!(now == "ENQUEUED" || now == "PENDING", "{now}");
    wait_status(&rt, "s-1", Status::Pending).await;

    // A pause keeps DBOS's status and says it is paused; a resume lifts it; a finished
    // workflow cannot be paused.
    let paused = post(&server, "/api/workflows/s-1/pause", None).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.json()["paused"], true, "{}", paused.body);
    wait_status(&rt, "s-1", Status::Enqueued).await;
    let shown = get(&server, "/api/workflows/s-1").await.json();
    assert_eq!((&shown["status"], &shown["paused"]), (&json!("ENQUEUED"), &json!(true)));
    assert!(shown["paused_at_ms"].is_i64(), "{shown}");
    let resumed = post(&server, "/api/workflows/s-1/resume", None).await;
    assert_eq!(resumed.json()["paused"], false, "{}", resumed.body);
    wait_status(&rt, "s-1", Status::Pending).await;

    let h = rt
        .start("double", 5u64, WorkflowOptions::with_id("d-5"))
        .await
        .unwrap();
    h.result::<u64>().await.unwrap();
    let forked = post(
        &server,
        "/api/workflows/d-5/fork",
        Some(r#"{"step": 1, "id": "d-5-copy"}"#),
    )
    .await;
    assert_eq!(forked.status, 200, "{}", forked.body);
    assert_eq!(forked.json()["id"], "d-5-copy");
    let copy: u64 = common::within(rt.client().handle("d-5-copy").result())
        .await
        .unwrap();
    assert_eq!(copy, 10);
    assert_eq!(
        rt.client().handle("d-5-copy")
            .status()
            .await
            .unwrap()
            .forked_from
            .as_deref(),
        Some("d-5")
    );

    for (body, param) in [
        (None, "body"),
        (Some(""), "body"),
        (Some("not json"), "body"),
        (Some(r#"{"id": "x"}"#), "step"),
        (Some(r#"{"step": -2}"#), "step"),
        (Some(r#"{"step": 0}"#), "step"),
        (Some(r#"{"step": 1, "colour": "red"}"#), "colour"),
    ] {
        let bad = post(&server, "/api/workflows/d-5/fork", body).await;
        assert_eq!(bad.status, 400, "{body:?}: {}", bad.body);
        assert!(bad.error().contains(param), "{body:?}: {}", bad.body);
    }
    let finished = post(&server, "/api/workflows/d-5/pause", None).await;
    assert_eq!(finished.status, 409, "{}", finished.body);
    for action in ["cancel", "pause", "resume"] {
        let missing = post(&server, &format!("/api/workflows/ghost/{action}"), None).await;
        assert_eq!(missing.status, 404, "{action}: {}", missing.body);
        assert_eq!(missing.error(), "workflow \"ghost\" not found");
    }
    let missing = post(&server, "/api/workflows/ghost/fork", Some(r#"{"step": 1}"#)).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    let wrong_method = get(&server, "/api/workflows/s-1/cancel").await;
    assert_eq!(wrong_method.status, 405);
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}

async fn attributes_are_listed_filtered_and_changed(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    for (id, customer) in [("a-1", "acme"), ("a-2", "globex")] {
        let options = WorkflowOptions::with_id(id).attribute("customer", customer);
        rt.start("double", 1u64, options).await.unwrap().result::<u64>().await.unwrap();
    }
    let acme = get(&server, "/api/workflows?attribute=customer%3Dacme").await;
    assert_eq!(ids(&acme), ["a-1"]);
    assert_eq!(acme.json()["workflows"][0]["attributes"]["customer"], "acme");
    assert_bad_param(&server, "/api/workflows?attribute=nokey", "attribute").await;

    let path = "/api/workflows/a-1/attributes";
    let merged = post(&server, path, Some(r#"{"attributes": {"n": 2}, "merge": true}"#)).await;
    assert_eq!(merged.status, 200, "{}", merged.body);
    let want = serde_json::json!({"customer": "acme", "n": 2});
    assert_eq!(merged.json()["attributes"], want);
    let cleared = post(&server, path, Some(r#"{"attributes": null}"#)).await;
    assert_eq!(cleared.json()["attributes"], Value::Null);
    for (body, param) in [
        (Some(r#"{"attributes": null, "merge": true}"#), "attributes"),
        (Some(r#"{"attributes": [1]}"#), "body"),
        (Some(r#"{"attributes": {}, "colour": 1}"#), "colour"),
    ] {
        let bad = post(&server, path, body).await;
        assert_eq!(bad.status, 400, "{body:?}: {}", bad.body);
        assert!(bad.error().contains(param), "{body:?}: {}", bad.body);
    }
    let missing = post(&server, "/api/workflows/ghost/attributes", Some("{}")).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}

async fn queues_show_their_limits_depth_lag_and_running_count(db) {
    let one_at_a_time = Queue::new("narrow")
        .concurrency(1)
        .worker_concurrency(1)
        .rate_limit(10, Duration::from_secs(2))
        .polling_interval(Duration::from_millis(100));
    let rt = launch(&db, vec![one_at_a_time, Queue::new("idle")]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    // Another application's queue is listed too, with its application; `app` narrows.
    let billing = common::client(&db, "billing").await;
    billing.create_queue(Queue::new("payouts")).await.unwrap();
    let names = |r: Response| -> Vec<String> {
        assert_eq!(r.status, 200, "{}", r.body);
        let listed = r.json()["queues"].as_array().unwrap().clone();
        listed.iter().map(|q| q["name"].as_str().unwrap().to_owned()).collect()
    };
    let theirs = names(get(&server, "/api/queues?app=billing").await);
    assert_eq!(theirs, ["_dbos_internal_queue", "payouts"]);
    let ours = names(get(&server, "/api/queues?app=stead").await);
    assert_eq!(ours, ["_dbos_internal_queue", "idle", "narrow"]);
    assert_bad_param(&server, "/api/queues?application=x", "application").await;
    for i in 0..3 {
        rt.enqueue(
            "narrow",
            "slow",
            (),
            WorkflowOptions::with_id(format!("n-{i}")),
        )
        .await
        .unwrap();
    }
    wait_status(&rt, "n-0", Status::Pending).await;
    // The two behind it have waited at least this long.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let queues = get(&server, "/api/queues").await;
    assert_eq!(queues.status, 200, "{}", queues.body);
    let queues = queues.json()["queues"].clone();
    let names: Vec<&str> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["_dbos_internal_queue", "idle", "narrow", "payouts"]);
    let apps: Vec<&Value> = queues.as_array().unwrap().iter().map(|q| &q["app"]).collect();
    assert_eq!(apps, [&Value::Null, &"stead".into(), &"stead".into(), &"billing".into()]);
    assert_eq!(queues[0]["internal"], true);
    let narrow = &queues[2];
    assert_eq!(
        (narrow["depth"].clone(), narrow["running"].clone()),
        (2.into(), 1.into())
    );
    let lag = narrow["lag_ms"].as_u64().unwrap();
    assert!((300..60_000).contains(&lag), "{narrow}");
    assert_eq!(
        (
            narrow["concurrency"].clone(),
            narrow["worker_concurrency"].clone()
        ),
        (1.into(), 1.into())
    );
    assert_eq!(narrow["rate_limit"]["limit"], 10);
    assert_eq!(narrow["rate_limit"]["period_ms"], 2000);
    assert_eq!(narrow["polling_interval_ms"], 100);
    assert_eq!(
        (narrow["internal"].clone(), narrow["partitioned"].clone()),
        (false.into(), false.into())
    );
    let idle = &queues[1];
    assert_eq!(
        (idle["depth"].clone(), idle["running"].clone()),
        (0.into(), 0.into())
    );
    assert_eq!(idle["lag_ms"], 0);
    assert_eq!(idle["concurrency"], Value::Null);
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}

async fn throughput_counts_completions_per_bucket(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    for i in 0..4u64 {
        let h = rt
            .start("double", i, WorkflowOptions::default())
            .await
            .unwrap();
        h.result::<u64>().await.unwrap();
    }
    let failed = rt
        .start("refuse", (), WorkflowOptions::default())
        .await
        .unwrap();
    assert!(failed.result::<()>().await.is_err());

    let t = get(&server, "/api/throughput?minutes=2&bucket=5").await;
    assert_eq!(t.status, 200, "{}", t.body);
    let t = t.json();
    assert_eq!(t["bucket_ms"], 5000);
    let buckets = t["buckets"].as_array().unwrap();
    assert_eq!(
        buckets.len(),
        25,
        "2 minutes of 5 s buckets, plus the current one"
    );
    let sum = |key: &str| {
        buckets
            .iter()
            .map(|b| b[key].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!((sum("succeeded"), sum("failed")), (4, 1));
    let starts: Vec<i64> = buckets
        .iter()
        .map(|b| b["start_ms"].as_i64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[1] - w[0] == 5000));
    assert_eq!(starts[0] % 5000, 0, "aligned");
    // Counts per status, under a listing's filters (not its paging).
    let counts = get(&server, "/api/counts").await;
    assert_eq!(counts.status, 200, "{}", counts.body);
    let counts = counts.json();
    assert_eq!((counts["counts"]["SUCCESS"].clone(), counts["total"].clone()), (4.into(), 5.into()));
    assert_eq!(counts["counts"]["ERROR"], 1);
    let named = get(&server, "/api/counts?name=refuse&app=stead").await.json();
    assert_eq!(named, serde_json::json!({ "counts": { "ERROR": 1 }, "total": 1 }));
    let other_app = get(&server, "/api/counts?app=billing").await.json();
    assert_eq!(other_app["total"], 0);
    assert_bad_param(&server, "/api/counts?limit=1", "limit").await;
    let default = get(&server, "/api/throughput").await.json();
    assert_eq!(default["bucket_ms"], 10_000);

    for (query, param) in [
        ("minutes=0", "minutes"),
        ("bucket=-5", "bucket"),
        ("bucket=x", "bucket"),
        ("span=3", "span"),
    ] {
        assert_bad_param(&server, &format!("/api/throughput?{query}"), param).await;
    }
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn metrics_come_from_the_given_recorder_or_are_404(db) {
    let rt = launch(&db, vec![]).await;
    let bare = serve(&rt, AdminOptions::new()).await;
    let none = get(&bare, "/metrics").await;
    assert_eq!(none.status, 404);
    assert!(none.error().contains("Prometheus"), "{}", none.body);

    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!("admin_test_requests_total", "kind" => "probe").increment(3);
    });
    let server = serve(&rt, AdminOptions::new().prometheus(handle).token(TOKEN)).await;
    let scraped = http::get(&url(&server, "/metrics"), Some(TOKEN)).await;
    assert_eq!(scraped.status, 200, "{}", scraped.body);
    assert!(scraped
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    assert!(
        scraped
            .body
            .contains("admin_test_requests_total{kind=\"probe\"} 3"),
        "{}",
        scraped.body
    );
    bare.shutdown().await;
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
/// `/api/executors`: the fleet's roster, this executor live (an embedded database keeps none).
async fn the_executors_route_lists_this_executor_live(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new()).await;
    let listing = get(&server, "/api/executors").await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    let body = listing.json();
    let executors = body["executors"].as_array().expect("an executors array");
    if db.is_sqlite() {
        assert!(executors.is_empty(), "{body}");
    } else {
        let ours = rt.client().list_executors().await.unwrap();
        assert_eq!(executors.len(), 1, "{body}");
        assert_eq!(executors[0]["executor_id"], ours[0].executor_id.as_str());
        assert_eq!(executors[0]["live"], true);
        assert_eq!(executors[0]["pid"], std::process::id());
    }
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}
}

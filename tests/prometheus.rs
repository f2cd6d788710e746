//! The Prometheus exporter: installed on an ephemeral port, scraped over plain HTTP right after
//! launch (every documented series, at zero) and after a queue workload.
//!
//! A binary of its own (the other integration tests are `tests/integration`): the recorder is
//! process-wide, so every other test's workflows beside it would move the series it expects at
//! zero, and only one suite per process can install a recorder.
#![cfg(feature = "prometheus")]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use stead::metrics::PrometheusError;
use stead::{Context, Queue, RetryPolicy, WorkflowOptions};

static FLAKED: AtomicBool = AtomicBool::new(false);

/// Three steps. Input 0 fails its last step; input 1's second step fails once and is retried.
async fn order(ctx: Context, n: u32) -> stead::Result<u32> {
    let a = ctx.step("price", || async move { Ok(n) }).await?;
    let b = ctx
        .step_typed("reserve", || async move {
            if n == 1 && !FLAKED.swap(true, Ordering::SeqCst) {
                return Err(std::io::Error::other("flaky"));
            }
            Ok(a + 1)
        })
        .retry(RetryPolicy::attempts(3).interval(Duration::from_millis(10)))
        .await?;
    ctx.step_typed("ship", || async move {
        if n == 0 {
            return Err(std::io::Error::other("no stock"));
        }
        Ok(b + 1)
    })
    .await
}

/// Scheduled once a year: its schedule's series exists, it never runs during the test.
async fn report(_ctx: Context, _at: stead::schedules::ScheduledTime) -> stead::Result<()> {
    Ok(())
}

fn free_port() -> SocketAddr {
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

fn scrape(addr: SocketAddr) -> String {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the sample `name{labels}` (labels in the order stead emits them).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

/// The metric names the README documents (its metrics table), so the docs and the exporter
/// cannot drift apart.
fn documented_names() -> Vec<&'static str> {
    let names: Vec<&str> = include_str!("../README.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `stead_"))
        .filter_map(|l| Some(&l[..l.find('`')?]))
        .collect();
    assert!(names.len() >= 20, "the README's metrics table: {names:?}");
    names
}

/// A scrape right after launch, before any work: every documented series is there, zero-valued,
/// so alerts and `rate()` work before the first event.
fn every_documented_series_exists_at_zero(text: &str) {
    for name in documented_names() {
        let name = format!("stead_{name}");
        let listed = text.lines().any(|l| {
            l.strip_prefix(name.as_str()).is_some_and(|rest| {
                rest.starts_with(['{', ' '])
                    || ["_bucket{", "_sum", "_count"]
                        .iter()
                        .any(|s| rest.starts_with(s))
            })
        });
        assert!(listed, "{name} is missing right after launch:\n{text}");
    }
    // One series per documented label value this process knows of at launch, each at zero.
    for series in [
        r#"stead_workflows_started_total{workflow="order"}"#,
        r#"stead_workflows_finished_total{workflow="order",status="ERROR"}"#,
        r#"stead_workflows_finished_total{workflow="order",status="CANCELLED"}"#,
        r#"stead_workflows_finished_total{workflow="order",status="MAX_RECOVERY_ATTEMPTS_EXCEEDED"}"#,
        r#"stead_workflow_recoveries_total{workflow="order"}"#,
        r#"stead_step_retries_total{workflow="order"}"#,
        r#"stead_step_duration_seconds_count{workflow="order"}"#,
        r#"stead_queue_claimed_total{queue="orders"}"#,
        r#"stead_queue_deduplicated_total{queue="orders"}"#,
        r#"stead_queue_rate_limited_total{queue="orders"}"#,
        r#"stead_queue_lag_seconds{queue="orders"}"#,
        r#"stead_queue_start_delay_seconds_count{queue="orders"}"#,
        r#"stead_db_errors_total{lane="checkpoint",kind="transient"}"#,
        r#"stead_db_errors_total{lane="claim",kind="query"}"#,
        r#"stead_actor_restarts_total{actor="database"}"#,
        r#"stead_actor_restarts_total{actor="queue:orders"}"#,
        r#"stead_schedule_firings_total{schedule="yearly"}"#,
        r#"stead_schedule_held_total{schedule="yearly"}"#,
        "stead_launch_recoveries_total",
        "stead_workflows_collected_total",
    ] {
        assert_eq!(sample(text, series), Some(0.0), "{series}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_after_a_queue_workload_reports_its_counts_and_histograms() {
    let addr = free_port();
    stead::metrics::install_prometheus(addr).unwrap();
    assert!(
        matches!(
            stead::metrics::install_prometheus(addr),
            Err(PrometheusError::AddressInUse(a)) if a == addr
        ),
        "the exporter holds the address"
    );
    assert!(matches!(
        stead::metrics::install_prometheus(free_port()),
        Err(PrometheusError::RecorderInstalled)
    ));

    let db = common::TestDb::new().await;
    let rt = common::builder(&db)
        .workflow("order", order)
        .queue(Queue::new("orders").worker_concurrency(4))
        .workflow("report", report)
        .schedule(stead::schedules::Schedule::new(
            "yearly",
            "report",
            "0 0 3 1 1 *",
        ))
        .launch()
        .await
        .unwrap();
    every_documented_series_exists_at_zero(&scrape(addr));
    let mut handles = Vec::new();
    for n in 0..20u32 {
        let options = WorkflowOptions::with_id(format!("order-{n}"));
        handles.push(rt.enqueue("orders", "order", n, options).await.unwrap());
    }
    for (n, h) in handles.iter().enumerate() {
        let result = common::within(h.result::<u32>()).await;
        match n {
            0 => assert!(result.is_err(), "order 0 fails"),
            _ => assert_eq!(result.unwrap(), n as u32 + 2),
        }
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();

    let text = scrape(addr);
    let value = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}\n{text}"));
    assert_eq!(
        value(r#"stead_workflows_started_total{workflow="order"}"#),
        20.0
    );
    assert_eq!(
        value(r#"stead_workflows_finished_total{workflow="order",status="SUCCESS"}"#),
        19.0
    );
    assert_eq!(
        value(r#"stead_workflows_finished_total{workflow="order",status="ERROR"}"#),
        1.0
    );
    assert_eq!(
        value(r#"stead_steps_total{workflow="order",outcome="ok"}"#),
        59.0
    );
    assert_eq!(
        value(r#"stead_steps_total{workflow="order",outcome="error"}"#),
        1.0
    );
    assert_eq!(value(r#"stead_step_retries_total{workflow="order"}"#), 1.0);
    assert_eq!(value(r#"stead_queue_claimed_total{queue="orders"}"#), 20.0);
    assert_eq!(value(r#"stead_queue_running{queue="orders"}"#), 0.0);
    assert_eq!(value("stead_workflows_running"), 0.0);

    // Histograms have the configured buckets; every step lands in +Inf.
    for le in ["0.0001", "0.001", "1", "60", "+Inf"] {
        value(&format!(
            r#"stead_step_duration_seconds_bucket{{workflow="order",le="{le}"}}"#
        ));
    }
    assert_eq!(
        value(r#"stead_step_duration_seconds_bucket{workflow="order",le="+Inf"}"#),
        60.0
    );
    assert_eq!(
        value(r#"stead_step_duration_seconds_count{workflow="order"}"#),
        60.0
    );
    // Each of the 20 workflows' last step is written with its finish, the others on the lane.
    assert_eq!(
        value(r#"stead_db_flush_size_sum{lane="checkpoint"}"#),
        40.0,
        "every step but the last checkpointed once"
    );
    for le in ["1", "64", "4096"] {
        value(&format!(
            r#"stead_db_flush_size_bucket{{lane="checkpoint",le="{le}"}}"#
        ));
    }
    value(r#"stead_queue_claim_seconds_bucket{queue="orders",le="0.01"}"#);
    // Each workflow's wait to start, in buckets up to an hour.
    assert_eq!(
        value(r#"stead_queue_start_delay_seconds_count{queue="orders"}"#),
        20.0
    );
    value(r#"stead_queue_start_delay_seconds_bucket{queue="orders",le="3600"}"#);
    assert_eq!(value(r#"stead_queue_lag_seconds{queue="orders"}"#), 0.0);
    assert!(
        text.contains("# HELP stead_workflows_started_total"),
        "descriptions are registered"
    );
}

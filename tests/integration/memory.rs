//! Memory: 10,000 workflows sleeping at once in one process. Ignored by default (it takes a few
//! seconds and wants a quiet machine and the process to itself):
//! `cargo test --test integration memory:: -- --ignored --nocapture`.

use std::time::Duration;

use stead::{Context, WorkflowOptions};

use crate::common;

async fn napper(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.sleep(Duration::from_secs(600)).await
}

fn resident_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it on its own"]
async fn ten_thousand_sleeping_workflows_fit_in_200_mb() {
    const N: usize = 10_000;
    let db = common::TestDb::new().await;
    let pool = db.pool().await;
    let rt = common::builder(&db)
        .workflow("napper", napper)
        .launch()
        .await
        .unwrap();
    let before = resident_mb();
    let mut starts = tokio::task::JoinSet::new();
    for _ in 0..N {
        let rt = rt.clone();
        starts.spawn(async move {
            rt.start("napper", (), WorkflowOptions::default())
                .await
                .map(|_| ())
        });
    }
    while let Some(started) = starts.join_next().await {
        started.unwrap().unwrap();
    }
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'DBOS.sleep'",
        N as i64,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = resident_mb();
    eprintln!(
        "{N} sleeping workflows: resident {rss:.1} MB (the process held {before:.1} MB before them)"
    );
    assert!(rss < 200.0, "{rss:.1} MB resident");
    drop(rt);
}

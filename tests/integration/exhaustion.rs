//! Resources running out on the server: every connection slot taken by other clients while
//! stead's own connections are cut. stead waits (its calls retry with backoff) and recovers once
//! slots free up: every workflow finishes, no step body runs twice.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use stead::{Context, Runtime, WorkflowOptions};

use crate::common::cluster::{Cluster, Setup};
use crate::{common, require_cluster};

async fn paced(ctx: Context, steps: u32) -> stead::Result<u32> {
    common::counted_steps(&ctx, steps, Duration::from_millis(100)).await
}

/// A runtime on `url` running `paced`, and `n` of them started with ids `<prefix><i>`.
async fn start_paced(
    url: &str,
    executor: &str,
    prefix: &str,
    n: u32,
) -> (Runtime, Vec<stead::WorkflowHandle>) {
    let rt = Runtime::builder()
        .database_url(url)
        .app_version("exhaustion-1")
        .executor_id(executor)
        .pool_size(4)
        .workflow("paced", paced)
        .launch()
        .await
        .unwrap();
    let mut handles = Vec::new();
    for w in 0..n {
        let opts = WorkflowOptions::with_id(format!("{prefix}{w}"));
        handles.push(rt.start("paced", 10u32, opts).await.unwrap());
    }
    (rt, handles)
}

/// Waits for every handle's result (`0 + … + 9`) after the resource came back, then checks each
/// of the `n × 10` step bodies ran once.
async fn all_finish_once(prefix: &str, handles: &[stead::WorkflowHandle]) {
    for (w, h) in handles.iter().enumerate() {
        let result = tokio::time::timeout(Duration::from_secs(120), h.result::<u32>())
            .await
            .unwrap_or_else(|_| panic!("{prefix}{w} did not finish after the resource came back"))
            .unwrap_or_else(|e| panic!("{prefix}{w}: {e}"));
        assert_eq!(result, 45);
    }
    let runs = common::body_runs_by_step(prefix);
    assert_eq!(runs.len(), handles.len() * 10, "every step ran");
    let again: Vec<_> = runs.iter().filter(|(_, n)| *n > 1).collect();
    assert!(again.is_empty(), "step bodies ran twice: {again:?}");
}

/// Takes every free slot of the server, cutting stead's connections until it holds none (its
/// reconnects race the filler's; the filler keeps every slot it wins).
async fn take_every_slot(url: &str) -> Vec<PgConnection> {
    let mut held = Vec::new();
    for _ in 0..100 {
        while let Ok(conn) = PgConnection::connect(url).await {
            held.push(conn);
        }
        let cutter = held.last_mut().expect("at least one slot");
        let stead: i64 = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'stead'",
        )
        .fetch_one(cutter)
        .await
        .unwrap();
        if stead == 0 {
            return held;
        }
    }
    panic!("stead kept winning connection slots back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_connection_slot_taken_stead_waits_and_recovers() {
    require_cluster!();
    let cluster = Cluster::with(Setup {
        conf: vec!["max_connections = 30".into()],
        ..Setup::default()
    });
    cluster.create_db("t");
    let url = cluster.url("t");
    let (rt, handles) = start_paced(&url, "exhausted", "mx-", 40).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Starved for 3 s: stead has no connection at all and cannot open one.
    let held = take_every_slot(&url).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(held);

    all_finish_once("mx-", &handles).await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Fills the filesystem at `mount` with a file of its own until a write fails for want of space.
fn fill_disk(mount: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = mount.join("fill");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 1 << 20];
    loop {
        if let Err(e) = file.write_all(&chunk).and_then(|_| file.sync_data()) {
            assert_eq!(e.raw_os_error(), Some(28), "ENOSPC, not {e}");
            return path;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stalls_work_which_finishes_once_space_is_freed() {
    require_cluster!();
    if !common::cluster::is_root() {
        common::skip(
            concat!(file!(), ":", line!()),
            "mounting a tmpfs needs root",
        );
        return;
    }
    let cluster = Cluster::with(Setup {
        conf: vec!["min_wal_size = '2MB'".into(), "max_wal_size = '8MB'".into()],
        tmpfs_mib: Some(128),
    });
    cluster.create_db("t");
    let url = cluster.url("t");
    let (rt, handles) = start_paced(&url, "full-disk", "fd-", 30).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fill = fill_disk(cluster.mount().unwrap());
    let outputs = || async {
        let mut c = PgConnection::connect(&url).await.ok()?;
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM dbos.operation_outputs")
            .fetch_one(&mut c)
            .await
            .ok()
    };
    let at_fill = outputs().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = outputs().await;
    eprintln!("outputs at fill {at_fill:?}, 5 s later {after:?}");
    let log = cluster.log();
    assert!(
        log.contains("No space left on device"),
        "the server ran out of space; its log:\n{log}"
    );
    // Meanwhile a new workflow is refused with an error or waits; it is never lost.
    let late = tokio::time::timeout(
        Duration::from_secs(3),
        rt.start("paced", 1u32, WorkflowOptions::with_id("fd-late")),
    )
    .await;
    let late = match &late {
        Ok(Ok(_)) => "started".to_owned(),
        Ok(Err(e)) => format!("refused: {e}"),
        Err(_) => "still waiting after 3 s".to_owned(),
    };

    // Space freed, as an operator would free it.
    std::fs::remove_file(&fill).unwrap();
    if !cluster.accepting() {
        cluster.start_again();
    }
    for (w, h) in handles.iter().enumerate() {
        let result = tokio::time::timeout(Duration::from_secs(120), h.result::<u32>())
            .await
            .unwrap_or_else(|_| panic!("fd-{w} did not finish after space was freed"))
            .unwrap_or_else(|e| panic!("fd-{w}: {e}"));
        assert_eq!(result, 45);
    }
    let runs = common::body_runs_by_step("fd-");
    let again: Vec<_> = runs.iter().filter(|(_, n)| *n > 1).collect();
    assert!(again.len() <= 30, "step bodies re-ran in a loop: {again:?}");
    eprintln!(
        "full disk: a start meanwhile {late}; {} bodies re-ran",
        again.len()
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

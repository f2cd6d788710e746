//! A fleet: executors sharing one Postgres queue. Each claims work within its own limit; an
//! enqueue anywhere wakes them all (NOTIFY), and no workflow runs twice.
//!
//! ```text
//! # two executors in this process, a client enqueueing 12 jobs
//! cargo run --example fleet
//! # or as separate processes: two workers, then a producer
//! cargo run --example fleet -- worker fleet-a
//! cargo run --example fleet -- worker fleet-b
//! cargo run --example fleet -- enqueue 12
//! ```
//!
//! `STEAD_DATABASE_URL` defaults to `postgres://postgres@127.0.0.1:5432/postgres`.

use std::collections::BTreeMap;
use std::time::Duration;

use stead::{Client, Context, Queue, Runtime, WorkflowOptions};

async fn render(ctx: Context, frame: u32) -> stead::Result<u32> {
    ctx.step("render", || async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(frame * frame)
    })
    .await
}

fn url() -> String {
    std::env::var("STEAD_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// One executor: same application name and version as the others, its own executor id.
async fn executor(id: &str) -> stead::Result<Runtime> {
    Runtime::builder()
        .database_url(url())
        .app_name("fleet")
        .app_version("fleet-1")
        .executor_id(id)
        .workflow("render", render)
        .queue(Queue::new("frames").worker_concurrency(3))
        .launch()
        .await
}

/// Enqueues `n` frames from a client and reports which executor ran each.
async fn produce(n: u32) -> stead::Result<()> {
    let client = Client::connect(&url()).await?;
    let run = uuid_suffix();
    let mut handles = Vec::new();
    for frame in 0..n {
        let options = WorkflowOptions::with_id(format!("frame-{run}-{frame}"));
        handles.push(client.enqueue("frames", "render", frame, options).await?);
    }
    let mut by_executor = BTreeMap::<String, u32>::new();
    for handle in handles {
        let pixels: u32 = handle.result().await?;
        let executor = handle.status().await?.executor_id.unwrap_or_default();
        println!("{} = {pixels:>3} by {executor}", handle.id());
        *by_executor.entry(executor).or_default() += 1;
    }
    println!("claimed per executor: {by_executor:?}");
    client.shutdown(Duration::from_secs(5)).await
}

/// A short id for this run's workflow ids, so runs do not find each other's results.
fn uuid_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{:x}", nanos % 0xffff_ffff)
}

#[tokio::main]
async fn main() -> stead::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["worker", id] => {
            let runtime = executor(id).await?;
            println!("executor {id} serving queue frames; Ctrl-C to stop");
            let _ = tokio::signal::ctrl_c().await;
            runtime.shutdown(Duration::from_secs(5)).await
        }
        ["enqueue", n] => produce(n.parse().unwrap_or(12)).await,
        [] => {
            let (a, b) = (executor("fleet-a").await?, executor("fleet-b").await?);
            produce(12).await?;
            a.shutdown(Duration::from_secs(5)).await?;
            b.shutdown(Duration::from_secs(5)).await
        }
        _ => {
            eprintln!("usage: fleet [worker <executor id> | enqueue <n>]");
            std::process::exit(2)
        }
    }
}

//! A fleet that heals itself: executors sharing one Postgres queue. Each claims work within its
//! own limit; an enqueue anywhere wakes them all (NOTIFY). Kill one mid-work and a survivor
//! adopts its unfinished workflows, which resume from their checkpoints.
//!
//! ```text
//! # two worker processes; a client enqueues 12 frames; fleet-a is killed (SIGKILL) while it
//! # renders, and fleet-b adopts what it left
//! cargo run --example fleet
//! # or by hand: two workers, then a producer (kill a worker with Ctrl-C or kill -9)
//! cargo run --example fleet -- worker fleet-a
//! cargo run --example fleet -- worker fleet-b
//! cargo run --example fleet -- enqueue 12
//! cargo run --example fleet -- executors
//! ```
//!
//! `STEAD_DATABASE_URL` defaults to `postgres://postgres@127.0.0.1:5432/postgres`.

use std::collections::BTreeMap;
use std::time::Duration;

use stead::{
    client::ClientOptions, client::ListWorkflows, Client, Context, Queue, Runtime, Status,
    WorkflowOptions,
};

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

/// A client acting for the fleet's application (its queue, its executors).
async fn client() -> stead::Result<Client> {
    let options = ClientOptions {
        app_name: Some("fleet".into()),
        ..ClientOptions::default()
    };
    Client::connect_with(&url(), options).await
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

/// Enqueues `n` frames from a client and reports which executor ran each; with `kill`, kills
/// that worker process once it runs a frame.
async fn produce(n: u32, mut kill: Option<(&str, std::process::Child)>) -> stead::Result<()> {
    let client = client().await?;
    let run = uuid_suffix();
    let mut handles = Vec::new();
    for frame in 0..n {
        let options = WorkflowOptions::with_id(format!("frame-{run}-{frame}"));
        handles.push(client.enqueue("frames", "render", frame, options).await?);
    }
    let mut orphans = 0;
    if let Some((id, child)) = kill.as_mut() {
        let running = ListWorkflows::new().executor(*id).status(Status::Pending);
        while client.list_workflows(running.clone()).await?.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        orphans = client.list_workflows(running).await?.len();
        println!("killed {id} (SIGKILL) while it ran {orphans} frame(s); waiting for adoption");
    }
    let mut by_executor = BTreeMap::<String, u32>::new();
    for handle in handles {
        let pixels: u32 = handle.result().await?;
        let executor = handle.status().await?.executor_id.unwrap_or_default();
        println!("{} = {pixels:>3} by {executor}", handle.id());
        *by_executor.entry(executor).or_default() += 1;
    }
    println!("finished per executor: {by_executor:?}");
    if let Some((id, _)) = kill {
        println!(
            "adopted: the {orphans} frame(s) {id} left unfinished were finished by the survivor"
        );
    }
    executors(&client).await?;
    client.shutdown(Duration::from_secs(5)).await
}

/// Prints the fleet as `stead executor list` does.
async fn executors(client: &Client) -> stead::Result<()> {
    for e in client.list_executors().await? {
        let state = if e.live { "live" } else { "dead" };
        println!(
            "executor {} on {} ({state}, {} pending)",
            e.executor_id, e.host, e.pending
        );
    }
    Ok(())
}

/// Starts a worker process running this example as `worker <id>`.
fn worker_process(id: &str) -> std::io::Result<std::process::Child> {
    std::process::Command::new(std::env::current_exe()?)
        .args(["worker", id])
        .stdout(std::process::Stdio::null())
        .spawn()
}

/// Waits until executor `id` is live (its launch migrates the schema first).
async fn wait_live(id: &str) -> stead::Result<()> {
    loop {
        if let Ok(client) = client().await {
            let listed = client.list_executors().await?;
            client.shutdown(Duration::from_secs(1)).await?;
            if listed.iter().any(|e| e.executor_id == id && e.live) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
        ["enqueue", n] => produce(n.parse().unwrap_or(12), None).await,
        ["executors"] => executors(&client().await?).await,
        [] => {
            // The schema must exist before the client connects: the first worker migrates it.
            let a = worker_process("fleet-a").map_err(|e| stead::Error::Config(e.to_string()))?;
            wait_live("fleet-a").await?;
            let mut b =
                worker_process("fleet-b").map_err(|e| stead::Error::Config(e.to_string()))?;
            wait_live("fleet-b").await?;
            let produced = produce(12, Some(("fleet-a", a))).await;
            let _ = b.kill();
            let _ = b.wait();
            produced
        }
        _ => {
            eprintln!("usage: fleet [worker <executor id> | enqueue <n> | executors]");
            std::process::exit(2)
        }
    }
}

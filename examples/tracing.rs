//! stead's spans in the console: every line logged inside a workflow carries the workflow span
//! (`workflow_id`, `workflow`, `queue`), and inside a step the step span (`function_id`,
//! `name`; step spans are at DEBUG).
//!
//! ```text
//! cargo run --example tracing
//! RUST_LOG=info cargo run --example tracing     # workflow spans only
//! ```
//!
//! `STEAD_DATABASE_URL` defaults to `postgres://postgres@127.0.0.1:5432/postgres`.

use std::time::Duration;

use stead::{Context, Queue, Runtime, WorkflowOptions};
use tracing_subscriber::EnvFilter;

async fn sync_account(ctx: Context, account: String) -> stead::Result<usize> {
    tracing::info!("syncing");
    let rows = ctx
        .step("fetch", || async {
            tracing::info!(%account, "fetching remote rows");
            Ok(42)
        })
        .await?;
    ctx.step("store", || async move {
        tracing::info!(rows, "storing");
        Ok(rows)
    })
    .await
}

#[tokio::main]
async fn main() -> stead::Result<()> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,stead=debug,ractor=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).init();

    let url = std::env::var("STEAD_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let runtime = Runtime::builder()
        .database_url(url)
        .app_name("tracing_example")
        .workflow("sync_account", sync_account)
        .queue(Queue::new("syncs"))
        .launch()
        .await?;
    let direct = runtime
        .start("sync_account", "ada", WorkflowOptions::default())
        .await?;
    let queued = runtime
        .enqueue("syncs", "sync_account", "grace", WorkflowOptions::default())
        .await?;
    direct.result::<usize>().await?;
    queued.result::<usize>().await?;
    runtime.shutdown(Duration::from_secs(5)).await
}

//! Quickstart: a durable onboarding workflow of several steps. Interrupt it (Ctrl-C) halfway and
//! run it again: it resumes after the last finished step instead of starting over.
//!
//! ```text
//! STEAD_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --example quickstart
//! ```

use std::time::Duration;

use stead::{Context, Runtime, WorkflowOptions};

async fn onboard(ctx: Context, user: String) -> stead::Result<String> {
    for (i, task) in [
        "create account",
        "send welcome mail",
        "provision workspace",
        "notify sales",
    ]
    .into_iter()
    .enumerate()
    {
        ctx.step(task, || async move {
            println!("  step {}: {task} ...", i + 1);
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, std::io::Error>(())
        })
        .await?;
        // Printed on a replay too: the workflow body re-runs, its finished steps do not.
        println!("  step {}: {task} done", i + 1);
    }
    Ok(format!("{user} is onboarded"))
}

#[tokio::main]
async fn main() -> stead::Result<()> {
    let url = std::env::var("STEAD_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let runtime = Runtime::builder()
        .database_url(url)
        .app_name("quickstart")
        .workflow("onboard", onboard)
        .launch()
        .await?;
    // A fixed id: a second run finds this workflow (recovered on launch) instead of a new one.
    let handle = runtime
        .start("onboard", "ada", WorkflowOptions::with_id("quickstart-ada"))
        .await?;
    println!(
        "workflow {} running (interrupt me and run again)",
        handle.id()
    );
    let result: String = handle.result().await?;
    println!("result: {result}");
    runtime.shutdown(Duration::from_secs(5)).await
}

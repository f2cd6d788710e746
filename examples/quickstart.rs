//! Quickstart: a durable onboarding workflow with steps, a durable sleep and a queue of child
//! workflows. It needs no database server: without a URL, stead keeps its state in
//! `quickstart.sqlite` in the working directory.
//!
//! Interrupt it (Ctrl-C) halfway and run it again: it resumes after the last finished step
//! instead of starting over. Delete `quickstart.sqlite*` to start from scratch.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! Set `STEAD_DATABASE_URL=postgres://…` to run the same code on Postgres.

use std::time::Duration;

use stead::{Context, Queue, Runtime, Workflow, WorkflowOptions};

/// The workflows: their stored names, and what each takes and returns (checked at compile time
/// wherever they are registered, started or awaited).
const ONBOARD: Workflow<String, String> = Workflow::new("onboard");
const PROVISION: Workflow<String, String> = Workflow::new("provision");

/// The queue the workspaces are provisioned on: at most two at a time in this process.
const PROVISIONING: &str = "provisioning";

async fn onboard(ctx: Context, user: String) -> stead::Result<String> {
    for task in ["create account", "send welcome mail"] {
        ctx.step(task, || async move {
            println!("  {task} ...");
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(())
        })
        .await?;
        // Printed on a replay too: the workflow body re-runs, its finished steps do not.
        println!("  {task}: done");
    }

    // A durable sleep: interrupt the program now and the wait goes on from where it was.
    println!("  waiting 3 s before provisioning (durably)");
    ctx.sleep(Duration::from_secs(3)).await?;

    let mut children = Vec::new();
    for space in ["docs", "code", "chat"] {
        let child = ctx
            .enqueue_child(
                PROVISIONING,
                PROVISION,
                space.to_owned(),
                WorkflowOptions::default(),
            )
            .await?;
        children.push(child);
    }
    let mut ready = Vec::new();
    for child in &children {
        ready.push(child.result().await?);
    }
    println!("  workspaces ready: {}", ready.join(", "));

    ctx.step("notify sales", || async {
        println!("  notify sales ...");
        Ok(())
    })
    .await?;
    Ok(format!("{user} is onboarded"))
}

async fn provision(ctx: Context, space: String) -> stead::Result<String> {
    ctx.step("provision", || async {
        println!("    provisioning {space} ...");
        tokio::time::sleep(Duration::from_secs(2)).await;
        println!("    provisioned {space}");
        Ok(())
    })
    .await?;
    Ok(space)
}

#[tokio::main]
async fn main() -> stead::Result<()> {
    // stead logs what it recovers at launch; RUST_LOG=stead=debug shows more.
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "stead=info".into()))
        .without_time()
        .init();
    let runtime = Runtime::builder()
        .app_name("quickstart")
        .register(ONBOARD, onboard)
        .register(PROVISION, provision)
        .queue(Queue::new(PROVISIONING).worker_concurrency(2))
        .launch()
        .await?;
    // A fixed id: a second run finds this workflow (recovered on launch) instead of a new one.
    let handle = runtime
        .start(
            ONBOARD,
            "ada".into(),
            WorkflowOptions::with_id("quickstart-ada"),
        )
        .await?;
    if handle.status().await?.status.is_final() {
        println!(
            "workflow {} finished in an earlier run (delete quickstart.sqlite* to start over)",
            handle.id()
        );
    } else {
        println!(
            "workflow {} running (interrupt me and run again)",
            handle.id()
        );
    }
    let result = handle.result().await?;
    println!("result: {result}");
    runtime.shutdown(Duration::from_secs(5)).await
}

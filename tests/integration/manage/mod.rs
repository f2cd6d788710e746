//! Managing workflows from a client: listing with every filter, steps, cancel, resume, fork,
//! delete and delays, against a real database shared with a runtime that runs them.

mod cancel_and_resume;
mod delays;
mod delete;
mod fork;
mod listing;

use std::time::{Duration, SystemTime};

use sqlx::PgPool;
use stead::{
    client::ForkOptions, client::ListWorkflows, Client, Context, Error, Queue, Runtime, Status,
    WorkflowOptions,
};

use crate::common;
use crate::common::CheckPool;

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

async fn refuse(_ctx: Context, _: ()) -> Result<(), std::io::Error> {
    Err(std::io::Error::other("refused"))
}

async fn parent(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.run_child("double", n, WorkflowOptions::default()).await
}

async fn waiter(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    ctx.recv(Some("go"), Duration::from_secs(60)).await
}

async fn waiting_parent(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.start_child("waiter", (), WorkflowOptions::default())
        .await?;
    ctx.recv::<String>(Some("go"), Duration::from_secs(60))
        .await?;
    Ok(())
}

/// Five counted steps; each returns its number plus the input.
async fn five(ctx: Context, base: u32) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 1..=5u32 {
        let id = ctx.workflow_id().to_owned();
        sum += ctx
            .step(&format!("s{i}"), || {
                common::count_body(&id, i);
                async move { Ok(base + i) }
            })
            .await?;
    }
    Ok(sum)
}

/// Forks workflow `target` from its start, waits for a message, returns the fork's id.
async fn forker(ctx: Context, target: String) -> stead::Result<String> {
    let fork = ctx.fork_workflow(&target, 1, ForkOptions::new()).await?;
    ctx.recv::<String>(Some("go"), Duration::from_secs(60))
        .await?;
    Ok(fork.id().to_owned())
}

/// Creates a fork, then a `now`, and awaits them together with the `now` polled first: each
/// durable call is numbered when created, so the fork is call 1 either way.
async fn fork_then_now(ctx: Context, target: String) -> stead::Result<String> {
    let fork = ctx.fork_workflow(&target, 1, ForkOptions::new());
    let now = ctx.now();
    let (now, fork) = futures::future::join(now, fork).await;
    now?;
    Ok(fork?.id().to_owned())
}

const CHILD_DB: &str = "STEAD_TEST_MANAGE_CHILD_DB";

/// Records that step `step` of workflow `id` ran, in the shared `effects` table.
async fn effect(id: &str, step: &str) -> Result<(), sqlx::Error> {
    let url = std::env::var(CHILD_DB).expect("runs in the child process");
    let pool = PgPool::connect(&url).await?;
    sqlx::query("INSERT INTO effects VALUES ($1, $2)")
        .bind(id)
        .bind(step)
        .execute(&pool)
        .await?;
    pool.close().await;
    Ok(())
}

/// Step one, a wait for a message, step two; each step body leaves an effect.
async fn effects(ctx: Context, _: ()) -> stead::Result<Option<String>> {
    let id = ctx.workflow_id().to_owned();
    ctx.step_typed("one", || effect(&id, "one")).await?;
    let got = ctx.recv(Some("go"), Duration::from_secs(60)).await?;
    ctx.step_typed("two", || effect(&id, "two")).await?;
    Ok(got)
}

fn builder(db: &common::TestDb) -> stead::RuntimeBuilder {
    common::builder(db)
        .app_name("shop")
        .queue(Queue::new("q").polling_interval(Duration::from_millis(100)))
        .workflow("double", double)
        .workflow("refuse", refuse)
        .workflow("parent", parent)
        .workflow("waiter", waiter)
        .workflow("waiting_parent", waiting_parent)
        .workflow("five", five)
        .workflow("forker", forker)
        .workflow("fork_then_now", fork_then_now)
        .workflow("effects", effects)
}

async fn client(db: &common::TestDb) -> Client {
    common::client(db, "shop").await
}

fn ids(list: &[stead::client::WorkflowInfo]) -> Vec<&str> {
    list.iter().map(|w| w.status.id.as_str()).collect()
}

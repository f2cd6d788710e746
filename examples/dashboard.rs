//! The admin dashboard mounted in your own axum app: a small order workload runs (some orders
//! succeed, one fails, one waits for a message), and the app serves its own page at `/` and
//! stead's dashboard and admin API under `/admin`.
//!
//! ```text
//! cargo run --example dashboard --features admin
//! open http://127.0.0.1:3000/admin                # the dashboard
//! open http://127.0.0.1:3000/admin#workflow/order-3   # one workflow, with its steps
//! curl http://127.0.0.1:3000/admin/api/workflows
//! ```
//!
//! `STEAD_DATABASE_URL` (default: the SQLite file `dashboard.sqlite` in the working
//! directory), `LISTEN` (default `127.0.0.1:3000`).

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use stead::admin::{self, AdminOptions};
use stead::{Context, Queue, Runtime, WorkflowOptions};

/// Prices, reserves and ships an order; order 0 is out of stock, order 9 waits for a go-ahead.
async fn order(ctx: Context, n: u32) -> stead::Result<String> {
    let price = ctx.step("price", || async move { Ok(10 * n) }).await?;
    ctx.step("reserve", || async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if n == 0 {
            return Err("out of stock".into());
        }
        Ok(())
    })
    .await?;
    if n == 9 {
        ctx.recv::<String>(Some("go"), Duration::from_secs(3600))
            .await?;
    }
    ctx.step("ship", || async move {
        Ok(format!("order {n} shipped for {price}"))
    })
    .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    // No URL given: STEAD_DATABASE_URL, else the embedded default, `dashboard.sqlite`.
    let runtime = Runtime::builder()
        .app_name("dashboard")
        .queue(Queue::new("orders").worker_concurrency(2))
        .workflow("order", order)
        .launch()
        .await?;
    for n in 0..10u32 {
        let options = WorkflowOptions::with_id(format!("order-{n}"));
        runtime.enqueue("orders", "order", n, options).await?;
    }

    let app = Router::new()
        .route(
            "/",
            get(|| async { "my service; its workflows are at /admin\n" }),
        )
        .nest(
            "/admin",
            admin::router(runtime.client(), AdminOptions::new())?,
        );
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("dashboard at http://{}/admin", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    runtime.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

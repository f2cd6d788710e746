//! An HTTP service that embeds stead: each `POST /orders` starts a durable workflow, `GET
//! /workflows/{id}` reports its status and result, and `GET /metrics` is the Prometheus text.
//!
//! ```text
//! cargo run --example axum_service --features prometheus
//! curl -X POST localhost:3000/orders -H 'content-type: application/json' -d '{"item":"book","qty":2}'
//! curl localhost:3000/workflows/<id>
//! curl localhost:3000/metrics
//! ```
//!
//! `STEAD_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`), `LISTEN`
//! (default `127.0.0.1:3000`).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stead::metrics::PrometheusHandle;
use stead::{Context, Runtime, Status, WorkflowOptions};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    item: String,
    qty: u32,
}

async fn fulfil(ctx: Context, order: Order) -> stead::Result<String> {
    let reserved = ctx
        .step("reserve", || async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(order.qty)
        })
        .await?;
    let item = &order.item;
    ctx.step("ship", || async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(format!("shipped {reserved} x {item}"))
    })
    .await
}

#[derive(Clone)]
struct App {
    runtime: Runtime,
    metrics: PrometheusHandle,
}

type Reply = (StatusCode, Json<Value>);

fn failure(e: stead::Error) -> Reply {
    let code = match e {
        stead::Error::NotFound(_) => StatusCode::NOT_FOUND,
        stead::Error::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, Json(json!({ "error": e.to_string() })))
}

async fn start_order(State(app): State<App>, Json(order): Json<Order>) -> Reply {
    match app
        .runtime
        .start("fulfil", order, WorkflowOptions::default())
        .await
    {
        Ok(handle) => (StatusCode::ACCEPTED, Json(json!({ "id": handle.id() }))),
        Err(e) => failure(e),
    }
}

async fn workflow(State(app): State<App>, Path(id): Path<String>) -> Reply {
    let handle = app.runtime.client().handle(id);
    let status = match handle.status().await {
        Ok(status) => status,
        Err(e) => return failure(e),
    };
    let mut body =
        json!({ "id": status.id, "workflow": status.name, "status": status.status.as_str() });
    // A finished workflow's result() answers at once.
    match status.status {
        Status::Success => body["result"] = handle.result::<Value>().await.unwrap_or_default(),
        s if s.is_final() => {
            if let Err(e) = handle.result::<Value>().await {
                body["error"] = json!(e.to_string());
            }
        }
        _ => {}
    }
    (StatusCode::OK, Json(body))
}

async fn scrape(State(app): State<App>) -> String {
    app.metrics.render()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("STEAD_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    // The service serves /metrics itself, so the recorder needs no listener of its own.
    let metrics = stead::metrics::install_prometheus_recorder()?;
    let runtime = Runtime::builder()
        .database_url(url)
        .app_name("axum_service")
        .workflow("fulfil", fulfil)
        .launch()
        .await?;
    let app = Router::new()
        .route("/orders", post(start_order))
        .route("/workflows/{id}", get(workflow))
        .route("/metrics", get(scrape))
        .with_state(App {
            runtime: runtime.clone(),
            metrics,
        });
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    runtime.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

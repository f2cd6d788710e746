//! Typed workflow references: a `Workflow<I, O>` registers, starts, enqueues, debounces and runs
//! children with its types checked by the compiler (each handle's `result()` is an `O` without
//! annotation), and stays interchangeable with its name for callers that only know the name.
//! (That a mismatch does not compile is checked by `compile_fail` doctests in `src/workflow.rs`.)

use std::time::Duration;

use serde::{Deserialize, Serialize};
use stead::{
    client::DebounceOptions, queues::EnqueueRequest, Context, Queue, Workflow, WorkflowHandle,
    WorkflowOptions,
};

use crate::common;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order: u64,
    paid: u64,
}

const CHECKOUT: Workflow<Order, Receipt> = Workflow::new("checkout");
const BASKET: Workflow<Vec<Order>, u64> = Workflow::new("basket");

async fn checkout(ctx: Context, order: Order) -> stead::Result<Receipt> {
    let paid = ctx.step("charge", || async { Ok(order.cents) }).await?;
    Ok(Receipt {
        order: order.id,
        paid,
    })
}

/// Checks out each order as a child: the first run to completion, the others started, then
/// awaited; every result is a `Receipt` by type.
async fn basket(ctx: Context, orders: Vec<Order>) -> stead::Result<u64> {
    let mut orders = orders.into_iter();
    let Some(first) = orders.next() else {
        return Ok(0);
    };
    let first = ctx
        .run_child(CHECKOUT, first, WorkflowOptions::default())
        .await?;
    let mut total = first.paid;
    for order in orders {
        let child = ctx
            .start_child(CHECKOUT, order, WorkflowOptions::default())
            .await?;
        let receipt: Receipt = child.result().await?;
        total += receipt.paid;
    }
    Ok(total)
}

fn order(id: u64) -> Order {
    Order {
        id,
        cents: id * 100,
    }
}

both_backends! {
async fn a_typed_reference_starts_enqueues_and_runs_children_with_typed_results(db) {
    let rt = common::builder(&db)
        .register(CHECKOUT, checkout)
        .register(BASKET, basket)
        .queue(Queue::new("orders"))
        .launch()
        .await
        .unwrap();

    let started: WorkflowHandle<Receipt> = rt
        .start(CHECKOUT, order(1), WorkflowOptions::with_id("started"))
        .await
        .unwrap();
    let receipt = common::within(started.result()).await.unwrap();
    assert_eq!(receipt, Receipt { order: 1, paid: 100 });

    let queued = rt
        .client()
        .enqueue("orders", CHECKOUT, order(2), WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(common::within(queued.result()).await.unwrap().paid, 200);

    let children = rt
        .start(BASKET, vec![order(3), order(4), order(5)], WorkflowOptions::default())
        .await
        .unwrap();
    assert_eq!(common::within(children.result()).await.unwrap(), 1200);

    let debounced = rt
        .client()
        .debounce(
            "k",
            Duration::from_millis(50),
            CHECKOUT,
            order(6),
            DebounceOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(common::within(debounced.result()).await.unwrap().paid, 600);

    let queue = rt.queue_ref("orders").unwrap();
    let request = EnqueueRequest::new(CHECKOUT, &order(7)).unwrap();
    let id = queue.enqueue(request).unwrap().await.unwrap();
    let receipt: Receipt = common::within(rt.client().handle(id).result())
        .await
        .unwrap();
    assert_eq!(receipt.paid, 700);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The name and the reference are the same workflow: a caller that knows only the name (another
/// process, another language) starts it by name and reads its result as any type that fits.
async fn a_workflow_registered_by_reference_is_startable_by_name(db) {
    let rt = common::builder(&db)
        .register(CHECKOUT, checkout)
        .launch()
        .await
        .unwrap();
    assert_eq!(CHECKOUT.name(), "checkout");
    let by_name = rt
        .start("checkout", order(8), WorkflowOptions::with_id("by-name"))
        .await
        .unwrap();
    let raw: serde_json::Value = common::within(by_name.result()).await.unwrap();
    assert_eq!(raw, serde_json::json!({"order": 8, "paid": 800}));
    // Starting the same id through the reference returns the same workflow, now typed.
    let again = rt
        .start(CHECKOUT, order(8), WorkflowOptions::with_id("by-name"))
        .await
        .unwrap();
    assert_eq!(again.result().await.unwrap(), Receipt { order: 8, paid: 800 });
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! Streams: values read while they are written arrive complete and in order, and the reader ends
//! at the close.

use std::time::Duration;

use futures::StreamExt;
use stead::{durable::StreamValue, Context, WorkflowOptions};

use crate::common;

async fn producer(ctx: Context, n: u32) -> stead::Result<u32> {
    for i in 0..n {
        ctx.write_stream("numbers", &i).await?;
    }
    ctx.close_stream("numbers").await?;
    Ok(n)
}

both_backends! {
async fn a_stream_read_while_written_arrives_complete_in_order_and_ends_at_close(db) {
    let rt = common::builder(&db)
        .workflow("producer", producer)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("producer", 1000u32, WorkflowOptions::with_id("p"))
        .await
        .unwrap();
    let values: Vec<StreamValue<u32>> = common::within(
        rt.client().read_stream::<u32>("p", "numbers")
            .map(|v| v.unwrap())
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(values.len(), 1000);
    for (i, v) in values.iter().enumerate() {
        assert_eq!((v.offset, v.value), (i as u32, i as u32));
    }
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 1000);
    // From an offset, after the fact.
    let tail: Vec<u32> = rt
        .client()
        .read_stream_from::<u32>("p", "numbers", 997)
        .map(|v| v.unwrap().value)
        .collect()
        .await;
    assert_eq!(tail, vec![997, 998, 999]);
    let pool = db.checks().await;
    let closing = common::scalar(
        &pool,
        "SELECT value FROM dbos.streams WHERE workflow_uuid = 'p' AND \"offset\" = 1000",
    )
    .await;
    assert_eq!(
        closing.as_deref(),
        Some("\"__DBOS_STREAM_CLOSED__\""),
        "DBOS's closing sentinel"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_reader_ends_when_the_workflow_finished_without_closing(db) {
    async fn unclosed(ctx: Context, _: ()) -> stead::Result<()> {
        ctx.write_stream("s", &"only").await
    }
    let rt = common::builder(&db)
        .workflow("unclosed", unclosed)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("unclosed", (), WorkflowOptions::with_id("u"))
        .await
        .unwrap();
    common::within(h.result::<()>()).await.unwrap();
    let values: Vec<String> = common::within(
        rt.client().read_stream::<String>("u", "s")
            .map(|v| v.unwrap().value)
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(values, vec!["only".to_string()]);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! A ractor actor of your own that enqueues durable workflows into a stead queue through a
//! `QueueRef` (sent at once, in order, committed together) and answers its callers with the
//! results.
//!
//! ```text
//! STEAD_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --example enqueue_from_actor
//! ```

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use stead::queues::{EnqueueRequest, QueueRef};
use stead::{Context, Queue, Runtime, WorkflowOptions};

async fn resize(ctx: Context, image: String) -> stead::Result<String> {
    let pixels = ctx
        .step("decode", || async { Ok(image.len() * 1000) })
        .await?;
    let image = &image;
    ctx.step("encode", || async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(format!("{image}: {pixels} px resized"))
    })
    .await
}

/// The user's actor: takes jobs from the rest of the application and hands them to stead.
struct Thumbnailer;

struct Thumbnails {
    queue: QueueRef,
    runtime: Runtime,
}

enum ThumbnailMsg {
    /// Resize an image; the reply is the workflow's result.
    Resize(String, RpcReplyPort<Result<String, String>>),
}

impl Actor for Thumbnailer {
    type Msg = ThumbnailMsg;
    type State = Thumbnails;
    type Arguments = Thumbnails;

    async fn pre_start(
        &self,
        _: ActorRef<ThumbnailMsg>,
        args: Thumbnails,
    ) -> Result<Thumbnails, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _: ActorRef<ThumbnailMsg>,
        msg: ThumbnailMsg,
        state: &mut Thumbnails,
    ) -> Result<(), ActorProcessingErr> {
        let ThumbnailMsg::Resize(image, reply) = msg;
        // A fixed id per image: asking twice for the same image runs it once.
        let request = EnqueueRequest::new("resize", &image)?
            .options(WorkflowOptions::with_id(format!("thumb-{image}")));
        // Sent, not awaited: the actor goes on taking jobs, and enqueues sent meanwhile are
        // committed together, queued in the order sent. The answer (the row committed) and the
        // result are awaited off the actor.
        let enqueued = state.queue.enqueue(request)?;
        let runtime = state.runtime.clone();
        tokio::spawn(async move {
            let result = async {
                let id = enqueued.await.map_err(|e| e.to_string())?;
                let handle = runtime.client().handle(id);
                handle.result::<String>().await.map_err(|e| e.to_string())
            };
            let _ = reply.send(result.await);
        });
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("STEAD_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let runtime = Runtime::builder()
        .database_url(url)
        .app_name("enqueue_from_actor")
        .workflow("resize", resize)
        .queue(Queue::new("thumbnails").worker_concurrency(2))
        .launch()
        .await?;
    let state = Thumbnails {
        queue: runtime.queue_ref("thumbnails")?,
        runtime: runtime.clone(),
    };
    let (actor, _) = Actor::spawn(None, Thumbnailer, state).await?;

    let images = ["cat.png", "dog.png", "owl.png", "fox.png"];
    let asks = images.iter().map(|image| {
        let actor = actor.clone();
        async move { ractor::call!(actor, ThumbnailMsg::Resize, image.to_string()) }
    });
    for answer in futures::future::join_all(asks).await {
        match answer? {
            Ok(result) => println!("{result}"),
            Err(e) => println!("failed: {e}"),
        }
    }
    actor.stop(None);
    runtime.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

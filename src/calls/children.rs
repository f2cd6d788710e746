//! Child workflows: started (or enqueued) from a workflow with the id `<parent>-<call>` unless
//! given one, recorded so a replay gets the same child instead of starting another; their
//! result is a durable call too (`DBOS.getResult`). Children inherit the parent's deadline.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::clock::now_ms;
use crate::codec;
use crate::context::{Call, Context};
use crate::error::{Error, PortableError, Result};
use crate::start::{self, Target, WorkflowOptions};
use crate::status::Status;
use crate::sysdb::StatusRow;

/// A child workflow started by [`Context::start_child`] or [`Context::enqueue_child`].
#[derive(Clone)]
pub struct ChildHandle {
    ctx: Context,
    id: String,
}

impl std::fmt::Debug for ChildHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildHandle").field("id", &self.id).finish()
    }
}

impl Context {
    /// Starts workflow `workflow` as a child, running now in this process.
    pub fn start_child<'c, I: Serialize>(
        &'c self,
        workflow: &'c str,
        input: I,
        options: WorkflowOptions,
    ) -> BoxFuture<'c, Result<ChildHandle>> {
        let function_id = self.next_function_id();
        let input = codec::encode(&input, &format!("the input of workflow {workflow:?}"));
        Box::pin(self.child(function_id, None, workflow, input, options))
    }

    /// Enqueues workflow `workflow` on `queue` as a child.
    pub fn enqueue_child<'c, I: Serialize>(
        &'c self,
        queue: &'c str,
        workflow: &'c str,
        input: I,
        options: WorkflowOptions,
    ) -> BoxFuture<'c, Result<ChildHandle>> {
        let function_id = self.next_function_id();
        let input = codec::encode(&input, &format!("the input of workflow {workflow:?}"));
        Box::pin(self.child(function_id, Some(queue), workflow, input, options))
    }

    /// Starts a child and waits for its result.
    pub fn run_child<'c, I: Serialize, O: DeserializeOwned + Send + 'c>(
        &'c self,
        workflow: &'c str,
        input: I,
        options: WorkflowOptions,
    ) -> BoxFuture<'c, Result<O>> {
        let start_id = self.next_function_id();
        let result_id = self.next_function_id();
        let input = codec::encode(&input, &format!("the input of workflow {workflow:?}"));
        Box::pin(async move {
            let child = self.child(start_id, None, workflow, input, options).await?;
            child.result_at(result_id).await
        })
    }

    async fn child(
        &self,
        function_id: u32,
        queue: Option<&str>,
        workflow: &str,
        input: Result<String>,
        options: WorkflowOptions,
    ) -> Result<ChildHandle> {
        self.check_live()?;
        if let Some(row) = self.recorded(function_id, workflow)? {
            let id = row.child_workflow_id.clone().ok_or_else(|| Error::Decode {
                what: format!("call #{function_id}"),
                reason: "a recorded child start names no child".into(),
            })?;
            return Ok(ChildHandle {
                ctx: self.clone(),
                id,
            });
        }
        let started = now_ms();
        let id = options
            .chosen_id()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}-{function_id}", self.workflow_id()));
        let options = options
            .id(id.clone())
            .child_of(self.workflow_id(), self.deadline());
        let target = queue.map_or(Target::Direct, Target::Queue);
        start::submit(self.shared(), target, workflow, &input?, options).await?;
        let call = Call {
            child: Some(id.clone()),
            ..Call::new(function_id, workflow, started).output("null".into())
        };
        self.record(call).await?;
        Ok(ChildHandle {
            ctx: self.clone(),
            id,
        })
    }
}

impl ChildHandle {
    /// The child's workflow id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the child's result (a durable call: a replay returns the recorded result).
    pub fn result<O: DeserializeOwned + Send + 'static>(&self) -> BoxFuture<'_, Result<O>> {
        let function_id = self.ctx.next_function_id();
        Box::pin(self.result_at(function_id))
    }

    async fn result_at<O: DeserializeOwned>(&self, function_id: u32) -> Result<O> {
        let ctx = &self.ctx;
        ctx.check_live()?;
        if let Some(row) = ctx.recorded(function_id, "DBOS.getResult")? {
            codec::check_format(row.serialization.as_deref(), "a child's result")?;
            return self.decode(row.output.as_deref(), row.error.as_deref());
        }
        let started = now_ms();
        let done = self.wait().await?;
        let (output, error) = match done.status.status {
            Status::Success => {
                codec::check_format(done.serialization.as_deref(), "a child's result")?;
                (done.output.or(Some("null".into())), None)
            }
            Status::Error => (None, done.error),
            other => {
                let name = if other == Status::Cancelled {
                    "Cancelled"
                } else {
                    "MaxRecoveryAttemptsExceeded"
                };
                let e = PortableError::new(name, format!("child workflow {} is {other}", self.id));
                (None, Some(codec::encode_error(&e)))
            }
        };
        let call = Call {
            output: output.clone(),
            error: error.clone(),
            child: Some(self.id.clone()),
            ..Call::new(function_id, "DBOS.getResult", started)
        };
        match ctx.record(call).await? {
            None => self.decode(output.as_deref(), error.as_deref()),
            Some((output, error)) => self.decode(output.as_deref(), error.as_deref()),
        }
    }

    /// Waits until the child is final, waking on its local completion or polling.
    async fn wait(&self) -> Result<StatusRow> {
        let shared = self.ctx.shared();
        let mut poll = Duration::from_millis(20);
        loop {
            let slot = shared.completions.existing(&self.id);
            let id = self.id.clone();
            let row = shared
                .db
                .call_with(id, move |db, id| async move { db.status(&id).await })
                .await?
                .ok_or_else(|| Error::NotFound(self.id.clone()))?;
            if row.status.status.is_final() {
                return Ok(row);
            }
            let local = async {
                match slot {
                    Some(mut slot) => drop(slot.wait_for(Option::is_some).await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = local => {}
                _ = tokio::time::sleep(poll) => poll = (poll * 2).min(Duration::from_secs(1)),
                _ = self.ctx.aborted() => {}
            }
            self.ctx.check_live()?;
        }
    }

    fn decode<O: DeserializeOwned>(&self, output: Option<&str>, error: Option<&str>) -> Result<O> {
        let Some(error) = error else {
            return codec::decode(output, "a child's result");
        };
        let error = codec::decode_error(error);
        let id = self.id.clone();
        Err(match error.name.as_str() {
            "Cancelled" => Error::Cancelled { id },
            "MaxRecoveryAttemptsExceeded" => Error::MaxRecoveryAttemptsExceeded { id },
            _ => Error::WorkflowFailed {
                id,
                error: Box::new(error),
            },
        })
    }
}

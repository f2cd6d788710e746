//! Child workflows: started (or enqueued) from a workflow with the id `<parent>-<call>` unless
//! given one, recorded so a replay gets the same child instead of starting another; their
//! result is a durable call too (`DBOS.getResult`). Children inherit the parent's deadline.
//!
//! **Foreign children.** `Context::enqueue_child` accepts a name this process does not register: it
//! is enqueued, recorded and awaited like any child, with no application version (so the latest
//! version of its application runs it) and never into a local slot. `start_child` and
//! `Runtime::enqueue` still refuse unknown names (a typo would otherwise wait forever); a client
//! never knows names, so it never checks them.

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::base::clock::now_ms;
use crate::base::codec;
use crate::base::continuation::continued_as;
use crate::base::status::Status;
use crate::base::workflow::{ReadAs, Untyped, WorkflowRef};
use crate::durable::context::{Begun, Call, Context};
use crate::engine::signals::child_key;
use crate::engine::start::{self, Target, WorkflowOptions};
use crate::error::{Error, PortableError, Result};
use crate::sysdb::StatusRow;

/// A child workflow started by [`Context::start_child`] or [`Context::enqueue_child`]. `O` is
/// its output type when it was started through a typed [`Workflow`](crate::Workflow).
pub struct ChildHandle<O = Untyped> {
    ctx: Context,
    id: String,
    output: PhantomData<fn() -> O>,
}

impl<O> Clone for ChildHandle<O> {
    fn clone(&self) -> Self {
        ChildHandle {
            ctx: self.ctx.clone(),
            id: self.id.clone(),
            output: PhantomData,
        }
    }
}

impl<O> std::fmt::Debug for ChildHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildHandle").field("id", &self.id).finish()
    }
}

impl Context {
    /// Starts `workflow` as a child, running now in this process: a typed
    /// [`Workflow<I, O>`](crate::Workflow) with its `I`, or a name with any serializable input.
    pub fn start_child<'c, W, I>(
        &'c self,
        workflow: W,
        input: I,
        options: WorkflowOptions,
    ) -> impl Future<Output = Result<ChildHandle<W::Output>>> + Send + 'c
    where
        W: WorkflowRef<I>,
        I: Serialize,
    {
        let function_id = self.next_function_id();
        let (name, input) = named_input(&workflow, &input);
        self.child(function_id, None, name, input, options)
    }

    /// Enqueues `workflow` on `queue` as a child. It need not be registered here: a name (or a
    /// [`Workflow<I, O>`](crate::Workflow) declared for it) that another process implements,
    /// in any language, is enqueued for that process's executors (name its application with
    /// [`WorkflowOptions::app_name`]). The start is recorded like any child's, and its result
    /// is awaited the same way.
    pub fn enqueue_child<'c, W, I>(
        &'c self,
        queue: &'c str,
        workflow: W,
        input: I,
        options: WorkflowOptions,
    ) -> impl Future<Output = Result<ChildHandle<W::Output>>> + Send + 'c
    where
        W: WorkflowRef<I>,
        I: Serialize,
    {
        let function_id = self.next_function_id();
        let (name, input) = named_input(&workflow, &input);
        self.child(function_id, Some(queue), name, input, options.foreign())
    }

    /// Starts a child and waits for its result: an `O` for a typed
    /// [`Workflow<I, O>`](crate::Workflow); for a name, the type the caller asks for.
    pub fn run_child<'c, W, I, T>(
        &'c self,
        workflow: W,
        input: I,
        options: WorkflowOptions,
    ) -> impl Future<Output = Result<T>> + Send + 'c
    where
        W: WorkflowRef<I>,
        W::Output: ReadAs<T>,
        I: Serialize,
        T: DeserializeOwned + Send + 'c,
    {
        let start_id = self.next_function_id();
        let result_id = self.next_function_id();
        let (name, input) = named_input(&workflow, &input);
        async move {
            let child: ChildHandle = self.child(start_id, None, name, input, options).await?;
            child.result_at(result_id).await
        }
    }

    async fn child<O>(
        &self,
        function_id: u32,
        queue: Option<&str>,
        workflow: String,
        input: Result<String>,
        options: WorkflowOptions,
    ) -> Result<ChildHandle<O>> {
        let workflow = workflow.as_str();
        let _busy = match self.begin(function_id, workflow).await? {
            Begun::Recorded(row) => {
                let id = row.child_workflow_id.clone().ok_or_else(|| Error::Decode {
                    what: format!("call #{function_id}"),
                    reason: "a recorded child start names no child".into(),
                })?;
                return Ok(ChildHandle::new(self, id));
            }
            Begun::Fresh(busy) => busy,
        };
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
        Ok(ChildHandle::new(self, id))
    }
}

/// A child's name and encoded input, taken when the call is created.
fn named_input<W: WorkflowRef<I>, I: Serialize>(
    workflow: &W,
    input: &I,
) -> (String, Result<String>) {
    let name = workflow.name();
    let input = codec::encode_input(name, input);
    (name.to_owned(), input)
}

/// An evicted parent looks at its child again this often (ms): a child a DBOS process
/// finishes announces nothing.
const RELOOK_MS: i64 = 600_000;

impl<O> ChildHandle<O> {
    fn new(ctx: &Context, id: String) -> ChildHandle<O> {
        ChildHandle {
            ctx: ctx.clone(),
            id,
            output: PhantomData,
        }
    }

    /// The child's workflow id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the child's result (a durable call: a replay returns the recorded result): an
    /// `O` for a typed handle; for an [`Untyped`] one, the type the caller asks for.
    pub fn result<T>(&self) -> impl Future<Output = Result<T>> + Send + '_
    where
        T: DeserializeOwned + Send + 'static,
        O: ReadAs<T>,
    {
        let function_id = self.ctx.next_function_id();
        self.result_at(function_id)
    }

    async fn result_at<T: DeserializeOwned>(&self, function_id: u32) -> Result<T> {
        let ctx = &self.ctx;
        if let Begun::Recorded(row) = ctx.begin(function_id, "DBOS.getResult").await? {
            let format = row.serialization.as_deref();
            return self.decode(format, row.output.as_deref(), row.error.as_deref());
        }
        let started = now_ms();
        let done = self.wait().await?;
        // Recorded as portable JSON whatever the child's format (a DBOS child's may be another).
        let format = done.serialization.as_deref();
        let what = "a child's result";
        let (output, error) = match done.status.status {
            Status::Success => {
                let output = done.output.unwrap_or_else(|| "null".into());
                (Some(codec::read_text(format, output, what)?), None)
            }
            Status::Error => {
                codec::check_format(format, what)?;
                (None, done.error.map(|e| codec::read_error_text(format, e)))
            }
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
        let portable = Some(codec::PORTABLE_JSON);
        match ctx.record(call).await? {
            None => self.decode(portable, output.as_deref(), error.as_deref()),
            Some((output, error)) => self.decode(portable, output.as_deref(), error.as_deref()),
        }
    }

    /// Waits until the child is final, waking on its local completion or polling; a child
    /// that continued as new is followed to the end of its chain. Like any wait it may evict
    /// the parent (`Context::evictable`), which the child's end wakes (`signals::child_key`:
    /// its finish here, or `sysdb::CHILD_CHANNEL` from any process).
    async fn wait(&self) -> Result<StatusRow> {
        let ctx = &self.ctx;
        let _waiting = ctx.waiting();
        let shared = ctx.shared();
        let (since, mut parked) = (now_ms(), false);
        let mut poll = Duration::from_millis(20);
        let mut run = self.id.clone();
        loop {
            let slot = shared.completions.existing(&run);
            let id = run.clone();
            let row = shared
                .db
                .call_with(id, move |db, id| async move { db.status(&id).await })
                .await?
                .ok_or_else(|| Error::NotFound(run.clone()))?;
            if row.status.status == Status::Success {
                if let Some(next) = continued_as(row.output.as_deref()) {
                    // Registered under the ended run's key: withdraw, and wait on the next one.
                    if std::mem::take(&mut parked) {
                        ctx.unpark();
                    }
                    run = next;
                    continue;
                }
            }
            if row.status.status.is_final() {
                if parked {
                    ctx.unpark();
                }
                return Ok(row);
            }
            if parked {
                return ctx.evict().await;
            }
            // The end of the chain's current run wakes it.
            let key = child_key(&run);
            let local = async {
                match slot {
                    Some(mut slot) => drop(slot.wait_for(Option::is_some).await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = local => {}
                _ = tokio::time::sleep(poll) => poll = (poll * 2).min(Duration::from_secs(1)),
                _ = ctx.aborted() => {}
                _ = ctx.evictable(since, Some(since + RELOOK_MS), Some(&key)) => parked = true,
            }
            ctx.check_abort()?;
        }
    }

    /// The child's recorded result, in format `serialization`.
    fn decode<T: DeserializeOwned>(
        &self,
        serialization: Option<&str>,
        output: Option<&str>,
        error: Option<&str>,
    ) -> Result<T> {
        let Some(error) = error else {
            return codec::read(serialization, output, "a child's result");
        };
        codec::check_format(serialization, "a child's result")?;
        let error = codec::read_error(serialization, error);
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

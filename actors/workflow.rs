//! A workflow actor: runs one workflow from its recorded steps to its outcome. Its life is the
//! slot its queue actor counts.
//!
//! A returned error is the workflow's outcome (`ERROR`). A panic, or the system database failing
//! past its retries, is a crash: the actor fails and its queue actor restarts it (a replay) under
//! the recovery budget. A cancelled or taken-over run stops without writing anything.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tracing::Instrument;

use crate::codec;
use crate::completion::Finished;
use crate::context::{Abort, Context, RunInfo};
use crate::dispatch::Dispatch;
use crate::error::{Error, PortableError};
use crate::metrics;
use crate::shared::SharedRef;
use crate::status::Status;
use crate::sysdb::{FinishOutcome, FinishWrite};

pub(crate) struct WorkflowArgs {
    pub shared: SharedRef,
    pub dispatch: Dispatch,
}

pub(crate) struct WorkflowActor;

impl Actor for WorkflowActor {
    type Msg = ();
    type State = WorkflowArgs;
    type Arguments = WorkflowArgs;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        args: WorkflowArgs,
    ) -> Result<WorkflowArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn post_start(
        &self,
        myself: ActorRef<()>,
        state: &mut WorkflowArgs,
    ) -> Result<(), ActorProcessingErr> {
        let d = &state.dispatch;
        let span = tracing::info_span!("workflow", workflow_id = %d.id, workflow = %d.name);
        run(&state.shared, d).instrument(span).await?;
        myself.stop(None);
        Ok(())
    }
}

/// Runs the workflow to an outcome and commits it. `Err` is a crash.
async fn run(shared: &SharedRef, d: &Dispatch) -> Result<(), ActorProcessingErr> {
    let Some(entry) = shared.registry.get(&d.name).cloned() else {
        let e = Error::UnknownWorkflow(d.name.clone());
        return finish(shared, d, Err(e.to_portable())).await;
    };
    if d.attempts > i64::from(entry.config.max_recovery_attempts) + 1 {
        tracing::warn!(
            attempts = d.attempts,
            "recovery budget exhausted; parking the workflow"
        );
        return park(shared, d).await;
    }
    let input = match decode_input(d) {
        Ok(input) => input,
        Err(e) => return finish(shared, d, Err(e.to_portable())).await,
    };
    let recorded = if d.fresh {
        Vec::new()
    } else {
        shared.db.load_steps(&d.id).await?
    };
    let run = RunInfo {
        workflow_id: d.id.clone(),
        workflow_name: d.name.clone(),
        owner: d.owner.clone(),
        app_name: shared.config.app_name.clone(),
    };
    let ctx = Context::new(run, shared.db.clone(), recorded);
    let outcome = entry.run(ctx.clone(), input).await;
    match ctx.abort() {
        None => finish(shared, d, outcome).await,
        Some(Abort::Crash(reason)) => Err(reason.into()),
        Some(Abort::Cancelled | Abort::NotOwner) => {
            shared.completions.abandon(&d.id);
            Ok(())
        }
    }
}

fn decode_input(d: &Dispatch) -> Result<Value, Error> {
    let Some(inputs) = d.inputs.as_deref() else {
        return Ok(Value::Null);
    };
    codec::check_format(d.serialization.as_deref(), "the workflow's inputs")?;
    codec::decode_inputs(inputs)
}

async fn finish(
    shared: &SharedRef,
    d: &Dispatch,
    outcome: Result<String, PortableError>,
) -> Result<(), ActorProcessingErr> {
    let (status, output, error) = match outcome {
        Ok(output) => (Status::Success, Some(output), None),
        Err(e) => (Status::Error, None, Some(codec::encode_error(&e))),
    };
    commit(shared, d, status, output, error).await
}

async fn park(shared: &SharedRef, d: &Dispatch) -> Result<(), ActorProcessingErr> {
    commit(shared, d, Status::MaxRecoveryAttemptsExceeded, None, None).await
}

async fn commit(
    shared: &SharedRef,
    d: &Dispatch,
    status: Status,
    output: Option<String>,
    error: Option<String>,
) -> Result<(), ActorProcessingErr> {
    let write = FinishWrite {
        workflow_id: d.id.clone(),
        owner: d.owner.clone(),
        status: status.as_str(),
        output: output.clone(),
        error: error.clone(),
    };
    match shared.db.finish(write).await? {
        FinishOutcome::Finished => {
            metrics::workflow_finished(&d.name, status.as_str());
            let finished = Finished {
                status,
                output,
                error,
            };
            shared.completions.finish(&d.id, finished);
        }
        FinishOutcome::Cancelled | FinishOutcome::NotOwner => shared.completions.abandon(&d.id),
    }
    Ok(())
}

//! Replay verification: checks new workflow code against recorded histories before a deploy.
//! Each chosen workflow's body runs in a replay-only [`Context`]: every durable call is compared
//! with the call recorded at its number, and the first call past the history (or differing from
//! it) stops the run, so no step body runs and nothing is written.
//!
//! It must never write to the system database: it reads through a [`Client`] (which never
//! migrates nor runs workflows), and a replay-only context refuses every write.
//!
//! **How a call is checked.** Every durable call asks `recorded` first: a match replays as usual, a
//! different name is logged as a divergence, and a missing row is the end of the history; either of
//! the last two stops the run (as a cancel does), so the live path of a call, where bodies run and
//! writes happen, is never reached. `record` and `op` refuse in that mode anyway, and waits return
//! at once (a recorded sleep is checked, not slept). A patch marker replayed by
//! `patch`/`deprecate_patch` counts as a matched call; a transactional step asks `recorded` before
//! its application database, so the replay stops before it. When the body returns without being
//! stopped, recorded calls it never made are divergences (`called: None`), and an error it returned
//! is `Verdict::failed` unless the workflow is recorded as `ERROR` (a recorded output that no
//! longer decodes into its step's new type shows here). A body that panics, or is still running
//! after 30 s (waiting on something that is not a durable call), is reported as skipped. It is a
//! library function and not a `stead verify` command, since the CLI binary holds no workflow code.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;

use crate::base::codec::{self, PORTABLE_JSON};
use crate::base::status::Status;
use crate::client::manage::{ListWorkflows, WorkflowInfo};
use crate::client::Client;
use crate::durable::context::{Context, RunInfo};
pub use crate::durable::replay::Divergence;
use crate::durable::replay::ReplayLog;
use crate::engine::registry::Registry;
use crate::error::{Error, PortableError, Result};
use crate::runtime::builder::RuntimeBuilder;
use crate::sysdb::StepRow;

/// How long one workflow's replay may take: replayed calls read memory only, so a body still
/// running after this waits on something that is not a durable call.
const REPLAY_LIMIT: Duration = Duration::from_secs(30);

/// What replaying one workflow's recorded calls against the new code found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// The workflow's id.
    pub workflow_id: String,
    /// Its registered name.
    pub workflow_name: String,
    /// How many calls its history records.
    pub recorded_calls: usize,
    /// How many of them the new code made the same way (it may stop earlier at a divergence).
    pub matched_calls: usize,
    /// Where the new code and the history part, by call number; empty when the code replays the
    /// history.
    pub divergences: Vec<Divergence>,
    /// The error the new code returned in replay where the workflow had not failed (it is
    /// `SUCCESS` or still running), e.g. a recorded output that no longer decodes into its
    /// step's type.
    pub failed: Option<PortableError>,
    /// Why the workflow could not be replayed at all (its name is not registered in this build,
    /// its input cannot be read, its body panicked, or it never got past a non-durable wait).
    pub skipped: Option<String>,
}

impl Verdict {
    /// True when the new code replays the recorded history (and it was replayed).
    pub fn is_compatible(&self) -> bool {
        self.divergences.is_empty() && self.failed.is_none() && self.skipped.is_none()
    }
}

/// Replays the recorded calls of the workflows `which` selects (by id, name, or the newest N:
/// `ListWorkflows::new().newest_first().limit(n)`) against the workflows registered in
/// `builder`, without launching it: no step body runs and nothing is written. The builder's
/// database URL, schema and application name say where the histories are.
///
/// ```no_run
/// # async fn checkout(ctx: stead::Context, order: u32) -> stead::Result<()> { Ok(()) }
/// # async fn demo() -> stead::Result<()> {
/// use stead::{client::ListWorkflows, Runtime};
/// let build = Runtime::builder()
///     .database_url("postgres://localhost/app")
///     .workflow("checkout", checkout);
/// let verdicts = stead::testing::verify(build, ListWorkflows::new().name("checkout").newest_first().limit(100)).await?;
/// for v in verdicts.iter().filter(|v| !v.is_compatible()) {
///     eprintln!("{}: {:?} {:?}", v.workflow_id, v.divergences, v.skipped);
/// }
/// # Ok(()) }
/// ```
pub async fn verify(builder: RuntimeBuilder, which: ListWorkflows) -> Result<Vec<Verdict>> {
    let (url, options, registry) = builder.into_check()?;
    let client = Client::connect_with(&url, options).await?;
    let outcome = verify_with(&client, &registry, which).await;
    client.shutdown(Duration::from_secs(5)).await?;
    outcome
}

async fn verify_with(
    client: &Client,
    registry: &Registry,
    which: ListWorkflows,
) -> Result<Vec<Verdict>> {
    let listed = client.list_workflows(which.with_payloads()).await?;
    let mut verdicts = Vec::with_capacity(listed.len());
    for info in listed {
        let history = client
            .shared()
            .db
            .load_steps(&info.status.id)
            .await
            .map_err(Error::Database)?;
        verdicts.push(replay(client, registry, &info, history).await);
    }
    Ok(verdicts)
}

/// Replays one workflow's history against its registered body.
async fn replay(
    client: &Client,
    registry: &Registry,
    info: &WorkflowInfo,
    history: Vec<StepRow>,
) -> Verdict {
    let status = &info.status;
    let mut verdict = Verdict {
        workflow_id: status.id.clone(),
        workflow_name: status.name.clone(),
        recorded_calls: history.len(),
        matched_calls: 0,
        divergences: Vec::new(),
        failed: None,
        skipped: None,
    };
    let Some(entry) = registry.get(&status.name) else {
        verdict.skipped = Some(format!("no workflow named {:?} is registered", status.name));
        return verdict;
    };
    let input = match (&info.serialization, &info.input) {
        (Some(format), _) if format != PORTABLE_JSON => {
            verdict.skipped = Some(format!("its input is stored as {format:?}"));
            return verdict;
        }
        (_, input) => input.clone().unwrap_or(Value::Null),
    };
    let log = Arc::new(ReplayLog::new(&history));
    let run = RunInfo {
        workflow_id: status.id.clone(),
        workflow_name: status.name.clone(),
        owner: String::new(),
        deadline: None,
        metrics: entry.metrics().clone(),
    };
    let ctx = Context::replay_only(run, client.shared().clone(), history, log.clone());
    // A panicking body is reported, not passed on to the caller of the check.
    let body = AssertUnwindSafe(entry.run(ctx.clone(), input)).catch_unwind();
    let finished = match tokio::time::timeout(REPLAY_LIMIT, body).await {
        Ok(Ok(outcome)) => {
            // Stopped by the history's end or a divergence, the body's error is ours, not its.
            if let (Err(e), None) = (outcome, ctx.abort()) {
                verdict.failed = (status.status != Status::Error).then_some(e);
            }
            true
        }
        Ok(Err(panic)) => {
            let reason = codec::panic_text(&*panic);
            verdict.skipped = Some(format!("its body panicked in replay: {reason}"));
            false
        }
        Err(_) => {
            verdict.skipped = Some(format!(
                "its body was still running after {} s of replay (waiting on something that \
                 is not a durable call)",
                REPLAY_LIMIT.as_secs()
            ));
            false
        }
    };
    let (matched, divergences) = log.findings(finished && ctx.abort().is_none());
    verdict.matched_calls = matched;
    verdict.divergences = divergences;
    verdict
}

//! The replay core both sources of histories share: one workflow's recorded history (its status
//! row and its calls) replayed against the body registered under its name, in a replay-only
//! [`Context`]. `verify` reads histories from a system database, `files` (feature `testing`)
//! from exported files; both end here, so they make the same checks.
//!
//! It must never write, never run a step body, and never read a history itself.
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
//! longer decodes into its step's new type shows here, naming the step and its call number). A
//! body that panics, or is still running after 30 s (waiting on something that is not a durable
//! call), is reported as skipped.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;

use crate::base::codec::{self, PORTABLE_JSON};
use crate::base::status::Status;
use crate::durable::context::{Context, RunInfo};
pub use crate::durable::replay::Divergence;
use crate::durable::replay::ReplayLog;
use crate::engine::registry::Registry;
use crate::engine::shared::SharedRef;
use crate::error::PortableError;
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

    /// The first thing that breaks the replay, for people: the first divergence (with its call
    /// number), else the error the new code returned, else why it was skipped.
    pub fn first_problem(&self) -> Option<String> {
        if let Some(d) = self.divergences.first() {
            return Some(d.to_string());
        }
        if let Some(e) = &self.failed {
            return Some(format!("the code now fails: {}: {}", e.name, e.message));
        }
        self.skipped.clone()
    }
}

/// One workflow's history, from whichever source: what its status row says and its calls.
pub(crate) struct Recorded {
    pub id: String,
    pub name: String,
    pub status: Status,
    /// The format of its input (`None`: a legacy row, read as portable JSON).
    pub serialization: Option<String>,
    /// The input as the workflow receives it.
    pub input: Option<Value>,
    pub steps: Vec<StepRow>,
}

/// Replays one workflow's history against its body registered in `registry`, on `shared` (a
/// client's, or an offline one: the replay never reaches the database).
pub(crate) async fn replay(registry: &Registry, shared: &SharedRef, recorded: Recorded) -> Verdict {
    let mut verdict = Verdict {
        workflow_id: recorded.id.clone(),
        workflow_name: recorded.name.clone(),
        recorded_calls: recorded.steps.len(),
        matched_calls: 0,
        divergences: Vec::new(),
        failed: None,
        skipped: None,
    };
    let Some(entry) = registry.get(&recorded.name) else {
        verdict.skipped = Some(format!(
            "no workflow named {:?} is registered",
            recorded.name
        ));
        return verdict;
    };
    // The input as read (a DBOS format stead reads is read already); one not read is skipped.
    let input = match (&recorded.serialization, recorded.input) {
        (_, Some(input)) => input,
        (Some(format), None) if format != PORTABLE_JSON => {
            verdict.skipped = Some(format!("its input is stored as {format:?}, unread"));
            return verdict;
        }
        (_, None) => Value::Null,
    };
    let log = Arc::new(ReplayLog::new(&recorded.steps));
    let run = RunInfo {
        workflow_id: recorded.id,
        workflow_name: recorded.name,
        owner: String::new(),
        deadline: None,
        metrics: entry.metrics().clone(),
        limits: crate::base::limits::HistoryLimits::unlimited(),
    };
    let ctx = Context::replay_only(run, shared.clone(), recorded.steps, log.clone());
    // A panicking body is reported, not passed on to the caller of the check.
    let body = AssertUnwindSafe(entry.run(ctx.clone(), input)).catch_unwind();
    let finished = match tokio::time::timeout(REPLAY_LIMIT, body).await {
        Ok(Ok(outcome)) => {
            // Stopped by the history's end or a divergence, the body's error is ours, not its.
            if let (Err(e), None) = (outcome, ctx.abort()) {
                verdict.failed = (recorded.status != Status::Error).then_some(e);
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

//! Continue-as-new: a run ends and a fresh run of the same workflow starts with a new input and
//! an empty history, atomically (`sysdb::continuations` for how the chain is stored), so an
//! endless workflow (a daily tick, a subscription) keeps each run's history bounded.
//!
//! It is not a numbered durable call: the run never replays past it (its commit ends the run),
//! and a run replayed after a crash before the commit reaches it again and commits once. It is
//! exempt from the history limit, so a run refused at its limit can still continue. Held step
//! records are written first; the crash matrix may stop the run just before the commit (the
//! boundary `stead.continueAsNew`).

use serde::Serialize;

use crate::base::clock::now_ms;
use crate::base::codec;
use crate::durable::context::{Abort, Context};
use crate::engine::start;
use crate::error::{Error, Result};
use crate::sysdb::{next_created_at, ContinueOutcome, ContinueWrite};

/// The crash matrix's name for the moment before the commit.
#[cfg(feature = "testing")]
const BOUNDARY: &str = "stead.continueAsNew";

impl Context {
    /// Ends this run and starts a fresh run of the same workflow with `input`, in one commit:
    /// the new run has an empty history, its own limits, and the id `<first id>-can-<n>` (the
    /// chain's first run's id, and `n` the new run's place after it). It goes to this run's
    /// queue, or runs in this process next when this run had none; a crash right after the
    /// commit leaves it to recovery, never the old run. This run ends `SUCCESS`, its output
    /// naming the next run; a handle on any run of the chain follows it to the last run's
    /// result.
    ///
    /// It always returns an error for the body to return at once:
    /// [`Error::ContinuedAsNew`] once continued (every later durable call of this run fails
    /// with it too), or why it could not (an input that does not fit the workflow's type, a
    /// value too large, the run cancelled meanwhile).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn report(_: u64) {}
    /// // A daily tick, forever: every 30 days the run continues as new, so its history stays
    /// // at most 60 calls long.
    /// async fn daily(ctx: stead::Context, day: u64) -> stead::Result<()> {
    ///     for day in day.. {
    ///         ctx.sleep(Duration::from_secs(86_400)).await?;
    ///         ctx.step("report", || async move { Ok(report(day).await) }).await?;
    ///         if day % 30 == 29 {
    ///             return ctx.continue_as_new(day + 1).await;
    ///         }
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub async fn continue_as_new<I: Serialize, O>(&self, input: I) -> Result<O> {
        Err(match self.continue_with(&input).await {
            Ok(continued) => continued,
            Err(e) => e,
        })
    }

    async fn continue_with<I: Serialize>(&self, input: &I) -> Result<Error> {
        self.live().await?;
        let shared = self.shared();
        let name = self.workflow_name().to_owned();
        let json = codec::encode_input(&name, input)?;
        if let Some(entry) = shared.registry.get(&name) {
            entry.check_input(&codec::as_received(&json)?)?;
        }
        let inputs = codec::encode_inputs(&json);
        self.check_value(&inputs, || {
            format!("the input of workflow {name:?} continued as new")
        })?;
        if self.is_replay_only() {
            // A verification ends here: the recorded run ended here too.
            return Err(self.stop(Abort::Cancelled));
        }
        let _busy = self.busy();
        self.settle().await?;
        #[cfg(feature = "testing")]
        self.crash_point(BOUNDARY)?;
        let next_owner = uuid::Uuid::new_v4().to_string();
        let write = ContinueWrite {
            workflow_id: self.workflow_id().to_owned(),
            owner: self.owner().to_owned(),
            inputs: inputs.clone(),
            next_owner: next_owner.clone(),
            executor_id: shared.config.executor_id.clone(),
            created_at: next_created_at(),
            now: now_ms(),
        };
        let outcome = shared
            .db
            .call_with(write, |db, w| async move { db.continue_as_new(&w).await })
            .await;
        let next = match outcome {
            Ok(ContinueOutcome::Continued(next)) => next,
            Ok(ContinueOutcome::Cancelled) => return Err(self.stop(Abort::Cancelled)),
            Ok(ContinueOutcome::NotOwner) => return Err(self.stop(Abort::NotOwner)),
            Ok(ContinueOutcome::Exists(id)) => return Err(Error::WorkflowExists(id)),
            Err(e) => return Err(self.db_failure(e)),
        };
        let continued = self.stop(Abort::Continued(next.next_id.clone()));
        tracing::info!(workflow_id = %self.workflow_id(), workflow = %name,
            next = %next.next_id, "workflow continued as new");
        #[cfg(feature = "test-hooks")]
        if shared.faults.holds_after_continue() {
            std::future::pending::<()>().await;
        }
        start::hand_on(shared, &name, &next, next_owner, inputs);
        Ok(continued)
    }
}

//! Patching (DBOS 3.4's `DBOS.patch` / `DBOS.deprecate_patch`): changing a workflow's code
//! while runs recorded by the old code are in flight.
//!
//! A patch is a marker call named `DBOS.patch-<name>`, recorded at the next call number only
//! on a new execution. Replaying a history whose call at that number is something else (it
//! predates the patch) takes the old branch and consumes no number; one whose call there is
//! the marker takes the new branch. Once no pre-patch run remains, `deprecate_patch` keeps
//! histories with the marker replaying while new runs record none. As in DBOS's async
//! variant, the probe and the reservation happen in one step, and a patch racing another
//! durable call of the same workflow is refused (its position would depend on scheduling).
//!
//! The probe reads the history's window (a page read if it lacks the number) and the reservation
//! of the number is one compare-and-swap on the call counter; a concurrent durable call that took
//! the number first makes the patch `Error::PatchNondeterminism`. `patch` is async and fallible
//! (the marker is written with its number on a new run), `deprecate_patch` synchronous: it only
//! reads the window, which after every replayed call holds the next number's name; a number it
//! does not hold (a run that took several numbers without awaiting their calls, or hundreds of
//! deprecated markers in a row) fails it as `Error::PatchNondeterminism`, never a guess.

use crate::base::clock::now_ms;
use crate::durable::context::{Call, Context};
use crate::error::{Error, Result};

/// The marker DBOS records for patch `name`.
fn marker(name: &str) -> String {
    format!("DBOS.patch-{name}")
}

impl Context {
    /// True when this run takes the patched (new) code path: a new execution (the marker is
    /// recorded now) or a replay of one. False when replaying a history recorded before the
    /// patch: take the old path, which replays the calls the old code made.
    ///
    /// ```no_run
    /// # async fn demo(ctx: stead::Context) -> stead::Result<()> {
    /// if ctx.patch("use-new-charge").await? {
    ///     ctx.step("charge_v2", || async { Ok(()) }).await?;
    /// } else {
    ///     ctx.step("charge", || async { Ok(()) }).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn patch(&self, name: &str) -> Result<bool> {
        self.check_abort()?;
        let marker = marker(name);
        let function_id = self.peek_function_id();
        let recorded = self.recorded_name(function_id).await?;
        if recorded.as_deref().is_some_and(|r| r != marker) {
            // Pre-patch history: the old code made another call here.
            return Ok(false);
        }
        self.reserve(function_id, name)?;
        if recorded.is_none() {
            // The marker is a call boundary of the crash matrix too (feature `testing`).
            #[cfg(feature = "testing")]
            {
                self.settle().await?;
                self.crash_point(&marker)?;
            }
            let call = Call::new(function_id, &marker, now_ms());
            // A competing execution's row at this number is its marker (it ran this code).
            self.record(call).await?;
        } else {
            // The marker is replayed as a call (a replay-only run counts it as matched).
            self.replay_marker(function_id, &marker)?;
            self.read_ahead().await?;
        }
        Ok(true)
    }

    /// For code whose pre-patch runs have all finished: keeps histories recorded with patch
    /// `name`'s marker replaying (their marker's number is consumed) and records no marker on
    /// new runs. Replace `if ctx.patch(name).await? { new } else { old }` by
    /// `ctx.deprecate_patch(name)?; new`, then later drop the call once those histories are gone.
    pub fn deprecate_patch(&self, name: &str) -> Result<()> {
        self.check_abort()?;
        let function_id = self.peek_function_id();
        let marker = marker(name);
        let Some(recorded) = self.known_recorded_name(function_id) else {
            return Err(Error::PatchNondeterminism {
                workflow_id: self.workflow_id().to_owned(),
                patch: name.to_owned(),
            });
        };
        if recorded.as_deref() == Some(marker.as_str()) {
            self.reserve(function_id, name)?;
            self.replay_marker(function_id, &marker)?;
        }
        Ok(())
    }

    fn reserve(&self, function_id: u32, name: &str) -> Result<()> {
        if self.take_function_id(function_id) {
            Ok(())
        } else {
            Err(Error::PatchNondeterminism {
                workflow_id: self.workflow_id().to_owned(),
                patch: name.to_owned(),
            })
        }
    }
}

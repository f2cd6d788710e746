//! A run's history budget: the calls it recorded and the bytes of their outputs and errors,
//! counted as they are recorded or replayed (a recovered run counts its replayed history too),
//! against its [`HistoryLimits`]. Past 80% of either limit the run logs one warning and counts
//! it (`stead_history_warnings_total`, once per execution); at a limit, a durable call begun
//! afresh fails with `Error::HistoryLimit` before it writes anything, and is counted
//! (`stead_history_refusals_total`). Replayed calls never fail: they are recorded already.
//!
//! The bytes are those of the `operation_outputs` rows (what a replay reads back): a message
//! sent, an event set or a stream value written lives in its own table and counts only through
//! the value limit (`Error::ValueTooLarge`).

use std::sync::atomic::Ordering;

use super::Context;
use crate::base::limits::HistoryLimits;
use crate::error::{Error, Result};

impl Context {
    /// Counts one call recorded (or replayed) with `bytes` of output and error.
    pub(crate) fn count_call(&self, bytes: usize) {
        let inner = &self.inner;
        let calls = inner
            .calls
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let bytes = inner
            .bytes
            .fetch_add(bytes as u64, Ordering::Relaxed)
            .saturating_add(bytes as u64);
        let limits = self.limits();
        if limits.nearing(calls, bytes) && !inner.warned.swap(true, Ordering::Relaxed) {
            self.metrics().history_warned();
            tracing::warn!(workflow_id = %self.workflow_id(), workflow = %self.workflow_name(),
                calls, bytes, max_calls = limits.max_calls(), max_bytes = limits.max_bytes(),
                "workflow history passed 80% of its limit; continue it as new");
        }
    }

    /// Refuses a fresh durable call once the run's history is at a limit.
    pub(crate) fn check_budget(&self) -> Result<()> {
        let calls = self.inner.calls.load(Ordering::Relaxed);
        let bytes = self.inner.bytes.load(Ordering::Relaxed);
        let Some((limit, used, max)) = self.limits().reached(calls, bytes) else {
            return Ok(());
        };
        self.metrics().history_refused();
        let e = Error::HistoryLimit {
            workflow_id: self.workflow_id().to_owned(),
            limit,
            used,
            max,
        };
        tracing::warn!(workflow_id = %self.workflow_id(), workflow = %self.workflow_name(),
            error = %e, "durable call refused at the history limit");
        Err(e)
    }

    /// The calls and bytes this run's history holds so far.
    pub fn history_size(&self) -> (u32, u64) {
        (
            self.inner.calls.load(Ordering::Relaxed),
            self.inner.bytes.load(Ordering::Relaxed),
        )
    }

    fn limits(&self) -> &HistoryLimits {
        &self.inner.run.limits
    }
}

/// The bytes a row holds in its output and error.
pub(crate) fn row_bytes(output: Option<&str>, error: Option<&str>) -> usize {
    output.map_or(0, str::len) + error.map_or(0, str::len)
}

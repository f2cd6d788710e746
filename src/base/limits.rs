//! Limits on what one run records: its history (calls and bytes, [`HistoryLimits`]) and each
//! value (input, step output, message, event, stream value; [`DEFAULT_MAX_VALUE_BYTES`]). Plain
//! values; the counting is the `Context`'s (`durable::context::budget`), the refusals are typed
//! errors (`Error::HistoryLimit`, `Error::ValueTooLarge`).
//!
//! **Defaults.** Temporal caps a history at 51,200 events or 50 MB (warning at 10,240 events or
//! 10 MB) and a payload at 2 MB; DBOS caps nothing. A stead call is one row (a Temporal activity
//! is three events), so 50,000 calls and 50 MiB per run, warned at 80%, are at least Temporal's
//! room. A value is capped at 16 MiB: above Temporal's 2 MB, so applications written for DBOS
//! (which has no cap) keep working, and far below what makes a history page (2 MiB of outputs,
//! `context::history`) or a Postgres row (1 GB) a problem.

use serde::{Deserialize, Serialize};

/// The most calls one run records by default.
pub const DEFAULT_MAX_HISTORY_CALLS: u32 = 50_000;
/// The most bytes of outputs and errors one run records by default (50 MiB).
pub const DEFAULT_MAX_HISTORY_BYTES: u64 = 50 << 20;
/// The largest value (input, step output, message, event, stream value) recorded by default
/// (16 MiB).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 << 20;

/// How much history one run of a workflow may record: durable calls, and bytes of their
/// recorded outputs and errors (`operation_outputs`), replayed calls included. Past 80% of
/// either, the run logs one warning and counts `stead_history_warnings_total`; at the limit,
/// its next durable call fails with [`Error::HistoryLimit`](crate::Error::HistoryLimit) and
/// records nothing. [`Context::continue_as_new`](crate::Context::continue_as_new) starts a run
/// with an empty history.
///
/// ```
/// use stead::HistoryLimits;
/// let limits = HistoryLimits::default().calls(10_000).bytes(8 << 20);
/// assert_eq!(limits.max_calls(), 10_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryLimits {
    calls: u32,
    bytes: u64,
}

impl Default for HistoryLimits {
    /// 50,000 calls and 50 MiB (see the module docs for why).
    fn default() -> Self {
        HistoryLimits {
            calls: DEFAULT_MAX_HISTORY_CALLS,
            bytes: DEFAULT_MAX_HISTORY_BYTES,
        }
    }
}

/// Which limit of a run's history was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HistoryLimit {
    /// The number of recorded calls.
    Calls,
    /// The bytes of recorded outputs and errors.
    Bytes,
}

impl std::fmt::Display for HistoryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HistoryLimit::Calls => "calls",
            HistoryLimit::Bytes => "bytes",
        })
    }
}

impl HistoryLimits {
    /// No limit at all (a benchmark's deep history; nothing warns).
    pub fn unlimited() -> Self {
        HistoryLimits {
            calls: u32::MAX,
            bytes: u64::MAX,
        }
    }

    /// The most durable calls one run records.
    pub fn calls(mut self, calls: u32) -> Self {
        self.calls = calls;
        self
    }

    /// The most bytes of outputs and errors one run records.
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    pub fn max_calls(&self) -> u32 {
        self.calls
    }

    pub fn max_bytes(&self) -> u64 {
        self.bytes
    }

    /// The limit a run holding `calls` calls and `bytes` bytes has reached, if any.
    pub(crate) fn reached(&self, calls: u32, bytes: u64) -> Option<(HistoryLimit, u64, u64)> {
        if calls >= self.calls {
            return Some((HistoryLimit::Calls, u64::from(calls), u64::from(self.calls)));
        }
        (bytes >= self.bytes).then_some((HistoryLimit::Bytes, bytes, self.bytes))
    }

    /// Whether a run holding `calls` calls and `bytes` bytes is past 80% of either limit.
    pub(crate) fn nearing(&self, calls: u32, bytes: u64) -> bool {
        let past = |used: u64, max: u64| {
            max != u64::MAX && used.saturating_mul(5) >= max.saturating_mul(4)
        };
        (self.calls != u32::MAX && past(u64::from(calls), u64::from(self.calls)))
            || past(bytes, self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_nears_at_eighty_percent_and_reaches_at_the_limit() {
        let l = HistoryLimits::default().calls(10).bytes(100);
        assert!(!l.nearing(7, 79));
        assert!(l.nearing(8, 0) && l.nearing(0, 80));
        assert_eq!(l.reached(9, 99), None);
        assert_eq!(l.reached(10, 0), Some((HistoryLimit::Calls, 10, 10)));
        assert_eq!(l.reached(3, 120), Some((HistoryLimit::Bytes, 120, 100)));
        let none = HistoryLimits::unlimited();
        assert!(!none.nearing(u32::MAX - 1, u64::MAX - 1));
        assert_eq!(none.reached(u32::MAX - 1, u64::MAX - 1), None);
    }
}

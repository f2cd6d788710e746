//! Retention: which finished workflows to garbage-collect ([`Retention`]) and the call that
//! collects them now, shared by the retention actor (the periodic task that applies a policy)
//! and `Client::garbage_collect` (`client/retention.rs`). It never names either.
//!
//! It never touches a workflow that may still run (`PENDING`, `ENQUEUED`, `DELAYED`): see
//! `sysdb::retention`.

use std::time::Duration;

use crate::base::clock::{millis, now_ms};
use crate::engine::shared::Shared;
use crate::error::{Error, Result};

/// A retention policy: finished workflows created longer than `older_than` ago, or beyond the
/// newest `max_rows` finished ones, are deleted with their steps, inputs, outputs, events,
/// streams and messages. Given to the builder it runs every `every` (and once at launch).
///
/// ```
/// use std::time::Duration;
/// let policy = stead::client::Retention::default()
///     .older_than(Duration::from_secs(7 * 24 * 3600))
///     .max_rows(1_000_000)
///     .every(Duration::from_secs(3600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub(crate) older_than: Option<Duration>,
    pub(crate) max_rows: Option<u64>,
    pub(crate) every: Duration,
}

impl Default for Retention {
    /// Keeps everything (set `older_than` or `max_rows`); runs hourly.
    fn default() -> Self {
        Retention {
            older_than: None,
            max_rows: None,
            every: Duration::from_secs(3600),
        }
    }
}

impl Retention {
    /// Deletes finished workflows created longer than `age` ago.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Keeps only the newest `n` finished workflows (by creation time).
    pub fn max_rows(mut self, n: u64) -> Self {
        self.max_rows = Some(n);
        self
    }

    /// How often the periodic task collects.
    pub fn every(mut self, interval: Duration) -> Self {
        self.every = interval;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.every.is_zero() {
            return Err(Error::InvalidArgument(
                "a retention interval must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}

/// Collects what `policy` says now; returns how many workflows were deleted.
pub(crate) async fn collect(shared: &Shared, policy: &Retention) -> Result<u64> {
    let cutoff = policy
        .older_than
        .map(|age| now_ms().saturating_sub(millis(age)));
    let keep = policy.max_rows.map(|n| n.min(i64::MAX as u64) as i64);
    let deleted = shared
        .db
        .call(move |db| async move { db.garbage_collect(cutoff, keep).await })
        .await?;
    crate::base::metrics::workflows_collected(deleted);
    Ok(deleted)
}

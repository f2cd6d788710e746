//! Queues: how work enters stead at scale. A [`Queue`] is a row of the `queues` table (DBOS's
//! columns); a queue actor claims its enqueued workflows within these limits.
//!
//! **Queue definitions** live in `queues`, scoped by `application_name`. The builder's queues are
//! written at launch (replacing); `create_queue`/`set_queue`/`delete_queue` change them at runtime
//! and the supervisor reconciles its queue actors at once; other processes' changes are picked up
//! every `queue_refresh` (10 s). A deleted queue's actor stops claiming, lets its workflows finish,
//! then stops. `delete_queue` refuses while workflows wait (`Error::QueueNotEmpty`);
//! `delete_queue_with(name, WaitingWork::Cancel)` cancels them first.

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};

/// A queue's definition and limits.
///
/// ```
/// use std::time::Duration;
/// let orders = stead::Queue::new("orders")
///     .worker_concurrency(8)
///     .concurrency(20)
///     .rate_limit(100, Duration::from_secs(60))
///     .priority_enabled(true);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Queue {
    pub(crate) name: String,
    pub(crate) concurrency: Option<u32>,
    pub(crate) worker_concurrency: Option<u32>,
    pub(crate) rate_limit: Option<RateLimit>,
    pub(crate) priority_enabled: bool,
    pub(crate) partitioned: bool,
    pub(crate) partition_concurrency: Option<u32>,
    pub(crate) partition_worker_concurrency: Option<u32>,
    pub(crate) partition_rate_limit: Option<RateLimit>,
    pub(crate) polling_interval: Duration,
}

/// A queue's limits, read back from its definition (see the builder methods of [`Queue`] for
/// what each means; `None` is no limit). Serialized with durations in milliseconds
/// (`polling_interval_ms`, `period_ms`), as the CLI and the admin endpoints show them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct QueueLimits {
    pub concurrency: Option<u32>,
    pub worker_concurrency: Option<u32>,
    pub rate_limit: Option<RateLimit>,
    pub priority_enabled: bool,
    pub partitioned: bool,
    pub partition_concurrency: Option<u32>,
    pub partition_worker_concurrency: Option<u32>,
    pub partition_rate_limit: Option<RateLimit>,
    #[serde(rename = "polling_interval_ms", serialize_with = "millis")]
    pub polling_interval: Duration,
}

/// The internal queue: no row in `queues`, no limits; recovery, resume and fork use it, and direct
/// starts run under its actor.
pub(crate) const INTERNAL_QUEUE: &str = "_dbos_internal_queue";

/// At most `limit` starts in any trailing `period`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateLimit {
    pub limit: u32,
    #[serde(rename = "period_ms", serialize_with = "millis")]
    pub period: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Queue {
    /// A queue with no limits, polled every second (DBOS's default).
    pub fn new(name: impl Into<String>) -> Queue {
        Queue {
            name: name.into(),
            concurrency: None,
            worker_concurrency: None,
            rate_limit: None,
            priority_enabled: false,
            partitioned: false,
            partition_concurrency: None,
            partition_worker_concurrency: None,
            partition_rate_limit: None,
            polling_interval: Duration::from_secs(1),
        }
    }

    /// The internal queue: recovery, resume and fork put workflows there; no limits.
    pub(crate) fn internal(polling_interval: Duration) -> Queue {
        Queue {
            polling_interval,
            ..Queue::new(INTERNAL_QUEUE)
        }
    }

    /// At most `n` of this queue's workflows run at once across all executors.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// At most `n` of this queue's workflows run at once in this process.
    pub fn worker_concurrency(mut self, n: u32) -> Self {
        self.worker_concurrency = Some(n);
        self
    }

    /// At most `limit` starts in any trailing `period`, across all executors.
    pub fn rate_limit(mut self, limit: u32, period: Duration) -> Self {
        self.rate_limit = Some(RateLimit { limit, period });
        self
    }

    /// Lower `priority` values run first (FIFO within a value).
    pub fn priority_enabled(mut self, enabled: bool) -> Self {
        self.priority_enabled = enabled;
        self
    }

    /// Workflows carry a partition key; the partition limits apply per key.
    pub fn partitioned(mut self, partitioned: bool) -> Self {
        self.partitioned = partitioned;
        self
    }

    /// At most `n` workflows of one partition run at once across all executors.
    pub fn partition_concurrency(mut self, n: u32) -> Self {
        self.partitioned = true;
        self.partition_concurrency = Some(n);
        self
    }

    /// At most `n` workflows of one partition run at once in this process.
    pub fn partition_worker_concurrency(mut self, n: u32) -> Self {
        self.partitioned = true;
        self.partition_worker_concurrency = Some(n);
        self
    }

    /// At most `limit` starts of one partition in any trailing `period`.
    pub fn partition_rate_limit(mut self, limit: u32, period: Duration) -> Self {
        self.partitioned = true;
        self.partition_rate_limit = Some(RateLimit { limit, period });
        self
    }

    /// How often the queue is polled when nothing wakes it.
    pub fn polling_interval(mut self, every: Duration) -> Self {
        self.polling_interval = every;
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue's limits and polling interval, as defined.
    pub fn limits(&self) -> QueueLimits {
        QueueLimits {
            concurrency: self.concurrency,
            worker_concurrency: self.worker_concurrency,
            rate_limit: self.rate_limit,
            priority_enabled: self.priority_enabled,
            partitioned: self.partitioned,
            partition_concurrency: self.partition_concurrency,
            partition_worker_concurrency: self.partition_worker_concurrency,
            partition_rate_limit: self.partition_rate_limit,
            polling_interval: self.polling_interval,
        }
    }

    /// True when a claim must count a limit shared by every executor, so claims of this queue
    /// are serialised across executors.
    /// This definition with `running` workflows and `recent` starts already counted against its
    /// concurrency and rate limit (elsewhere: other buckets of a sharded database).
    pub(crate) fn less(&self, running: i64, recent: i64) -> Queue {
        let take = |n: u32, used: i64| u32::try_from(i64::from(n) - used).unwrap_or(0);
        Queue {
            concurrency: self.concurrency.map(|n| take(n, running)),
            rate_limit: self.rate_limit.map(|l| RateLimit {
                limit: take(l.limit, recent),
                ..l
            }),
            ..self.clone()
        }
    }

    pub(crate) fn shared_limits(&self) -> bool {
        self.concurrency.is_some()
            || self.rate_limit.is_some()
            || self.partition_concurrency.is_some()
            || self.partition_rate_limit.is_some()
    }

    /// Checks the definition before it is stored.
    pub(crate) fn validate(&self) -> Result<()> {
        crate::names::validate_name(&self.name, "queue name")?;
        let bad = |what: &str| {
            Err(Error::InvalidArgument(format!(
                "queue {:?}: {what}",
                self.name
            )))
        };
        let zero = |n: Option<u32>| n == Some(0);
        if zero(self.concurrency)
            || zero(self.worker_concurrency)
            || zero(self.partition_concurrency)
            || zero(self.partition_worker_concurrency)
        {
            return bad("a concurrency limit must be at least 1");
        }
        for rate in [self.rate_limit, self.partition_rate_limit]
            .into_iter()
            .flatten()
        {
            if rate.limit == 0 || rate.period.is_zero() {
                return bad("a rate limit needs a positive limit and period");
            }
        }
        if self.polling_interval.is_zero() {
            return bad("the polling interval must be positive");
        }
        if self.name == INTERNAL_QUEUE {
            return bad("the internal queue cannot be defined");
        }
        Ok(())
    }
}

/// What to do when an enqueue's deduplication id is held by a running workflow of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dedup {
    /// Fail with [`Error::Duplicate`], naming the holder.
    #[default]
    Reject,
    /// Return a handle on the holder instead.
    ReturnExisting,
}

/// What deleting a queue does with the workflows still waiting on it (`ENQUEUED` or
/// `DELAYED`), which nothing would run once the queue is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitingWork {
    /// Keep the queue and fail with [`Error::QueueNotEmpty`].
    #[default]
    Refuse,
    /// Cancel them, then delete the queue.
    Cancel,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_definitions_are_refused_with_the_queue_named() {
        assert!(Queue::new("q").worker_concurrency(2).validate().is_ok());
        for bad in [
            Queue::new(""),
            Queue::new("q").concurrency(0),
            Queue::new("q").rate_limit(0, Duration::from_secs(1)),
            Queue::new("q").rate_limit(1, Duration::ZERO),
            Queue::new("q").polling_interval(Duration::ZERO),
            Queue::new(INTERNAL_QUEUE),
        ] {
            let err = bad.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        }
    }

    #[test]
    fn only_shared_limits_serialise_claims() {
        assert!(!Queue::new("q").worker_concurrency(3).shared_limits());
        assert!(Queue::new("q").concurrency(3).shared_limits());
        assert!(Queue::new("q")
            .rate_limit(5, Duration::from_secs(1))
            .shared_limits());
        assert!(Queue::new("q").partition_concurrency(1).shared_limits());
    }
}

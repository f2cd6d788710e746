//! Observation, on a [`Client`] (and so on a runtime): whether the system database answers,
//! how loaded each queue is, how many workflows there are per status, and how many completed
//! per time bucket. What the admin
//! endpoints and the dashboard show; useful on their own for health checks and gauges.
//!
//! It only reads, and builds no SQL: it calls the store (`sysdb::observe`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::base::clock::now_ms;
use crate::base::queue::Queue;
use crate::client::manage::{check_filter, ListWorkflows};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::sysdb::CompletedBucket;

/// At most this many buckets per throughput query.
const MAX_BUCKETS: i64 = 10_000;

/// A queue's definition with how many of its workflows wait and run right now, and since when
/// the oldest waiting one waits.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueLoad {
    /// The definition (the internal queue, which has none, shows no limits).
    pub queue: Queue,
    /// Workflows waiting to be claimed (`ENQUEUED`).
    pub enqueued: u64,
    /// Workflows claimed and running (`PENDING`).
    pub pending: u64,
    /// When the oldest waiting workflow was enqueued (its `created_at`, epoch ms), whatever its
    /// priority; `None` when none waits. Now minus this is the queue's lag, as the
    /// `stead_queue_lag_seconds` gauge reports it.
    pub oldest_enqueued_ms: Option<i64>,
    /// When the queue was paused (epoch ms); `None` while it runs ([`Client::pause_queue`]).
    pub paused_at_ms: Option<i64>,
}

/// A queue definition of some application, with its load.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AppQueueLoad {
    /// The application that defined it (`None`: shared by all).
    pub app: Option<String>,
    /// The definition and load.
    pub load: QueueLoad,
}

/// Workflows that completed in `[start_ms, start_ms + width)` (epoch ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThroughputBucket {
    pub start_ms: i64,
    /// Completed with `SUCCESS`.
    pub succeeded: u64,
    /// Completed with `ERROR`.
    pub failed: u64,
}

impl Client {
    /// Runs a trivial statement on the system database; `Ok` when it answers. Like every
    /// call, it retries transient failures for a while: put a timeout around it for a probe.
    pub async fn ping(&self) -> Result<()> {
        Ok(self
            .shared()
            .db
            .call(|db| async move { db.ping().await })
            .await?)
    }

    /// How many workflows match `filter`, per stored status (its paging, order and payload
    /// options are ignored); statuses with none are absent. One count query, for a dashboard's
    /// totals or a listing's "N of M".
    pub async fn count_workflows(&self, filter: ListWorkflows) -> Result<BTreeMap<String, u64>> {
        let query = filter.query;
        check_filter(&query)?;
        let counts = self
            .shared()
            .db
            .call_with(query, |db, query| async move {
                db.count_workflows(&query).await
            })
            .await?;
        Ok(counts
            .into_iter()
            .map(|c| (c.status, c.count.max(0) as u64))
            .collect())
    }

    /// [`count_workflows`](Client::count_workflows) of the workflows waiting on or running from
    /// a queue, as [`list_queued_workflows`](Client::list_queued_workflows) lists them.
    pub async fn count_queued_workflows(
        &self,
        filter: ListWorkflows,
    ) -> Result<BTreeMap<String, u64>> {
        let mut filter = filter;
        filter.query.queued_only = true;
        self.count_workflows(filter).await
    }

    /// Every queue of this application (and the internal queue, first) with its load.
    pub async fn queue_loads(&self) -> Result<Vec<QueueLoad>> {
        let internal = Queue::internal(self.shared().config.internal_poll);
        let mut queues = vec![internal];
        queues.extend(self.queues().await?);
        self.loads(queues).await
    }

    /// The queues of every application (or only of `app` and those shared by all), each with
    /// its application and load, by name; the internal queue first (shared by all).
    pub async fn all_queue_loads(&self, app: Option<&str>) -> Result<Vec<AppQueueLoad>> {
        let internal = Queue::internal(self.shared().config.internal_poll);
        let mut owned = vec![(None, internal)];
        owned.extend(
            self.all_queues()
                .await?
                .into_iter()
                .filter(|(owner, _)| app.is_none() || owner.is_none() || owner.as_deref() == app),
        );
        let (apps, queues): (Vec<_>, Vec<_>) = owned.into_iter().unzip();
        let loads = self.loads(queues).await?;
        Ok(apps
            .into_iter()
            .zip(loads)
            .map(|(app, load)| AppQueueLoad { app, load })
            .collect())
    }

    /// `queues` with their loads, in order.
    async fn loads(&self, queues: Vec<Queue>) -> Result<Vec<QueueLoad>> {
        let names: Vec<String> = queues.iter().map(|q| q.name().to_owned()).collect();
        let counts = self
            .shared()
            .db
            .call_with(names, move |db, names| async move {
                db.queue_counts(&names).await
            })
            .await?;
        let paused = self.paused_queues().await?;
        Ok(queues
            .into_iter()
            .map(|queue| {
                let found = counts.iter().find(|c| c.queue == queue.name());
                let paused_at_ms = paused
                    .iter()
                    .find(|p| p.name == queue.name())
                    .map(|p| p.paused_at_ms);
                let count = |n: Option<i64>| n.unwrap_or(0).max(0) as u64;
                QueueLoad {
                    enqueued: count(found.map(|c| c.enqueued)),
                    pending: count(found.map(|c| c.pending)),
                    oldest_enqueued_ms: found.and_then(|c| c.oldest_enqueued),
                    paused_at_ms,
                    queue,
                }
            })
            .collect())
    }

    /// Workflows completed over the last `window`, in buckets of `bucket` aligned to multiples
    /// of `bucket` since the epoch, oldest first; the last bucket is the current, partial one.
    /// Cancelled workflows are not counted (they never complete).
    pub async fn throughput(
        &self,
        window: Duration,
        bucket: Duration,
    ) -> Result<Vec<ThroughputBucket>> {
        let (since, width, count) = bucket_span(now_ms(), window, bucket)?;
        let found = self
            .shared()
            .db
            .call(move |db| async move { db.completed(since, width, count).await })
            .await?;
        Ok(fill_buckets(since, width, count, &found))
    }
}

/// The aligned start, width and number of buckets that cover `window` up to `now`.
fn bucket_span(now: i64, window: Duration, bucket: Duration) -> Result<(i64, i64, i64)> {
    let width = i64::try_from(bucket.as_millis()).unwrap_or(i64::MAX);
    if width <= 0 {
        return Err(Error::InvalidArgument(
            "a throughput bucket must be at least 1 ms wide".into(),
        ));
    }
    let span = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let count = span / width + 1;
    if count > MAX_BUCKETS {
        return Err(Error::InvalidArgument(format!(
            "a throughput window of {window:?} in buckets of {bucket:?} has {count} buckets; \
             at most {MAX_BUCKETS} are allowed"
        )));
    }
    let since = (now / width - (count - 1)) * width;
    Ok((since, width, count))
}

/// Every bucket of the span, empty ones included.
fn fill_buckets(
    since: i64,
    width: i64,
    count: i64,
    found: &[CompletedBucket],
) -> Vec<ThroughputBucket> {
    (0..count)
        .map(|index| {
            let hit = found.iter().find(|b| b.index == index);
            ThroughputBucket {
                start_ms: since + index * width,
                succeeded: hit.map_or(0, |b| b.succeeded.max(0) as u64),
                failed: hit.map_or(0, |b| b.failed.max(0) as u64),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_aligned_and_end_with_the_current_one() {
        let (since, width, count) =
            bucket_span(1_000_123, Duration::from_secs(60), Duration::from_secs(10)).unwrap();
        assert_eq!((width, count), (10_000, 7));
        assert_eq!(since, 940_000);
        assert!(since + (count - 1) * width <= 1_000_123);
        assert!(1_000_123 < since + count * width);
    }

    #[test]
    fn degenerate_spans_are_refused() {
        assert!(bucket_span(0, Duration::from_secs(1), Duration::ZERO).is_err());
        let huge = bucket_span(
            0,
            Duration::from_secs(86_400 * 365),
            Duration::from_millis(1),
        );
        assert!(matches!(huge, Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn empty_buckets_are_filled_with_zeros() {
        let found = [CompletedBucket {
            index: 1,
            succeeded: 3,
            failed: 1,
        }];
        let all = fill_buckets(100, 10, 3, &found);
        assert_eq!(all.len(), 3);
        assert_eq!((all[0].start_ms, all[0].succeeded), (100, 0));
        assert_eq!(
            (all[1].start_ms, all[1].succeeded, all[1].failed),
            (110, 3, 1)
        );
        assert_eq!(all[2].start_ms, 120);
    }
}

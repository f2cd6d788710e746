//! Rows and parameters of either backend: a row shape both backends return is decoded in one
//! place, beside the column list it reads, and a parameter list both backends take is bound in
//! one place. Both backends use it; it imports neither.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Encode, Postgres, Row, Sqlite, Type};

use super::batch::{BatchPage, BatchRow};
use super::claim::Claimed;
use super::continuations::Continued;
use super::literal::Lit;
use super::manage::{Delayed, ListQuery, ListedRow, StatusCount, StepListing};
use super::observe::{CompletedBucket, QueueCounts};
use super::ops::PeekedMessage;
use super::reads::{StatusRow, StepRow, StreamRow};
use super::schedules::ScheduleRow;
use super::text::Text;
use super::versions::AppVersion;
use crate::base::clock::now_ms;
use crate::base::overlap::Overlap;
use crate::base::queue::{Queue, RateLimit};
use crate::base::status::{Status, WorkflowStatus};
use crate::error::DbError;

/// A value both drivers decode.
pub(crate) trait Value:
    for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>
{
}

impl<T> Value for T where
    T: for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>
{
}

/// A row of either backend.
pub(crate) trait AnyRow {
    /// The value in column `i`.
    fn at<T: Value>(&self, i: usize) -> Result<T, sqlx::Error>;
}

impl AnyRow for PgRow {
    fn at<T: Value>(&self, i: usize) -> Result<T, sqlx::Error> {
        self.try_get(i)
    }
}

impl AnyRow for SqliteRow {
    fn at<T: Value>(&self, i: usize) -> Result<T, sqlx::Error> {
        self.try_get(i)
    }
}

/// A parameter both drivers encode (and Postgres can render inline), borrowed for `'q`.
pub(crate) trait Param<'q>:
    Encode<'q, Postgres> + Type<Postgres> + Encode<'q, Sqlite> + Type<Sqlite> + Lit + Send + 'q
{
}

impl<'q, T> Param<'q> for T where
    T: Encode<'q, Postgres> + Type<Postgres> + Encode<'q, Sqlite> + Type<Sqlite> + Lit + Send + 'q
{
}

/// A statement of either backend taking its parameters, so a parameter list both backends
/// share is bound in one place.
pub(crate) trait Bind<'q>: Sized {
    /// Binds the next parameter.
    fn arg<T: Param<'q>>(self, value: T) -> Self;
}

macro_rules! bind_for {
    ($($ty:ty),*) => {$(
        impl<'q, O> Bind<'q> for sqlx::query::QueryScalar<'q, $ty, O, <$ty as sqlx::Database>::Arguments> {
            fn arg<T: Param<'q>>(self, value: T) -> Self {
                self.bind(value)
            }
        }

        impl<'q> Bind<'q> for sqlx::query::Query<'q, $ty, <$ty as sqlx::Database>::Arguments> {
            fn arg<T: Param<'q>>(self, value: T) -> Self {
                self.bind(value)
            }
        }
    )*};
}

bind_for!(Postgres, Sqlite);

// Decoders and binders both backends use, each beside the column list it reads or writes.

/// The status columns of `workflow_status w`, in the order [`status_from_row`] reads them; the
/// last is the pause's time, from `stead_workflow_pauses wp` left-joined on the id.
pub(super) const STATUS_COLUMNS: &str = "w.workflow_uuid, w.status, w.name, w.executor_id, \
    w.application_version, w.application_name, w.queue_name, w.recovery_attempts, w.created_at, \
    w.updated_at, w.started_at_epoch_ms, w.completed_at, w.parent_workflow_id, w.forked_from, \
    w.workflow_timeout_ms, w.workflow_deadline_epoch_ms, w.priority, w.deduplication_id, \
    w.queue_partition_key, w.delay_until_epoch_ms, w.attributes, wp.paused_at";

/// The chain links of `workflow_status w` (`sysdb::continuations`): the run it continued from
/// and the run it continued as; read after a status row's payload columns. `{s}.` is the schema
/// (SQLite has none: drop it).
pub(super) const LINK_COLUMNS: &str =
    "(SELECT c.from_id FROM {s}.stead_continuations c WHERE c.to_id = w.workflow_uuid), \
     (SELECT c.to_id FROM {s}.stead_continuations c WHERE c.from_id = w.workflow_uuid)";

/// [`LINK_COLUMNS`] where the table is missing: a database DBOS migrated that no stead runtime
/// (or `stead migrate`) has touched yet, read by a client, which never migrates.
pub(super) const NO_LINK_COLUMNS: &str = "CAST(NULL AS TEXT), CAST(NULL AS TEXT)";

/// The link columns for a backend's `{s}.` prefix (`""` on SQLite), when the table exists.
pub(super) fn link_columns(links: bool, prefix: &str) -> String {
    match links {
        true => LINK_COLUMNS.replace("{s}.", prefix),
        false => NO_LINK_COLUMNS.to_owned(),
    }
}

/// A status record, columns in [`STATUS_COLUMNS`] order.
pub(super) fn status_from_row(row: &impl AnyRow) -> Result<WorkflowStatus, DbError> {
    let id: String = row.at(0)?;
    let text: Option<String> = row.at(1)?;
    // A status another writer invented is shown as such, not an error: one foreign row must
    // not fail every listing that meets it.
    let status = text.as_deref().and_then(Status::parse);
    let stored_status = match status {
        Some(_) => None,
        None => Some(text.unwrap_or_default()),
    };
    Ok(WorkflowStatus {
        id,
        status: status.unwrap_or(Status::Unknown),
        stored_status,
        name: row.at::<Option<String>>(2)?.unwrap_or_default(),
        executor_id: row.at(3)?,
        app_version: row.at(4)?,
        app_name: row.at(5)?,
        queue_name: row.at(6)?,
        recovery_attempts: row.at::<Option<i64>>(7)?.unwrap_or(0),
        created_at_ms: row.at(8)?,
        updated_at_ms: row.at(9)?,
        started_at_ms: row.at(10)?,
        completed_at_ms: row.at(11)?,
        parent_workflow_id: row.at(12)?,
        forked_from: row.at(13)?,
        timeout_ms: row.at(14)?,
        deadline_ms: row.at(15)?,
        priority: row.at(16)?,
        deduplication_id: row.at(17)?,
        partition_key: row.at(18)?,
        delay_until_ms: row.at(19)?,
        attributes: row.at(20)?,
        // A pause only means something while the workflow may still run.
        paused_at_ms: match status.is_some_and(|s| !s.is_final()) {
            true => row.at(21)?,
            false => None,
        },
        continued_from: None,
        continued_as: None,
    })
}

impl StatusRow {
    /// The status, then serialization, output, error, and the [`LINK_COLUMNS`].
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StatusRow, DbError> {
        Ok(StatusRow {
            status: WorkflowStatus {
                continued_from: row.at(25)?,
                continued_as: row.at(26)?,
                ..status_from_row(row)?
            },
            serialization: row.at(22)?,
            output: row.at(23)?,
            error: row.at(24)?,
        })
    }
}

impl ListedRow {
    /// The status, then serialization and payloads (inputs, output, error), and the
    /// [`LINK_COLUMNS`].
    pub(super) fn from_row(row: &impl AnyRow) -> Result<ListedRow, DbError> {
        Ok(ListedRow {
            status: WorkflowStatus {
                continued_from: row.at(26)?,
                continued_as: row.at(27)?,
                ..status_from_row(row)?
            },
            serialization: row.at(22)?,
            inputs: row.at(23)?,
            output: row.at(24)?,
            error: row.at(25)?,
        })
    }
}

/// Binds a listing's filters after its ids and statuses (parameters 3 to 16).
pub(super) fn bind_filters<'q, B: Bind<'q>>(b: B, q: &'q ListQuery) -> B {
    b.arg(&q.name)
        .arg(&q.queue)
        .arg(&q.app_version)
        .arg(&q.app_name)
        .arg(q.created_from)
        .arg(q.created_until)
        .arg(&q.parent)
        .arg(&q.forked_from)
        .arg(&q.executor)
        .arg(q.payloads)
        .arg(q.queued_only)
        .arg(q.limit)
        .arg(q.offset)
        .arg(&q.attributes)
}

impl StatusCount {
    /// Status (a foreign writer's `NULL` counts as `""`) and count.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StatusCount, sqlx::Error> {
        Ok(StatusCount {
            status: row.at::<Option<String>>(0)?.unwrap_or_default(),
            count: row.at(1)?,
        })
    }
}

impl StepRow {
    /// Function id, name, output, error, child id, serialization.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StepRow, sqlx::Error> {
        let output = row.at::<Option<String>>(2)?.map(Text::from);
        StepRow::around(row, output)
    }

    /// As [`StepRow::from_row`], a long output held in its row rather than copied ([`Text`]).
    pub(super) fn from_sqlite(row: SqliteRow) -> Result<StepRow, sqlx::Error> {
        let step = StepRow::around(&row, None)?;
        Ok(StepRow {
            output: Text::from_sqlite(row, 2)?,
            ..step
        })
    }

    fn around(row: &impl AnyRow, output: Option<Text>) -> Result<StepRow, sqlx::Error> {
        Ok(StepRow {
            function_id: row.at::<i32>(0)? as u32,
            name: row.at(1)?,
            output,
            error: row.at(3)?,
            child_workflow_id: row.at(4)?,
            serialization: row.at(5)?,
        })
    }
}

impl Continued {
    /// The next run `next_id`, from its queue, deadline and attributes at columns `at..at + 3`.
    pub(super) fn from_row(
        next_id: String,
        row: &impl AnyRow,
        at: usize,
    ) -> Result<Continued, sqlx::Error> {
        Ok(Continued {
            next_id,
            queue: row.at(at)?,
            deadline: row.at(at + 1)?,
            attributes: row.at(at + 2)?,
        })
    }
}

impl StepListing {
    /// Function id, name, output, error, child id, started, completed, serialization, output
    /// size, error size.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StepListing, sqlx::Error> {
        Ok(StepListing {
            function_id: row.at(0)?,
            name: row.at(1)?,
            output: row.at(2)?,
            error: row.at(3)?,
            child_workflow_id: row.at(4)?,
            started_at: row.at(5)?,
            completed_at: row.at(6)?,
            serialization: row.at(7)?,
            output_bytes: row.at(8)?,
            error_bytes: row.at(9)?,
        })
    }
}

impl StreamRow {
    /// Offset, value, serialization.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<StreamRow, sqlx::Error> {
        Ok(StreamRow {
            offset: row.at(0)?,
            value: row.at(1)?,
            serialization: row.at(2)?,
        })
    }
}

impl PeekedMessage {
    /// Message id, message, serialization.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<PeekedMessage, sqlx::Error> {
        Ok(PeekedMessage {
            id: row.at(0)?,
            message: row.at(1)?,
            serialization: row.at(2)?,
        })
    }
}

impl Claimed {
    /// A taken row with its dispatch key (priority, `created_at`), from column `at` on: id,
    /// name, owner, attempts, inputs, serialization, has steps, priority, created, deadline,
    /// trace context, due time.
    pub(super) fn keyed_from_row(
        row: &impl AnyRow,
        at: usize,
    ) -> Result<((i32, i64), Claimed), sqlx::Error> {
        let created: i64 = row.at(at + 8)?;
        let due: Option<i64> = row.at(at + 11)?;
        let claimed = Claimed {
            id: row.at(at)?,
            name: row.at::<Option<String>>(at + 1)?.unwrap_or_default(),
            owner: row.at(at + 2)?,
            recovery_attempts: row.at::<Option<i64>>(at + 3)?.unwrap_or(0),
            inputs: row.at(at + 4)?,
            serialization: row.at(at + 5)?,
            has_steps: row.at(at + 6)?,
            deadline: row.at(at + 9)?,
            trace_context: row.at(at + 10)?,
            ready_at: due.map_or(created, |due| due.max(created)),
        };
        Ok(((row.at(at + 7)?, created), claimed))
    }
}

/// A batch page's parameters after the listing's (`$1`–`$16`, with `q`: the page's filter,
/// sized): the cursor (`$17`, `$18`), the time (`$19`) and the action's text (`$20`).
pub(super) fn bind_batch<'q, B: Bind<'q>>(b: B, q: &'q ListQuery, p: &'q BatchPage) -> B {
    // The first page starts below every row: a cursor always bound keeps the keyset a range
    // of the `created_at` index (`NULL OR ...` would make it a filter over every row before).
    let (after_at, after_id) = match &p.after {
        Some((at, id)) => (*at, id.as_str()),
        None => (i64::MIN, ""),
    };
    bind_filters(b, q)
        .arg(after_at)
        .arg(after_id)
        .arg(now_ms())
        .arg(p.action.argument())
}

impl BatchRow {
    /// Created at, id, changed, queue, owner.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<BatchRow, sqlx::Error> {
        Ok(BatchRow {
            created_at: row.at(0)?,
            id: row.at(1)?,
            changed: row.at(2)?,
            queue: row.at(3)?,
            owner: row.at(4)?,
        })
    }
}

impl Delayed {
    /// Status and queue.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<Delayed, sqlx::Error> {
        Ok(Delayed {
            status: row.at(0)?,
            queue: row.at(1)?,
        })
    }
}

/// An `application_versions` row: name, application, timestamp, created.
pub(super) fn version_from_row(row: &impl AnyRow) -> Result<AppVersion, sqlx::Error> {
    Ok(AppVersion {
        name: row.at(0)?,
        app_name: row.at(1)?,
        timestamp_ms: row.at(2)?,
        created_at_ms: row.at(3)?,
    })
}

/// The columns of `queues` in [`Queue`] order, as [`bind_queue`] and [`queue_from_row`] use them.
pub(super) const QUEUE_COLUMNS: &str = "name, concurrency, worker_concurrency, rate_limit_max, \
    rate_limit_period_sec, priority_enabled, partition_queue, polling_interval_sec, \
    partition_concurrency, partition_worker_concurrency, partition_rate_limit_max, \
    partition_rate_limit_period_sec";

/// Binds a definition's [`QUEUE_COLUMNS`], its application and the time (parameters 1 to 14).
pub(super) fn bind_queue<'q, B: Bind<'q>>(b: B, q: &'q Queue, app: Option<&'q str>) -> B {
    let n = |v: Option<u32>| v.map(|v| v.min(i32::MAX as u32) as i32);
    let secs = |d: Duration| d.as_secs_f64();
    b.arg(&q.name)
        .arg(n(q.concurrency))
        .arg(n(q.worker_concurrency))
        .arg(n(q.rate_limit.map(|r| r.limit)))
        .arg(q.rate_limit.map(|r| secs(r.period)))
        .arg(q.priority_enabled)
        .arg(q.partitioned)
        .arg(secs(q.polling_interval))
        .arg(n(q.partition_concurrency))
        .arg(n(q.partition_worker_concurrency))
        .arg(n(q.partition_rate_limit.map(|r| r.limit)))
        .arg(q.partition_rate_limit.map(|r| secs(r.period)))
        .arg(app)
        .arg(now_ms())
}

/// A `queues` row of [`QUEUE_COLUMNS`] then `application_name`.
pub(super) fn app_queue_from_row(
    row: &impl AnyRow,
) -> Result<(Option<String>, Queue), sqlx::Error> {
    Ok((row.at(12)?, queue_from_row(row)?))
}

/// A `queues` row, columns in [`QUEUE_COLUMNS`] order.
pub(super) fn queue_from_row(row: &impl AnyRow) -> Result<Queue, sqlx::Error> {
    let count = |i: usize| -> Result<Option<u32>, sqlx::Error> {
        Ok(row.at::<Option<i32>>(i)?.map(|n| n.max(0) as u32))
    };
    let rate = |i: usize| -> Result<Option<RateLimit>, sqlx::Error> {
        let limit: Option<i32> = row.at(i)?;
        let period: Option<f64> = row.at(i + 1)?;
        Ok(match (limit, period) {
            (Some(limit), Some(period)) if limit > 0 && period > 0.0 => Some(RateLimit {
                limit: limit as u32,
                period: Duration::from_secs_f64(period),
            }),
            _ => None,
        })
    };
    let poll: f64 = row.at(7)?;
    Ok(Queue {
        name: row.at(0)?,
        concurrency: count(1)?,
        worker_concurrency: count(2)?,
        rate_limit: rate(3)?,
        priority_enabled: row.at(5)?,
        partitioned: row.at(6)?,
        polling_interval: Duration::from_secs_f64(if poll > 0.0 { poll } else { 1.0 }),
        partition_concurrency: count(8)?,
        partition_worker_concurrency: count(9)?,
        partition_rate_limit: rate(10)?,
    })
}

/// The columns of `workflow_schedules` in [`ScheduleRow`] order.
pub(super) const SCHEDULE_COLUMNS: &str =
    "schedule_id, schedule_name, workflow_name, workflow_class_name, schedule, \
    status, context, last_fired_at, automatic_backfill, cron_timezone, queue_name, \
    application_name";

/// What a schedule listing selects: [`SCHEDULE_COLUMNS`] and the policy, from
/// `workflow_schedules LEFT JOIN stead_schedule_policies p USING (schedule_name)`.
pub(super) const SCHEDULE_SELECT: &str =
    "schedule_id, schedule_name, workflow_name, workflow_class_name, schedule, \
    status, context, last_fired_at, automatic_backfill, cron_timezone, queue_name, \
    application_name, p.overlap_policy, p.jitter_ms";

/// Binds a schedule's [`SCHEDULE_COLUMNS`] (parameters 1 to 12).
pub(super) fn bind_schedule<'q, B: Bind<'q>>(b: B, s: &'q ScheduleRow) -> B {
    b.arg(&s.id)
        .arg(&s.name)
        .arg(&s.workflow)
        .arg(&s.class_name)
        .arg(&s.cron)
        .arg(&s.status)
        .arg(&s.context)
        .arg(&s.last_fired_at)
        .arg(s.automatic_backfill)
        .arg(&s.timezone)
        .arg(&s.queue)
        .arg(&s.app_name)
}

impl ScheduleRow {
    /// A `workflow_schedules` row and its policy, columns in [`SCHEDULE_SELECT`] order.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<ScheduleRow, sqlx::Error> {
        Ok(ScheduleRow {
            id: row.at(0)?,
            name: row.at(1)?,
            workflow: row.at(2)?,
            class_name: row.at(3)?,
            cron: row.at(4)?,
            status: row.at(5)?,
            context: row.at(6)?,
            last_fired_at: row.at(7)?,
            automatic_backfill: row.at(8)?,
            timezone: row.at(9)?,
            queue: row.at(10)?,
            app_name: row.at(11)?,
            overlap: Overlap::parse(row.at::<Option<String>>(12)?.as_deref().unwrap_or("")),
            jitter_ms: row.at::<Option<i64>>(13)?.unwrap_or(0),
        })
    }
}

impl QueueCounts {
    /// Queue, enqueued, pending, oldest enqueued.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<QueueCounts, sqlx::Error> {
        Ok(QueueCounts {
            queue: row.at(0)?,
            enqueued: row.at(1)?,
            pending: row.at(2)?,
            oldest_enqueued: row.at(3)?,
        })
    }
}

impl CompletedBucket {
    /// Bucket index, successes, failures.
    pub(super) fn from_row(row: &impl AnyRow) -> Result<CompletedBucket, sqlx::Error> {
        Ok(CompletedBucket {
            index: row.at(0)?,
            succeeded: row.at(1)?,
            failed: row.at(2)?,
        })
    }
}

/// Decodes every row with `f`.
pub(super) fn all<R, T, E>(rows: &[R], f: impl Fn(&R) -> Result<T, E>) -> Result<Vec<T>, DbError>
where
    DbError: From<E>,
{
    rows.iter().map(|r| f(r).map_err(DbError::from)).collect()
}

//! Scheduled workflows, the core side: schedule definitions ([`Schedule`]), the input a
//! scheduled run receives ([`ScheduledTime`]), and the operations on the `workflow_schedules`
//! table behind the client's methods (create, list, pause, resume, delete, backfill, trigger:
//! `client/schedule.rs`) and the scheduler actor. It never names the client or an actor.
//!
//! It never keeps time itself: the scheduler actor wakes at the next firing and calls
//! [`fire`]. Every firing has a deterministic id, so firing twice (two executors, a backfill
//! over fired times) creates one run.
//!
//! **Schedules** live in `workflow_schedules` (DBOS's table, scoped by `application_name` like
//! queues). Cron text is evaluated in the schedule's IANA zone (`base::cron`). Builder schedules
//! are upserted at launch (definition replaced; id, status and `last_fired_at` kept, as DBOS's
//! `apply_schedules`); `create_schedule` refuses an existing name. Creation checks the cron text,
//! the zone, that the workflow is registered and takes a `ScheduledTime`, and that the queue
//! exists.
//!
//! **Scheduled input** is DBOS 3.4's: two positional arguments, the scheduled time (portable JSON:
//! RFC 3339, UTC, ms, `Z`) and the schedule's context (JSON, `null` by default), read in Rust as
//! `ScheduledTime { scheduled, context }`. DBOS 3.4 passes no "actual time"; a run reads its own
//! clock (`ctx.now()`). A context DBOS stored pickled cannot be passed on: such a schedule is
//! reported and not fired.
//!
//! **Backfill** enqueues every firing in `[start, end)` (DBOS's is `(start, end)`; the inclusive
//! start only adds an id that exists when the start was itself a firing), in statements of 1000,
//! and returns every id and how many were new. **Trigger** enqueues one run now with DBOS's id
//! `sched-<name>-trigger-<now>`; neither counts as a firing (`last_fired_at` is left alone).
//!
//! **Overlap and jitter** (stead's, in `stead_schedule_policies`, so every executor applies
//! them): a firing that finds an earlier run of its schedule unfinished is enqueued anyway
//! (`AllowAll`, DBOS's), dropped (`Skip`), dropped unless none waits (`BufferOne`), or enqueued
//! after cancelling the unfinished ones (`CancelOther`); the check and the insert are one
//! transaction serialized per schedule. A backfill is one such firing per statement: under a
//! policy it enqueues at most one run (the earliest new one; the latest with `CancelOther`).
//! Jitter enqueues a firing `DELAYED` by `jitter_ms(id)` in `[0, jitter)` past its nominal time,
//! the same on every executor; its input keeps the nominal time. A trigger ignores both.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::base::cron::{self, Timetable};
use crate::base::overlap::jitter_ms;
pub use crate::base::overlap::Overlap;
use crate::base::queue::INTERNAL_QUEUE;
use crate::base::workflow::WorkflowRef;
use crate::engine::directory::SchedulerRequest;
use crate::engine::handle::WorkflowHandle;
use crate::engine::shared::{Shared, SharedRef};
use crate::engine::start;
use crate::error::{Error, Result};
use crate::sysdb::{Fired, Firings, ScheduleRow};

/// A cron schedule that enqueues a registered workflow at each firing. The workflow takes a
/// [`ScheduledTime`].
///
/// The cron text has five fields (minute first) or six (seconds first); it is evaluated in the
/// schedule's time zone (UTC by default), so `0 0 9 * * *` in `Europe/Paris` fires at 09:00
/// Paris time in winter and in summer.
///
/// ```
/// let s = stead::schedules::Schedule::new("report", "send_report", "0 0 9 * * MON-FRI")
///     .timezone("Europe/Paris")
///     .queue("reports")
///     .context(serde_json::json!({"to": "ops"}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// Unique among the database's schedules.
    pub name: String,
    /// The registered workflow each firing runs.
    pub workflow: String,
    /// The cron text.
    pub cron: String,
    /// IANA zone the cron text is read in; UTC when `None`.
    pub timezone: Option<String>,
    /// The queue firings go to; the internal queue when `None`.
    pub queue: Option<String>,
    /// Passed to every run as [`ScheduledTime::context`].
    pub context: Value,
    /// At launch, enqueue the firings missed since the schedule last fired.
    pub automatic_backfill: bool,
    /// What a firing does while an earlier run is unfinished.
    pub overlap: Overlap,
    /// Each firing waits a deterministic amount in `[0, jitter)`; serialized as `jitter_ms`.
    #[serde(rename = "jitter_ms", serialize_with = "as_ms")]
    pub jitter: Duration,
}

fn as_ms<S: Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u128(d.as_millis())
}

impl Schedule {
    /// A schedule of `workflow` named `name`, firing on `cron`. `workflow` is a typed
    /// [`Workflow<ScheduledTime, O>`](crate::Workflow) (checked when the code compiles) or a
    /// name (checked when the schedule is declared).
    pub fn new(
        name: impl Into<String>,
        workflow: impl WorkflowRef<ScheduledTime>,
        cron: &str,
    ) -> Schedule {
        Schedule {
            name: name.into(),
            workflow: workflow.name().to_owned(),
            cron: cron.to_owned(),
            timezone: None,
            queue: None,
            context: Value::Null,
            automatic_backfill: false,
            overlap: Overlap::AllowAll,
            jitter: Duration::ZERO,
        }
    }

    /// What a firing does while an earlier run of this schedule is unfinished (default:
    /// [`Overlap::AllowAll`]).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Delays each firing by a pseudo-random amount in `[0, jitter)`, derived from the firing's
    /// id (the same on every executor); the run's `ScheduledTime` stays the nominal time.
    /// Millisecond precision.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Reads the cron text in this IANA time zone (e.g. `Europe/Paris`).
    pub fn timezone(mut self, tz: impl Into<String>) -> Self {
        self.timezone = Some(tz.into());
        self
    }

    /// Enqueues firings on this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// A value every run receives.
    pub fn context(mut self, context: Value) -> Self {
        self.context = context;
        self
    }

    /// Whether a launch enqueues the firings missed since the last one (default: no).
    pub fn automatic_backfill(mut self, on: bool) -> Self {
        self.automatic_backfill = on;
        self
    }
}

/// Whether a schedule fires. Serializes as the stored text (`"ACTIVE"`, `"PAUSED"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ScheduleStatus {
    /// Firing.
    Active,
    /// Not firing until resumed.
    Paused,
}

impl ScheduleStatus {
    /// The text stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleStatus::Active => "ACTIVE",
            ScheduleStatus::Paused => "PAUSED",
        }
    }
}

/// A stored schedule, as listed. Serializes as one flat object: the definition's fields, then
/// the row's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The definition. A context stored in a format other than JSON shows as its raw text.
    #[serde(flatten)]
    pub schedule: Schedule,
    /// The row's `schedule_id`.
    pub id: String,
    pub status: ScheduleStatus,
    /// The last firing the scheduler enqueued, as stored (RFC 3339 in the schedule's zone).
    pub last_fired_at: Option<String>,
}

/// The input of a scheduled run: the instant it was scheduled for and the schedule's context.
///
/// Stored as DBOS does, as two positional arguments (`["2025-06-15T09:00:00.000Z", context]`),
/// so DBOS executors and stead executors run each other's firings. The time the run actually
/// starts is the workflow's own business (`ctx.now()`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledTime {
    /// The firing instant.
    pub scheduled: DateTime<Utc>,
    /// The schedule's context (`null` when it has none).
    pub context: Value,
}

impl Serialize for ScheduledTime {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        (cron::portable_time(&self.scheduled), &self.context).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ScheduledTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let (time, context) = match Value::deserialize(d)? {
            Value::Array(mut args) if !args.is_empty() && args.len() <= 2 => {
                let context = if args.len() == 2 {
                    args.remove(1)
                } else {
                    Value::Null
                };
                (args.remove(0), context)
            }
            other => (other, Value::Null),
        };
        let Value::String(text) = time else {
            return Err(D::Error::custom(
                "a scheduled time must be an RFC 3339 string",
            ));
        };
        let scheduled = DateTime::parse_from_rfc3339(&text)
            .map_err(|e| D::Error::custom(format!("scheduled time {text:?}: {e}")))?
            .with_timezone(&Utc);
        Ok(ScheduledTime { scheduled, context })
    }
}

/// What a backfill did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backfilled {
    /// The id of every firing in the range, oldest first (new or already there).
    pub workflow_ids: Vec<String>,
    /// How many of them this call enqueued (the others existed).
    pub enqueued: u64,
}

/// Checks a definition against this runtime: its cron text and zone parse, its workflow is
/// registered and takes a `ScheduledTime`, its queue exists.
async fn validate(shared: &SharedRef, s: &Schedule) -> Result<Timetable> {
    crate::names::validate_name(&s.name, "schedule name")?;
    let table = Timetable::parse(&s.cron, s.timezone.as_deref())?;
    let entry = shared
        .registry
        .get(&s.workflow)
        .ok_or_else(|| Error::UnknownWorkflow(s.workflow.clone()))?;
    let sample = ScheduledTime {
        scheduled: DateTime::<Utc>::UNIX_EPOCH,
        context: s.context.clone(),
    };
    entry.check_input(&crate::base::codec::encode(&sample, "a scheduled time")?)?;
    if let Some(queue) = s.queue.as_deref().filter(|q| *q != INTERNAL_QUEUE) {
        crate::names::validate_name(queue, "queue name")?;
        let app = shared.config.app_name.clone();
        let defs = shared
            .db
            .call_with(app, move |db, app| async move {
                db.list_queues(app.as_deref()).await
            })
            .await?;
        if !defs.iter().any(|q| q.name == queue) {
            return Err(Error::UnknownQueue(queue.to_owned()));
        }
    }
    Ok(table)
}

/// Writes a schedule (`replace`: overwrite the definition of one that exists, keeping its
/// status). Fails with `ScheduleExists` when it exists and `replace` is false.
pub(crate) async fn put(shared: &SharedRef, s: Schedule, replace: bool) -> Result<()> {
    validate(shared, &s).await?;
    let row = ScheduleRow {
        id: uuid::Uuid::new_v4().to_string(),
        name: s.name.clone(),
        workflow: s.workflow.clone(),
        class_name: None,
        cron: s.cron.clone(),
        status: ScheduleStatus::Active.as_str().into(),
        context: crate::base::codec::encode(&s.context, "a schedule's context")?,
        last_fired_at: None,
        automatic_backfill: s.automatic_backfill,
        timezone: s.timezone.clone(),
        queue: s.queue.clone(),
        app_name: shared.config.app_name.clone(),
        overlap: s.overlap,
        jitter_ms: i64::try_from(s.jitter.as_millis()).unwrap_or(i64::MAX),
    };
    let written = shared
        .db
        .call_with(row, move |db, row| async move {
            db.put_schedule(&row, replace).await
        })
        .await?;
    if written.is_none() {
        return Err(Error::ScheduleExists(s.name));
    }
    refresh(shared);
    Ok(())
}

/// The schedules of this application.
pub(crate) async fn list(shared: &SharedRef) -> Result<Vec<ScheduleInfo>> {
    Ok(load(shared).await?.into_iter().map(info).collect())
}

/// The stored rows of this application's schedules.
pub(crate) async fn load(shared: &Shared) -> Result<Vec<ScheduleRow>> {
    let app = shared.config.app_name.clone();
    Ok(shared
        .db
        .call_with(app, move |db, app| async move {
            db.list_schedules(app.as_deref()).await
        })
        .await?)
}

fn info(row: ScheduleRow) -> ScheduleInfo {
    let context = serde_json::from_str(&row.context).unwrap_or(Value::String(row.context));
    ScheduleInfo {
        schedule: Schedule {
            name: row.name,
            workflow: row.workflow,
            cron: row.cron,
            timezone: row.timezone,
            queue: row.queue,
            context,
            automatic_backfill: row.automatic_backfill,
            overlap: row.overlap,
            jitter: Duration::from_millis(u64::try_from(row.jitter_ms).unwrap_or(0)),
        },
        id: row.id,
        status: if row.status == "PAUSED" {
            ScheduleStatus::Paused
        } else {
            ScheduleStatus::Active
        },
        last_fired_at: row.last_fired_at,
    }
}

/// Pauses or resumes a schedule.
pub(crate) async fn set_status(shared: &SharedRef, name: &str, to: ScheduleStatus) -> Result<()> {
    let target = name.to_owned();
    let found = shared
        .db
        .call_with(target, move |db, target| async move {
            db.set_schedule_status(&target, to.as_str()).await
        })
        .await?;
    if !found {
        return Err(Error::UnknownSchedule(name.to_owned()));
    }
    refresh(shared);
    Ok(())
}

/// Deletes a schedule (its runs already enqueued stay).
pub(crate) async fn delete(shared: &SharedRef, name: &str) -> Result<()> {
    let target = name.to_owned();
    let found = shared
        .db
        .call_with(target, move |db, target| async move {
            db.delete_schedule(&target).await
        })
        .await?;
    if !found {
        return Err(Error::UnknownSchedule(name.to_owned()));
    }
    refresh(shared);
    Ok(())
}

async fn get(shared: &SharedRef, name: &str) -> Result<ScheduleRow> {
    let target = name.to_owned();
    shared
        .db
        .call_with(target, move |db, target| async move {
            db.get_schedule(&target).await
        })
        .await?
        .ok_or_else(|| Error::UnknownSchedule(name.to_owned()))
}

/// Enqueues every firing of schedule `name` in `[start, end)` that is not enqueued yet.
pub(crate) async fn backfill(
    shared: &SharedRef,
    name: &str,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Backfilled> {
    start::check_running(shared)?;
    let row = get(shared, name).await?;
    let table = Timetable::parse(&row.cron, row.timezone.as_deref())?;
    let times = table.between(start, end)?;
    let runs = times
        .iter()
        .map(|at| run(&row, at))
        .collect::<Result<Vec<_>>>()?;
    let workflow_ids = runs.iter().map(|(id, _, _)| id.clone()).collect();
    let mut enqueued = 0;
    // Bounded statements: a long range is several batches, each idempotent.
    for chunk in runs.chunks(1000) {
        enqueued += fire(shared, firings(shared, &row, chunk.to_vec(), None))
            .await?
            .created;
    }
    Ok(Backfilled {
        workflow_ids,
        enqueued,
    })
}

/// Enqueues one run of schedule `name` now (not counted as a firing of its cron).
pub(crate) async fn trigger(shared: &SharedRef, name: &str) -> Result<WorkflowHandle> {
    start::check_running(shared)?;
    let row = get(shared, name).await?;
    let now = crate::base::clock::now_utc();
    let id = cron::trigger_id(&row.name, &now);
    let runs = vec![(id.clone(), inputs(&row, &now)?, None)];
    let mut f = firings(shared, &row, runs, None);
    // An explicit request: neither held back by nor cancelling other runs.
    f.overlap = Overlap::AllowAll;
    fire(shared, f).await?;
    Ok(WorkflowHandle::new(id, shared.clone()))
}

/// The input envelope of a firing of `row` at `at`; a context DBOS stored in another format
/// than JSON cannot be passed on.
pub(crate) fn inputs(row: &ScheduleRow, at: &DateTime<Utc>) -> Result<String> {
    if serde_json::from_str::<serde::de::IgnoredAny>(&row.context).is_err() {
        return Err(Error::UnsupportedSerialization {
            what: format!("the context of schedule {:?}", row.name),
            format: "not JSON".into(),
        });
    }
    Ok(cron::firing_inputs(at, &row.context))
}

/// The firing of `row` at `at`: its id, input and due time (with jitter; `None` without).
pub(crate) fn run(
    row: &ScheduleRow,
    at: &DateTime<chrono_tz::Tz>,
) -> Result<(String, String, Option<i64>)> {
    let id = cron::firing_id(&row.name, at);
    let nominal = at.with_timezone(&Utc);
    let due = (row.jitter_ms > 0).then(|| {
        let jitter = Duration::from_millis(u64::try_from(row.jitter_ms).unwrap_or(0));
        nominal.timestamp_millis() + jitter_ms(&id, jitter)
    });
    Ok((id, inputs(row, &nominal)?, due))
}

/// The firings `runs` of schedule `row`, as this executor enqueues them.
pub(crate) fn firings(
    shared: &Shared,
    row: &ScheduleRow,
    runs: Vec<(String, String, Option<i64>)>,
    last_fired_at: Option<String>,
) -> Firings {
    Firings {
        schedule: row.name.clone(),
        workflow: row.workflow.clone(),
        class_name: row.class_name.clone(),
        queue: row.queue.clone().unwrap_or_else(|| INTERNAL_QUEUE.into()),
        app_version: shared.config.own_version(),
        // The schedule's owner routes its runs, as DBOS does.
        app_name: row.app_name.clone().or(shared.config.app_name.clone()),
        runs,
        overlap: row.overlap,
        last_fired_at,
    }
}

/// Enqueues firings (cancelling the runs `CancelOther` displaces, by the ordinary cancel path)
/// and wakes this process's actor of their queue; returns how many runs were new and how many
/// the overlap policy held back.
pub(crate) async fn fire(shared: &SharedRef, f: Firings) -> Result<Fired> {
    let (queue, name) = (f.queue.clone(), f.schedule.clone());
    let mut fired = shared
        .db
        .call_with(f, |db, f| async move { db.fire_schedule(&f).await })
        .await?;
    for other in std::mem::take(&mut fired.others) {
        let done = shared
            .db
            .call_with(other, |db, id| async move { db.cancel(&id, false).await });
        // The new run is enqueued: a cancel that fails is reported, not the firing.
        match done.await {
            Ok(done) => {
                for cancelled in &done.ids {
                    tracing::info!(schedule = %name, workflow_id = %cancelled, "cancelled by a newer firing");
                    shared.cancel_local(cancelled, None);
                }
            }
            Err(e) => tracing::warn!(schedule = %name, error = %e, "cannot cancel an earlier run"),
        }
    }
    if fired.created > 0 {
        start::wake(shared, &queue);
    }
    if fired.held > 0 {
        tracing::info!(schedule = %name, held = fired.held, "firings held back by the overlap policy");
    }
    Ok(fired)
}

/// Tells this process's scheduler to re-read the schedules.
pub(crate) fn refresh(shared: &Shared) {
    let port = shared
        .directory
        .scheduler
        .read()
        .ok()
        .and_then(|p| p.clone());
    if let Some(port) = port {
        let _ = port.send_message(SchedulerRequest::Refresh);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_time_is_dbos_two_positional_arguments() {
        let t = ScheduledTime {
            scheduled: DateTime::parse_from_rfc3339("2025-06-15T10:30:00Z")
                .unwrap()
                .with_timezone(&Utc),
            context: serde_json::json!({"k": 1}),
        };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(text, r#"["2025-06-15T10:30:00.000Z",{"k":1}]"#);
        assert_eq!(serde_json::from_str::<ScheduledTime>(&text).unwrap(), t);
        // A time alone, and a time with an offset, read too.
        let bare: ScheduledTime = serde_json::from_str(r#""2025-06-15T12:30:00+02:00""#).unwrap();
        assert_eq!(bare.scheduled, t.scheduled);
        assert_eq!(bare.context, Value::Null);
        assert!(serde_json::from_str::<ScheduledTime>("[1, 2]").is_err());
    }
}

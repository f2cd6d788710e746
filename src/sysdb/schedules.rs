//! The `workflow_schedules` table (schedule definitions, shared by every executor of an
//! application) and firing: a batch of scheduled runs enqueued under their deterministic ids,
//! idempotently, with the schedule's `last_fired_at` in the same transaction.

use async_trait::async_trait;

use crate::error::DbError;

/// A schedule row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleRow {
    pub id: String,
    pub name: String,
    pub workflow: String,
    pub class_name: Option<String>,
    pub cron: String,
    pub status: String,
    /// The context, as stored (stead writes portable JSON).
    pub context: String,
    pub last_fired_at: Option<String>,
    pub automatic_backfill: bool,
    pub timezone: Option<String>,
    pub queue: Option<String>,
    pub app_name: Option<String>,
}

/// Firings of one schedule to enqueue.
#[derive(Debug, Clone)]
pub(crate) struct Firings {
    pub schedule: String,
    pub workflow: String,
    pub class_name: Option<String>,
    pub queue: String,
    pub app_version: Option<String>,
    pub app_name: Option<String>,
    /// `(workflow id, input envelope)`, oldest first.
    pub runs: Vec<(String, String)>,
    /// Recorded as the schedule's `last_fired_at` (the scheduler's firings only).
    pub last_fired_at: Option<String>,
}

#[async_trait]
pub(crate) trait Schedules: Send + Sync {
    /// The schedules of application `app` (rows of its name, and rows of none), by name.
    async fn list_schedules(&self, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError>;

    /// The schedule named `name`, if any.
    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRow>, DbError>;

    /// Writes a schedule. `replace` overwrites the definition of an existing one (keeping its
    /// id, status and last firing), as DBOS's upsert does; otherwise an existing one is left
    /// alone. `None`: it existed and was left alone; `Some(created)` otherwise.
    async fn put_schedule(&self, s: &ScheduleRow, replace: bool) -> Result<Option<bool>, DbError>;

    /// Sets a schedule's status (`ACTIVE` or `PAUSED`); false when there is no such schedule.
    async fn set_schedule_status(&self, name: &str, status: &str) -> Result<bool, DbError>;

    /// Deletes a schedule; false when there was none. Runs it already enqueued stay.
    async fn delete_schedule(&self, name: &str) -> Result<bool, DbError>;

    /// Enqueues `f`'s runs that do not exist yet (`ENQUEUED`, `schedule_name` set,
    /// consecutive `created_at` values so a backfill keeps its order) and records
    /// `last_fired_at` when given; returns how many it created.
    async fn fire_schedule(&self, f: &Firings) -> Result<u64, DbError>;
}

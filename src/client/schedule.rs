//! The client's schedule operations: create, list, pause, resume, delete, backfill, trigger.
//! Thin: the work is in `crate::engine::schedule`, which the scheduler actor shares.

use chrono::{DateTime, Utc};

use crate::client::Client;
use crate::engine::handle::WorkflowHandle;
use crate::engine::schedule::{
    backfill, delete, list, put, set_status, trigger, Backfilled, Schedule, ScheduleInfo,
    ScheduleStatus,
};
use crate::error::Result;

impl Client {
    /// Creates a schedule; every executor of the application fires it from its next firing on.
    pub async fn create_schedule(&self, schedule: Schedule) -> Result<()> {
        put(self.shared(), schedule, false).await
    }

    /// The schedules of this application.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        list(self.shared()).await
    }

    /// Stops a schedule's firings until it is resumed.
    pub async fn pause_schedule(&self, name: &str) -> Result<()> {
        set_status(self.shared(), name, ScheduleStatus::Paused).await
    }

    /// Restarts a paused schedule's firings, from its next firing time on.
    pub async fn resume_schedule(&self, name: &str) -> Result<()> {
        set_status(self.shared(), name, ScheduleStatus::Active).await
    }

    /// Deletes a schedule; runs it already enqueued are left alone.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        delete(self.shared(), name).await
    }

    /// Enqueues every firing of schedule `name` in `[start, end)` that was not enqueued yet
    /// (firings have deterministic ids, so running a backfill again enqueues nothing).
    pub async fn backfill_schedule(
        &self,
        name: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Backfilled> {
        backfill(self.shared(), name, start, end).await
    }

    /// Enqueues one run of schedule `name` now, outside its cron timetable.
    pub async fn trigger_schedule(&self, name: &str) -> Result<WorkflowHandle> {
        trigger(self.shared(), name).await
    }
}

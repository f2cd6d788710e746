//! The `workflow_schedules` table (schedule definitions, shared by every executor of an
//! application) and firing: a batch of scheduled runs enqueued under their deterministic ids,
//! idempotently, with the schedule's `last_fired_at` in the same transaction.
//!
//! **Overlap.** Under a policy other than `AllowAll` the check ("is an earlier run of this
//! schedule unfinished?") and the insert are one transaction serialized per schedule (SQLite's
//! single writer; a Postgres advisory lock on the schedule's name), so two executors firing
//! different slots cannot both pass it. Such a call enqueues at most one run: the earliest new
//! one (`Skip`, `BufferOne`) or the latest (`CancelOther`).

use async_trait::async_trait;

use crate::base::overlap::Overlap;
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
    /// stead's policy (`stead_schedule_policies`; none: allow overlap, no jitter).
    pub overlap: Overlap,
    pub jitter_ms: i64,
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
    /// `(workflow id, input envelope, due time)`, oldest first; a due time (epoch ms, jitter)
    /// enqueues the run `DELAYED` until then.
    pub runs: Vec<(String, String, Option<i64>)>,
    pub overlap: Overlap,
    /// Recorded as the schedule's `last_fired_at` (the scheduler's firings only).
    pub last_fired_at: Option<String>,
}

#[async_trait]
pub(crate) trait Schedules: Send + Sync {
    /// The schedules of application `app` (rows of its name, and rows of none), by name.
    async fn list_schedules(&self, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError>;

    /// The schedule named `name`, if any.
    async fn get_schedule(&self, name: &str) -> Result<Option<ScheduleRow>, DbError>;

    /// Writes a schedule and its policy. `replace` overwrites the definition of an existing one (keeping its
    /// id, status and last firing), as DBOS's upsert does; otherwise an existing one is left
    /// alone. `None`: it existed and was left alone; `Some(created)` otherwise.
    async fn put_schedule(&self, s: &ScheduleRow, replace: bool) -> Result<Option<bool>, DbError>;

    /// Sets a schedule's status (`ACTIVE` or `PAUSED`); false when there is no such schedule.
    async fn set_schedule_status(&self, name: &str, status: &str) -> Result<bool, DbError>;

    /// Deletes a schedule and its policy; false when there was none. Runs it already enqueued stay.
    async fn delete_schedule(&self, name: &str) -> Result<bool, DbError>;

    /// Enqueues `f`'s runs that do not exist yet (`ENQUEUED`, or `DELAYED` when due later;
    /// `schedule_name` set; consecutive `created_at` values so a backfill keeps its order) as
    /// `f.overlap` allows, and records `last_fired_at` when given.
    async fn fire_schedule(&self, f: &Firings) -> Result<Fired, DbError>;
}

/// What a firing did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fired {
    /// Runs created.
    pub created: u64,
    /// `CancelOther` only: the schedule's unfinished runs to cancel (the new run created).
    pub others: Vec<String>,
    /// New runs the overlap policy kept from being enqueued.
    pub held: u64,
}

/// Under a policy other than `AllowAll`: which of the new runs (`fresh`, indexes into the
/// firing's runs, oldest first) to enqueue given the schedule's unfinished runs `busy`
/// (`(id, status)`), and which of those to cancel. The store calls it inside the transaction
/// that holds the schedule's lock.
pub(crate) fn pick(
    overlap: Overlap,
    fresh: &[usize],
    busy: &[(String, String)],
) -> (Option<usize>, Vec<String>) {
    match overlap {
        Overlap::AllowAll => (fresh.first().copied(), Vec::new()),
        Overlap::Skip if busy.is_empty() => (fresh.first().copied(), Vec::new()),
        Overlap::Skip => (None, Vec::new()),
        Overlap::BufferOne if busy.iter().all(|(_, s)| s == "PENDING") => {
            (fresh.first().copied(), Vec::new())
        }
        Overlap::BufferOne => (None, Vec::new()),
        Overlap::CancelOther => match fresh.last() {
            Some(&n) => (Some(n), busy.iter().map(|(id, _)| id.clone()).collect()),
            None => (None, Vec::new()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(statuses: &[&str]) -> Vec<(String, String)> {
        statuses
            .iter()
            .enumerate()
            .map(|(n, s)| (format!("w{n}"), (*s).to_owned()))
            .collect()
    }

    #[test]
    fn policies_pick_at_most_one_run() {
        let fresh = [1, 2, 3];
        assert_eq!(pick(Overlap::Skip, &fresh, &[]), (Some(1), vec![]));
        assert_eq!(
            pick(Overlap::Skip, &fresh, &busy(&["PENDING"])),
            (None, vec![])
        );
        assert_eq!(
            pick(Overlap::BufferOne, &fresh, &busy(&["PENDING"])),
            (Some(1), vec![])
        );
        assert_eq!(
            pick(Overlap::BufferOne, &fresh, &busy(&["PENDING", "ENQUEUED"])),
            (None, vec![])
        );
        assert_eq!(
            pick(Overlap::CancelOther, &fresh, &busy(&["PENDING"])),
            (Some(3), vec!["w0".to_owned()])
        );
        assert_eq!(
            pick(Overlap::CancelOther, &[], &busy(&["PENDING"])),
            (None, vec![])
        );
    }
}

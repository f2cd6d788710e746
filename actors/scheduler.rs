//! The scheduler actor: keeps the active schedules of this application armed and, at each
//! firing time, enqueues the firing under its deterministic id. Every executor runs one; when
//! several fire the same instant, the first insert wins and the others are no-ops, so no
//! instant runs twice and none is lost while one executor is alive.
//!
//! It sleeps until the earliest next firing of any schedule (one timer, not one per schedule),
//! re-reads the schedules on a timer (changes made elsewhere) and when told (changes made
//! here). It never runs workflow code and never waits on the database inside its handler.
//!
//! **Firing.** Each due firing is enqueued with DBOS's deterministic id `sched-<name>-<time in the
//! schedule's zone, Python isoformat>` (e.g. `sched-report-2025-06-15T09:00:00+02:00`) in one
//! statement that inserts with `ON CONFLICT DO NOTHING`, records `last_fired_at` (same isoformat)
//! and announces the queue. Two executors (stead or DBOS) firing the same instant create one run;
//! the insert is the arbiter (under an overlap policy, with the check, in one transaction; a
//! jitter delays the run, not the firing: `engine::schedule`). Firings go to the schedule's queue, else the internal
//! queue, `ENQUEUED` with this executor's application version and `schedule_name` set. The
//! schedules are re-read every `schedule_refresh` (10 s) and at once after a change made through
//! this runtime. On start (launch or resume) a schedule arms from now; with `automatic_backfill` it
//! first backfills from `last_fired_at`, as DBOS does. After a stall it catches up at most 1000
//! firings per schedule; a restarted scheduler (a permanent child) arms from now, like a launch. A
//! firing whose statement fails past the database retry timeout is logged and lost (another
//! executor, or a backfill, can still enqueue it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::{AbortHandle, JoinSet};

use crate::base::cron::{self, Timetable};
use crate::base::metrics;
use crate::engine::directory::SchedulerRequest;
use crate::engine::schedule;
use crate::engine::shared::SharedRef;
use crate::error::Result;
use crate::sysdb::ScheduleRow;

/// Firings one schedule may catch up at once (after a stall); older ones are skipped (a
/// backfill can still enqueue them).
const MAX_CATCH_UP: usize = 1000;

pub(crate) enum SchedulerMsg {
    Request(SchedulerRequest),
    /// The schedules were read.
    Loaded(Result<Vec<ScheduleRow>>),
    /// The earliest armed firing is due.
    Tick,
    /// The refresh interval passed.
    RefreshTimer,
}

impl From<SchedulerRequest> for SchedulerMsg {
    fn from(r: SchedulerRequest) -> Self {
        SchedulerMsg::Request(r)
    }
}

impl TryFrom<SchedulerMsg> for SchedulerRequest {
    type Error = ();
    fn try_from(m: SchedulerMsg) -> std::result::Result<Self, ()> {
        match m {
            SchedulerMsg::Request(r) => Ok(r),
            _ => Err(()),
        }
    }
}

pub(crate) struct SchedulerArgs {
    pub shared: SharedRef,
    /// Counts the runs this scheduler enqueued (the runtime's stats).
    pub fired: Arc<AtomicU64>,
}

/// An active schedule and its next firing.
struct Armed {
    row: ScheduleRow,
    table: Timetable,
    next: Option<DateTime<Tz>>,
}

pub(crate) struct SchedulerState {
    shared: SharedRef,
    fired: Arc<AtomicU64>,
    armed: HashMap<String, Armed>,
    /// Definitions that do not parse, by name, so each is reported once.
    broken: HashMap<String, ScheduleRow>,
    loading: bool,
    /// A refresh was asked for while a load was in flight.
    reload: bool,
    refresh_armed: bool,
    tick: Option<AbortHandle>,
    /// Loads, firings, backfills and timers; dropped (aborted) with the actor.
    tasks: JoinSet<()>,
}

pub(crate) struct SchedulerActor;

impl Actor for SchedulerActor {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SchedulerMsg>,
        args: SchedulerArgs,
    ) -> std::result::Result<SchedulerState, ActorProcessingErr> {
        if let Ok(mut port) = args.shared.directory.scheduler.write() {
            *port = Some(myself.get_derived());
        }
        Ok(SchedulerState {
            shared: args.shared,
            fired: args.fired,
            armed: HashMap::new(),
            broken: HashMap::new(),
            loading: false,
            reload: false,
            refresh_armed: false,
            tick: None,
            tasks: JoinSet::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<SchedulerMsg>,
        state: &mut SchedulerState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        state.load(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SchedulerMsg>,
        msg: SchedulerMsg,
        state: &mut SchedulerState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // A task that panicked may have lost a firing's bookkeeping: restart clean.
        while let Some(done) = state.tasks.try_join_next() {
            if let Err(e) = done {
                if e.is_panic() {
                    return Err(format!("a scheduler task panicked: {e}").into());
                }
            }
        }
        match msg {
            SchedulerMsg::Request(SchedulerRequest::Refresh) => state.load(&myself),
            SchedulerMsg::RefreshTimer => {
                state.refresh_armed = false;
                state.load(&myself);
            }
            SchedulerMsg::Loaded(result) => state.loaded(&myself, result),
            SchedulerMsg::Tick => {
                state.tick = None;
                state.fire_due();
                state.arm_tick(&myself);
            }
        }
        Ok(())
    }
}

/// Whether two rows define the same firings (status and last firing aside).
fn same_definition(a: &ScheduleRow, b: &ScheduleRow) -> bool {
    (
        &a.id,
        &a.workflow,
        &a.class_name,
        &a.cron,
        &a.context,
        &a.timezone,
        &a.queue,
        &a.app_name,
    ) == (
        &b.id,
        &b.workflow,
        &b.class_name,
        &b.cron,
        &b.context,
        &b.timezone,
        &b.queue,
        &b.app_name,
    )
}

impl SchedulerState {
    /// Reads the schedules, unless a read is in flight (then reads again after it).
    fn load(&mut self, myself: &ActorRef<SchedulerMsg>) {
        if self.loading {
            self.reload = true;
            return;
        }
        self.loading = true;
        let (shared, myself) = (self.shared.clone(), myself.clone());
        self.tasks.spawn(async move {
            let result = schedule::load(&shared).await;
            let _ = myself.send_message(SchedulerMsg::Loaded(result));
        });
    }

    fn loaded(&mut self, myself: &ActorRef<SchedulerMsg>, result: Result<Vec<ScheduleRow>>) {
        self.loading = false;
        match result {
            Ok(rows) => self.rearm(rows),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the schedules; keeping the last ones")
            }
        }
        if std::mem::take(&mut self.reload) {
            self.load(myself);
        } else {
            self.arm_refresh(myself);
        }
        self.arm_tick(myself);
    }

    /// Arms the active schedules: unchanged ones keep their next firing, new and changed ones
    /// start from now, paused and deleted ones are dropped.
    fn rearm(&mut self, rows: Vec<ScheduleRow>) {
        let now = crate::base::clock::now_utc();
        let mut armed = HashMap::new();
        for row in rows.into_iter().filter(|r| r.status == "ACTIVE") {
            let previous = self.armed.remove(&row.name);
            if previous.is_none() {
                metrics::register_schedule(&row.name);
            }
            if let Some(mut kept) = previous.filter(|p| same_definition(&p.row, &row)) {
                kept.row = row;
                armed.insert(kept.row.name.clone(), kept);
                continue;
            }
            let table = match Timetable::parse(&row.cron, row.timezone.as_deref()) {
                Ok(table) => table,
                Err(e) => {
                    if self.broken.get(&row.name) != Some(&row) {
                        tracing::error!(schedule = %row.name, error = %e, "cannot run schedule");
                        self.broken.insert(row.name.clone(), row);
                    }
                    continue;
                }
            };
            self.broken.remove(&row.name);
            // Started (at launch, or resumed): enqueue what was missed, when asked to.
            if row.automatic_backfill {
                self.backfill_missed(&row, now);
            }
            let next = table.next_after(now);
            armed.insert(row.name.clone(), Armed { row, table, next });
        }
        self.armed = armed;
    }

    fn backfill_missed(&mut self, row: &ScheduleRow, now: DateTime<Utc>) {
        let Some(last) = row
            .last_fired_at
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        else {
            return;
        };
        let (shared, name) = (self.shared.clone(), row.name.clone());
        self.tasks.spawn(async move {
            let from = last.with_timezone(&Utc);
            match schedule::backfill(&shared, &name, from, now).await {
                Ok(done) if done.enqueued > 0 => {
                    tracing::info!(schedule = %name, enqueued = done.enqueued, "backfilled missed firings")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(schedule = %name, error = %e, "automatic backfill failed"),
            }
        });
    }

    /// Enqueues every armed firing that is due and advances each schedule past now.
    fn fire_due(&mut self) {
        let now = crate::base::clock::now_utc();
        let mut batches = Vec::new();
        for armed in self.armed.values_mut() {
            let mut due = Vec::new();
            while let Some(at) = armed.next.filter(|at| at.with_timezone(&Utc) <= now) {
                due.push(at);
                armed.next = armed.table.next_after(at.with_timezone(&Utc));
                if due.len() == MAX_CATCH_UP {
                    armed.next = armed.table.next_after(now);
                    break;
                }
            }
            let Some(last) = due.last() else { continue };
            let runs: Result<Vec<_>> = due.iter().map(|at| schedule::run(&armed.row, at)).collect();
            match runs {
                Ok(runs) => batches.push(schedule::firings(
                    &self.shared,
                    &armed.row,
                    runs,
                    Some(cron::isoformat(last)),
                )),
                Err(e) => tracing::error!(schedule = %armed.row.name, error = %e, "cannot fire"),
            }
        }
        for firings in batches {
            let (shared, fired) = (self.shared.clone(), self.fired.clone());
            self.tasks.spawn(async move {
                let name = firings.schedule.clone();
                match schedule::fire(&shared, firings).await {
                    Ok(done) => {
                        fired.fetch_add(done.created, Ordering::Relaxed);
                        metrics::schedule_fired(&name, done.created);
                        if done.held > 0 {
                            metrics::schedule_held(&name, done.held);
                        }
                    }
                    // Retried for the database's retry timeout already: this firing is lost
                    // unless another executor enqueued it (or a backfill does).
                    Err(e) => tracing::error!(schedule = %name, error = %e, "firing failed"),
                }
            });
        }
    }

    /// Wakes the actor at the earliest next firing (replacing the previous timer).
    fn arm_tick(&mut self, myself: &ActorRef<SchedulerMsg>) {
        if let Some(timer) = self.tick.take() {
            timer.abort();
        }
        let Some(earliest) = self
            .armed
            .values()
            .filter_map(|a| a.next.map(|n| n.with_timezone(&Utc)))
            .min()
        else {
            return;
        };
        let at = earliest.timestamp_millis();
        let myself = myself.clone();
        self.tick = Some(self.tasks.spawn(async move {
            crate::base::clock::sleep_until_ms(at).await;
            let _ = myself.send_message(SchedulerMsg::Tick);
        }));
    }

    /// Re-reads the schedules after the refresh interval, to follow changes made elsewhere.
    fn arm_refresh(&mut self, myself: &ActorRef<SchedulerMsg>) {
        if self.refresh_armed {
            return;
        }
        self.refresh_armed = true;
        let every = self.shared.config.schedule_refresh;
        let myself = myself.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(every).await;
            let _ = myself.send_message(SchedulerMsg::RefreshTimer);
        });
    }
}

//! What every actor of one runtime reads: its identity, its workflows, its database handle, its
//! completion slots and its lifecycle state.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use ractor::DerivedActorRef;
use tokio::sync::watch;

use crate::completion::Completions;
use crate::db::Db;
use crate::dispatch::QueueRequest;
use crate::registry::Registry;
use crate::sysdb::Executor;

/// How often an executor sweeps for runs cancelled by a writer that did not announce it.
pub(crate) const DEFAULT_CANCEL_SWEEP: Duration = Duration::from_secs(1);

/// Resolved settings of a runtime.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub schema: String,
    pub app_name: Option<String>,
    pub app_version: String,
    pub executor_id: String,
    /// How often the internal queue is polled when nothing wakes it.
    pub internal_poll: Duration,
    /// How many workflows one claim takes at most.
    pub claim_batch: i64,
    /// The queues this executor serves (all when `None`); the internal queue always.
    pub listen_queues: Option<Vec<String>>,
    /// How often the queue definitions are re-read, to follow changes made elsewhere.
    pub reconcile_every: Duration,
    /// Whether this process runs workflows (a runtime) or only manages them (a client).
    pub executes: bool,
    /// How often the scheduler re-reads the schedules, to follow changes made elsewhere.
    pub schedule_refresh: Duration,
    /// The periodic garbage collection, if any.
    pub retention: Option<crate::retention::Retention>,
    /// How often an executor looks for runs whose row another writer cancelled unannounced.
    pub cancel_sweep: Duration,
}

impl Config {
    /// The version new workflows are written with: a runtime's own; none from a client, so any
    /// executor of the latest version may run them.
    pub(crate) fn own_version(&self) -> Option<String> {
        self.executes.then(|| self.app_version.clone())
    }

    pub(crate) fn executor(&self) -> Executor<'_> {
        Executor {
            executor_id: &self.executor_id,
            app_version: &self.app_version,
            app_name: self.app_name.as_deref(),
        }
    }
}

/// Where a runtime is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunState {
    Running,
    Stopping,
    Stopped,
    Fatal(String),
}

/// The state one runtime's actors share.
pub(crate) struct Shared {
    pub config: Config,
    pub registry: Registry,
    pub db: Db,
    pub completions: Completions,
    pub state: watch::Sender<RunState>,
    /// The current actor of each queue, kept by the queue actors themselves.
    pub queues: DashMap<String, DerivedActorRef<QueueRequest>>,
    /// Slots each local queue actor offers to local enqueues, by queue name.
    pub open_slots: DashMap<String, crate::admission::Slots>,
    /// Wake-ups for waiting durable calls.
    pub signals: crate::signals::Signals,
    /// The actors of the workflows running in this process, by workflow id (more than one only
    /// while a taken-over run winds down).
    pub running: DashMap<String, Vec<crate::dispatch::LocalRun>>,
    /// The definitions this executor last read, by queue name.
    pub queue_defs: DashMap<String, crate::queue::Queue>,
    /// The current scheduler actor, kept by the scheduler itself.
    pub scheduler: crate::schedule::SchedulerPort,
}

pub(crate) type SharedRef = Arc<Shared>;

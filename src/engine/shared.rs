//! What every part of one runtime reads, as the parts it is made of: its settings ([`Config`]),
//! its workflows ([`Registry`]), its store handle ([`Db`]), its completion slots and wake-ups,
//! its lifecycle state ([`RunState`]) and the actor directory ([`Directory`]).
//!
//! A core module: it names no feature (schedules, retention, the client) and no actor.
//!
//! [`Config`]: crate::engine::config::Config

use std::sync::Arc;

use tokio::sync::watch;

use crate::engine::completion::Completions;
use crate::engine::config::Config;
use crate::engine::db::Db;
use crate::engine::directory::Directory;
use crate::engine::registry::Registry;
use crate::engine::signals::Signals;
use crate::engine::stop::Abort;
use crate::error::Result;
use crate::sysdb::{HeldRun, PAUSED_RUN};

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
    /// Wake-ups for waiting durable calls.
    pub signals: Signals,
    /// Where the core finds this process's actors.
    pub directory: Directory,
    /// Workflows whose row this process is writing as its own (a direct start, a fast-path
    /// enqueue) and whose run no queue actor holds yet: a take-back must leave them alone.
    pub starting: dashmap::DashSet<String>,
    /// The workflow actors held here against `Config::max_resident`.
    pub residents: Arc<crate::engine::residents::Residents>,
    /// Whether this process may start durable calls (its lease), kept by the fleet actor.
    pub liveness: crate::engine::fleet::Liveness,
    /// Faults a test injected (feature `test-hooks` only).
    #[cfg(feature = "test-hooks")]
    pub faults: crate::engine::faults::Faults,
    /// Where the crash matrix stops a run (feature `testing` only; set once, after launch).
    #[cfg(feature = "testing")]
    pub crash: std::sync::OnceLock<Arc<crate::engine::crash::CrashPlan>>,
}

pub(crate) type SharedRef = Arc<Shared>;

/// Evicted runs the cancel sweep checks per round (a different batch each round).
const SWEEP_EVICTED: usize = 1000;

impl Shared {
    /// A fresh state around `db`, running.
    pub(crate) fn new(config: Config, registry: Registry, db: Db) -> Shared {
        let residents = crate::engine::residents::Residents::new(config.max_resident);
        Shared {
            config,
            registry,
            db,
            completions: Completions::default(),
            state: watch::channel(RunState::Running).0,
            signals: Default::default(),
            directory: Directory::default(),
            starting: Default::default(),
            residents,
            liveness: crate::engine::fleet::Liveness::unbounded(),
            #[cfg(feature = "test-hooks")]
            faults: Default::default(),
            #[cfg(feature = "testing")]
            crash: Default::default(),
        }
    }

    /// The state of a replay from a file (feature `testing`): no store behind it. Its handle
    /// is closed, so a call that reached the database would be refused, never faked.
    #[cfg(feature = "testing")]
    pub(crate) fn offline(config: Config, registry: Registry) -> SharedRef {
        let db = Db::new(std::time::Duration::ZERO);
        db.close();
        Arc::new(Shared::new(config, registry, db))
    }

    /// Stops the runs of `id` in this process: its actors (all, or only the one running as
    /// `owner`), and its evicted entry, whose slot is then freed.
    pub(crate) fn cancel_local(&self, id: &str, owner: Option<&str>) {
        self.stop_local(id, owner, Abort::Cancelled);
        // A cancelled child ends its evicted parent's wait.
        self.signals.child_ended(id);
    }

    /// [`Shared::cancel_local`] with the reason its runs stop for: `Cancelled`, or `NotOwner`
    /// for a row another execution owns now.
    fn stop_local(&self, id: &str, owner: Option<&str>, reason: Abort) {
        self.directory.stop_local(id, owner, reason);
        if self.signals.evicted.remove_run(id, owner) {
            self.completions.abandon(id);
        }
    }

    /// The runs this process holds, with their owner tokens: every resident one, and a batch
    /// of the evicted ones (`all`: every evicted one).
    pub(crate) fn held_runs(&self, all: bool) -> Vec<HeldRun> {
        let mut held = self.directory.held_runs();
        let evicted = &self.signals.evicted;
        held.extend(match all {
            true => evicted.held_all(),
            false => evicted.held_batch(SWEEP_EVICTED),
        });
        held
    }

    /// Stops the runs among `held` whose row is no longer `PENDING` under their owner token
    /// (another writer cancelled, resumed or adopted it), or whose workflow is paused (those
    /// stop as a pause stops them, `engine::pause`); one read. Returns how many.
    pub(crate) async fn stop_moved_runs(&self, held: Vec<HeldRun>) -> Result<usize> {
        if held.is_empty() {
            return Ok(0);
        }
        let lost = self
            .db
            .call_with(held, |db, held| async move { db.lost_runs(&held).await })
            .await?;
        for run in &lost {
            if run.status == PAUSED_RUN {
                tracing::debug!(workflow_id = %run.id, "the workflow is paused; stopping its run");
                self.pause_local(&run.id, Some(&run.owner));
                continue;
            }
            // A run whose own outcome is committed lingers until its actor stops: not news.
            match run.status.as_str() {
                "SUCCESS" | "ERROR" => tracing::debug!(workflow_id = %run.id,
                    status = %run.status, "the workflow's row is final; forgetting its run"),
                _ => tracing::info!(workflow_id = %run.id, status = %run.status,
                    "the workflow's row moved on; stopping its run here"),
            }
            let reason = match run.status.as_str() {
                "CANCELLED" => Abort::Cancelled,
                _ => Abort::NotOwner,
            };
            self.stop_local(&run.id, Some(&run.owner), reason);
        }
        Ok(lost.len())
    }
}

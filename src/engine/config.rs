//! A runtime's settings, resolved once by the builder (or a client's options) and read by every
//! part of it; plain values, never changed after launch and never naming a feature or an actor.

use std::time::Duration;

use crate::base::backoff::Backoff;
use crate::base::limits::{HistoryLimits, DEFAULT_MAX_VALUE_BYTES};
use crate::error::{Error, Result};
use crate::sysdb::Executor;

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
    /// How often an executor looks for runs whose row another writer cancelled unannounced.
    pub cancel_sweep: Duration,
    /// How long a workflow waits idle before it is evicted from memory (`None`: never).
    pub evict_after: Option<Duration>,
    /// How many workflows this process holds in memory at once (`None`: unbounded).
    pub max_resident: Option<usize>,
    /// The lease and the adoption timer (an executor on Postgres).
    pub fleet: crate::engine::fleet::FleetSettings,
    /// How much history one run may record, unless its workflow says otherwise.
    pub history: HistoryLimits,
    /// The largest value a run, a start or an enqueue records.
    pub max_value_bytes: usize,
}

/// The application stead runs as when none is given (and `DBOS_APP_NAME` is unset).
///
/// DBOS treats a row with no `application_name` as every application's, so stead never writes
/// one: a runtime and a client default to `DBOS_APP_NAME`, else this (also the default SQLite
/// file's name). A claim or a recovery that takes an unowned row (written by SQL or an unnamed
/// DBOS client) sets its `application_name` to the claimer's, as DBOS's own dequeue does. A
/// client acts for one application: what it enqueues is that application's, except onto a queue
/// another application defined, whose run is the queue owner's, since only the owner's executors
/// claim from it. `WorkflowOptions::app_name` routes one workflow anywhere (a DBOS app).
pub const DEFAULT_APP_NAME: &str = "stead";

/// The application name: the one given, else `DBOS_APP_NAME`, else [`DEFAULT_APP_NAME`].
pub(crate) fn app_name_or_default(given: Option<String>) -> String {
    given
        .or_else(|| {
            std::env::var("DBOS_APP_NAME")
                .ok()
                .filter(|v| !v.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_APP_NAME.to_owned())
}

/// How long a waiting workflow stays resident before it is evicted, by default.
pub(crate) const DEFAULT_EVICT_AFTER: Duration = Duration::from_secs(60);

/// How often an executor sweeps for runs cancelled by a writer that did not announce it.
pub(crate) const DEFAULT_CANCEL_SWEEP: Duration = Duration::from_secs(1);

impl Config {
    /// A process that manages workflows and runs none (a client, or a replay from a file).
    pub(crate) fn passive(schema: String, app_name: Option<String>) -> Config {
        Config {
            schema,
            app_name: Some(app_name_or_default(app_name)),
            app_version: String::new(),
            executor_id: "client".into(),
            internal_poll: Duration::from_secs(1),
            claim_batch: 0,
            listen_queues: Some(Vec::new()),
            reconcile_every: Duration::from_secs(60),
            executes: false,
            schedule_refresh: Duration::from_secs(10),
            cancel_sweep: DEFAULT_CANCEL_SWEEP,
            evict_after: None,
            max_resident: None,
            fleet: Default::default(),
            history: HistoryLimits::default(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
        }
    }

    /// Refuses `value`, recorded by `call` (named by `what`), when it is over the value limit:
    /// before anything of it is written.
    pub(crate) fn check_value(&self, value: &str, call: impl FnOnce() -> String) -> Result<()> {
        if value.len() <= self.max_value_bytes {
            return Ok(());
        }
        Err(Error::ValueTooLarge {
            call: call(),
            bytes: value.len(),
            limit: self.max_value_bytes,
        })
    }

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

/// How a supervisor restarts its permanent children: at most `max_restarts` within `window`,
/// each after an exponentially growing delay; past that the runtime stops with a fatal error
/// rather than looping.
///
/// ```
/// use std::time::Duration;
/// let policy = stead::runtime::RestartPolicy::default()
///     .max_restarts(3)
///     .window(Duration::from_secs(30))
///     .backoff(Duration::from_millis(50), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartPolicy {
    pub(crate) max_restarts: u32,
    pub(crate) window: Duration,
    pub(crate) backoff: Backoff,
}

impl Default for RestartPolicy {
    /// 5 restarts a minute, 100 ms doubling up to 10 s.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff: Backoff::exponential(Duration::from_millis(100), Duration::from_secs(10)),
        }
    }
}

impl RestartPolicy {
    /// The most restarts allowed within the window.
    pub fn max_restarts(mut self, n: u32) -> Self {
        self.max_restarts = n;
        self
    }

    /// The sliding window restarts are counted in.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The first delay before a restart and the longest one.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff = Backoff::exponential(initial, max);
        self
    }
}

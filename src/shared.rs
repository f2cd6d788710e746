//! What every part of one runtime reads, as the parts it is made of: its settings ([`Config`]),
//! its workflows ([`Registry`]), its store handle ([`Db`]), its completion slots and wake-ups,
//! its lifecycle state ([`RunState`]) and the actor directory ([`Directory`]).
//!
//! A core module: it names no feature (schedules, retention, the client) and no actor.
//!
//! [`Config`]: crate::config::Config

use std::sync::Arc;

use tokio::sync::watch;

use crate::completion::Completions;
use crate::config::Config;
use crate::db::Db;
use crate::directory::Directory;
use crate::registry::Registry;
use crate::signals::Signals;

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
    /// Whether this process may start durable calls (its lease), kept by the fleet actor.
    pub liveness: crate::fleet::Liveness,
}

pub(crate) type SharedRef = Arc<Shared>;

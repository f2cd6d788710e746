//! The runtime's actors, one file each. A private child of the composition root
//! (`src/launch.rs`): they use the core (`crate::*`), and only `launch` can name them, through
//! the entry points below; the rest of the core reaches them through message types it defines
//! (`db::Request`, `dispatch::QueueRequest`, `dispatch::WorkflowRequest`,
//! `directory::SchedulerRequest`) held in the actor directory.

mod database;
mod fleet;
mod listener;
mod queue;
mod restart;
mod retention;
mod scheduler;
mod supervisor;
mod sweep;
mod workflow;

pub(super) use database::{Database, LANE_NAMES};
pub(super) use fleet::{FleetActor, FleetArgs};
pub(super) use listener::{ListenerActor, ListenerArgs};
pub(super) use queue::{QueueActor, QueueArgs};
pub(super) use restart::Restart;
pub(super) use retention::{RetentionActor, RetentionArgs};
pub(super) use scheduler::{SchedulerActor, SchedulerArgs};
pub(super) use supervisor::{ChildSpec, QueueSet, Role, Supervisor, SupervisorArgs, SupervisorMsg};
pub(super) use sweep::{SweepActor, SweepArgs};

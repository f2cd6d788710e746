//! The runtime's actors, one file each (the queue actor's database side in `queue/claims.rs`).
//! A private child of the composition root
//! (`src/runtime/launch.rs`, through `#[path]`): they use the inner rings (`crate::engine`,
//! `crate::durable`, `crate::sysdb`, `crate::base`), and only `launch` can name them, through the
//! entry points below; the engine reaches them through message types it defines
//! (`engine::db::Request`, `engine::dispatch::QueueRequest`,
//! `engine::directory::SchedulerRequest`), held as ractor `DerivedActorRef`s in the database port
//! (`engine::db::Db`) and the actor directory; a workflow actor's run is stopped through its
//! flag (`engine::stop`), which the directory holds.

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

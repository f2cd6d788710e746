//! The runtime's actors, one file each. They use the core (`crate::*`); the core reaches them
//! only through message types it defines (`db::Request`, `QueueRequest`) and the composition root
//! in `launch.rs`.

pub(crate) mod database;
pub(crate) mod listener;
pub(crate) mod queue;
pub(crate) mod restart;
pub(crate) mod retention;
pub(crate) mod scheduler;
pub(crate) mod supervisor;
pub(crate) mod sweep;
pub(crate) mod workflow;

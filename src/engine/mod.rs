//! The engine: what schedules and wakes runs, without running their code. The runtime's shared
//! state, its settings and registry, the actor directory and the messages the core sends actors,
//! queue admission, starts and enqueues, completion slots and handles, wake-up signals, the
//! eviction registry, paused runs, the database actor's port, fleet liveness, schedules and
//! retention (and, for tests, injected faults and the crash matrix's crash points).
//!
//! It uses `base` and `sysdb`; it never names an actor (those are `actors/`, reached only
//! through the message types defined here) and never reaches up into `durable` except for the
//! registry's body type, which takes a `Context`.

pub(crate) mod admission;
pub(crate) mod completion;
pub(crate) mod config;
#[cfg(feature = "testing")]
pub(crate) mod crash;
pub(crate) mod db;
pub(crate) mod directory;
pub(crate) mod dispatch;
pub(crate) mod evict;
#[cfg(feature = "test-hooks")]
pub(crate) mod faults;
pub(crate) mod fleet;
pub(crate) mod handle;
pub(crate) mod parked;
pub(crate) mod pause;
pub(crate) mod registry;
pub(crate) mod request;
pub(crate) mod residents;
pub(crate) mod retention;
pub(crate) mod schedule;
pub(crate) mod shared;
pub(crate) mod signals;
pub(crate) mod start;
pub(crate) mod stop;

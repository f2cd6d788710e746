//! The integration tests, one binary: a module per concept, each test on a database of its own
//! (`common::TestDb`), most on both backends (`both_backends!`). One binary links the crate and
//! the harness once, where a binary per file linked them once per file.
//!
//! Tests that need a process to die, freeze or restart run this binary again as a child, by the
//! child test's full path (`current_exe() --exact transactions::txn_child --ignored`).
//!
//! Three suites stay binaries of their own (`tests/observability.rs`, `tests/otel.rs`,
//! `tests/prometheus.rs`): each installs a process-wide metrics recorder or tracing subscriber,
//! which every other test's workflows in the same process would feed (and only one may).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "admin")]
mod admin;
mod admin_access;
mod adoption;
mod attributes;
mod batch;
mod cancel;
mod chaos;
mod children;
mod citus;
#[cfg(feature = "cli")]
mod cli;
mod client;
mod connection_loss;
#[cfg(feature = "testing")]
mod continue_as_new;
#[cfg(feature = "testing")]
mod crash_matrix;
#[cfg(feature = "admin")]
mod dashboard;
mod dbos_interop;
mod dbos_peer;
mod dbos_sql_functions;
mod debounce;
mod deep_replay;
mod embedded;
mod enqueue;
mod events;
mod eviction;
mod exhaustion;
mod failover;
mod fleet;
#[cfg(all(feature = "testing", feature = "cli"))]
mod history;
mod hostile;
mod limits;
mod manage;
mod memory;
mod messages;
mod patching;
mod pause;
mod pool;
mod poolers;
mod queues;
mod recovery;
mod restarts;
mod retention;
mod rewind;
mod round_trips;
mod runtime;
mod schedules;
mod schema;
#[cfg(all(feature = "admin", feature = "cli"))]
mod step_history;
mod steps;
mod store_faults;
mod streams;
mod supervision;
mod time;
mod timeouts;
mod transactions;
mod typed;
mod typed_errors;
#[cfg(all(feature = "admin", feature = "cli"))]
mod update_faces;
mod updates;
mod verify;
#[cfg(feature = "testing")]
mod virtual_time;
mod workflow_pause;
mod workflows;

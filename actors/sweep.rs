//! The cancel sweep actor: every interval, asks the database which of the workflows running in
//! this process have a row that moved on without an announcement (cancelled or resumed by
//! another writer, such as DBOS's CLI or client), and stops those runs. Started by executors.
//!
//! It only reads, and only when something runs here; it never writes and never runs user code.
//!
//! **Cancels nobody announced** (DBOS's client and CLI, SQL): every `cancel_sweep` (1 s default)
//! one read (an `UNNEST`/`json_each` read by primary key, only while something runs here) finds the
//! runs this process holds whose row is no longer `PENDING` under their owner token, and stops them
//! as an announced cancel would: waits are interrupted, the slot is freed. Each round also checks a
//! rotating batch of 1,000 evicted runs. A durable sleep that runs its course re-reads its row once
//! before returning, so a run cancelled during a sleep stops before its next step's body even
//! between sweeps; `recv` re-checks ownership on each poll through its own write, `get_event` and a
//! child's result are refused at their record. The bound: a cancelled run stops within the sweep
//! interval, and no step body starts after the cancel except one that began before the sweep saw it
//! (whose result is refused). No read is added per step: W1–W3 are unchanged.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::engine::shared::SharedRef;
use crate::error::Result;

pub(crate) struct SweepActor;

pub(crate) struct SweepArgs {
    pub shared: SharedRef,
    pub every: Duration,
}

/// Time to sweep.
pub(crate) struct Tick;

impl Actor for SweepActor {
    type Msg = Tick;
    type State = SweepArgs;
    type Arguments = SweepArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Tick>,
        args: SweepArgs,
    ) -> Result<SweepArgs, ActorProcessingErr> {
        myself.send_after(args.every, || Tick);
        Ok(args)
    }

    /// One sweep, then the next tick: sweeps never overlap, and a slow one delays the next.
    async fn handle(
        &self,
        myself: ActorRef<Tick>,
        _: Tick,
        state: &mut SweepArgs,
    ) -> Result<(), ActorProcessingErr> {
        if let Err(e) = sweep(&state.shared).await {
            tracing::warn!(error = %e, "cancel sweep failed; retrying at the next interval");
        }
        myself.send_after(state.every, || Tick);
        Ok(())
    }
}

/// Stops the runs of this process whose row moved on without an announcement (another writer
/// cancelled or resumed it: DBOS's tools do not announce).
async fn sweep(shared: &SharedRef) -> Result<()> {
    shared.stop_moved_runs(shared.held_runs(false)).await?;
    Ok(())
}

//! The fleet actor (an executor on Postgres): keeps this executor's lease and adopts dead
//! executors' work.
//!
//! Its keeper task pings the liveness lock's connection every fifth of the lease; each ping
//! that answers renews the lease from when it was sent. When pings fail it drops the
//! connection (releasing the lock) and takes the lock again on a new one; if the lease ran
//! out first, it has suspended the process: every run waits at the gate before its next durable
//! call. Once the lock is back it stops the runs whose row moved meanwhile (adopted, cancelled),
//! lets the others go on, and has each queue take back its rows no run here holds
//! (`engine::fleet`, "Coming back").
//! Its scan task, while the lease holds, adopts the work of dead, quiet executors that this
//! one can run, and samples the fleet's metrics and stranded work.
//!
//! It never runs a workflow and never writes a workflow's row except through the store's
//! recovery and adoption calls.
//!
//! **Adoption.** Every executor, while its lease holds, scans every adoption interval (default 2 s,
//! ±10%) for dead, quiet roster executors owning `PENDING` workflows of its application and
//! version, and adopts each in one statement: it takes the dead executor's lock for one transaction
//! (`pg_try_advisory_xact_lock`), so exactly one process adopts it and never while it or a relaunch
//! under its id lives, and puts its `PENDING` workflows of this version and application with a name
//! this executor registered back on their queue (the internal one for direct starts), `ENQUEUED`
//! with no owner and `started_at` cleared, as DBOS's `reenqueue_for_recovery` does, announcing the
//! queues. The claim that takes each counts the recovery attempt, as for recovery at launch; any
//! executor of the version may claim them. With the default settings, kill → first adopted step is
//! at most the lease (5 s) + margin (1 s) + one interval (2.2 s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinSet;

use crate::engine::dispatch::QueueRequest;
use crate::engine::shared::SharedRef;
use crate::error::{DbError, Error};
use crate::sysdb::{Adoption, Lease, Store};

pub(crate) struct FleetArgs {
    pub shared: SharedRef,
    pub sys: Arc<dyn Store>,
    /// The lease taken at launch; `None` after a restart (the lock is taken again).
    pub lease: Option<Box<dyn Lease>>,
}

/// What the actor is told: only that a task of its own ended.
pub(crate) enum FleetMsg {
    TaskEnded(String),
}

pub(crate) struct FleetState {
    /// The keeper and the scan; dropped (aborted) with the actor, which ends the lease's
    /// session and so releases the lock.
    _tasks: JoinSet<()>,
}

pub(crate) struct FleetActor;

impl Actor for FleetActor {
    type Msg = FleetMsg;
    type State = FleetState;
    type Arguments = FleetArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<FleetMsg>,
        args: FleetArgs,
    ) -> Result<FleetState, ActorProcessingErr> {
        let mut tasks = JoinSet::new();
        let (shared, sys) = (args.shared.clone(), args.sys.clone());
        let me = myself.clone();
        tasks.spawn(async move {
            keep(shared, sys, args.lease).await;
            let _ = me.send_message(FleetMsg::TaskEnded("keeper".into()));
        });
        let shared = args.shared;
        tasks.spawn(async move {
            scan(shared).await;
            let _ = myself.send_message(FleetMsg::TaskEnded("scan".into()));
        });
        Ok(FleetState { _tasks: tasks })
    }

    async fn handle(
        &self,
        _: ActorRef<FleetMsg>,
        msg: FleetMsg,
        _: &mut FleetState,
    ) -> Result<(), ActorProcessingErr> {
        // Both tasks loop forever: one that ended panicked. Restart with a fresh lease.
        let FleetMsg::TaskEnded(task) = msg;
        Err(format!("the fleet actor's {task} task ended").into())
    }
}

/// Keeps the lease for as long as the process runs.
async fn keep(shared: SharedRef, sys: Arc<dyn Store>, mut lease: Option<Box<dyn Lease>>) {
    let settings = shared.config.fleet;
    let id = shared.config.executor_id.clone();
    let mut suspended = false;
    loop {
        tokio::time::sleep(settings.ping_every()).await;
        if let Some(held) = lease.as_mut() {
            let sent = Instant::now();
            match tokio::time::timeout(settings.ping_timeout(), held.ping(&id)).await {
                Ok(Ok(())) => {
                    shared.liveness.renew(sent, settings.lease);
                    continue;
                }
                failed => {
                    tracing::warn!(executor = %id, reason = %describe(failed),
                        "lost the liveness connection; taking the lock again");
                    // Ending the session releases the lock, so a new session can take it.
                    lease = None;
                }
            }
        }
        if shared.liveness.expired() && !suspended {
            suspend(&shared);
            suspended = true;
        }
        let sent = Instant::now();
        let retaken = sys.hold(&id, settings.server_timeout_ms());
        let Ok(Ok(Some(mut held))) = tokio::time::timeout(settings.ping_timeout(), retaken).await
        else {
            continue;
        };
        if held.ping(&id).await.is_err() {
            continue;
        }
        // Taken back before the lease ran out: no peer could have found this executor quiet
        // (that needs longer than the lease), so every run is still its own.
        if shared.liveness.expired() && !suspended {
            suspend(&shared);
            suspended = true;
        }
        if suspended && resume(&shared).await.is_err() {
            continue;
        }
        tracing::info!(executor = %id, suspended, "holds its liveness lock again");
        shared.liveness.renew(sent, settings.lease);
        suspended = false;
        lease = Some(held);
    }
}

fn describe(failed: Result<Result<(), DbError>, tokio::time::error::Elapsed>) -> String {
    match failed {
        Ok(Err(e)) => e.to_string(),
        Err(_) => "the ping timed out".into(),
        Ok(Ok(())) => "no failure".into(),
    }
}

/// Shuts the gate: the lease ran out, so a peer may soon take this executor's work over. No
/// run starts another durable call until [`resume`] found it still its own.
fn suspend(shared: &SharedRef) {
    shared.liveness.suspend();
    crate::base::metrics::fenced();
    tracing::warn!(executor = %shared.config.executor_id,
        "could not prove this executor alive within its lease: its runs wait at the gate");
}

/// With the lock held again (nobody can adopt from now on): stops the runs whose row moved
/// while the gate was shut (adopted, cancelled), keeps the rest, and has each queue take back
/// this executor's `PENDING` rows that no run here holds.
async fn resume(shared: &SharedRef) -> Result<(), Error> {
    let stopped = shared.stop_moved_runs(shared.held_runs(true)).await?;
    tracing::info!(
        stopped,
        "runs whose row moved meanwhile stopped; the others go on"
    );
    for queue in shared.directory.queues.iter() {
        let _ = queue.send_message(QueueRequest::TakeBack);
    }
    Ok(())
}

/// Adopts dead executors' work and samples the fleet, every adoption interval while alive.
async fn scan(shared: SharedRef) {
    let mut stranded = 0;
    loop {
        tokio::time::sleep(jitter(shared.config.fleet.adopt_every)).await;
        if !shared.liveness.admits() {
            continue;
        }
        if let Err(e) = scan_once(&shared, &mut stranded).await {
            tracing::debug!(error = %e, "fleet scan failed; trying again next interval");
        }
    }
}

/// ±10%, so executors launched together do not scan in step.
fn jitter(every: Duration) -> Duration {
    let spread = rand_unit() * 0.2 - 0.1;
    every.mul_f64(1.0 + spread)
}

fn rand_unit() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64;
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

async fn scan_once(shared: &SharedRef, last_stranded: &mut usize) -> Result<(), Error> {
    // Right after an outage everyone looks quiet: adopt only once this executor has itself been
    // live for longer than the quiet margin, so the others had that long to come back.
    if shared.liveness.live_for() > shared.config.fleet.quiet_after() {
        let dead = shared
            .db
            .call_with(shared.clone(), |db, me| async move {
                db.adoptable(&me.config.executor()).await
            })
            .await?;
        for executor in dead {
            adopt(shared, executor).await?;
        }
    }
    let app = shared.config.app_name.clone();
    let (live, stranded) = shared
        .db
        .call_with(app, |db, app| async move {
            let live = db.live_executors(app.as_deref()).await?;
            let stranded = db.stranded(app.as_deref()).await?;
            Ok((live as usize, stranded.len()))
        })
        .await?;
    crate::base::metrics::fleet_sampled(live, stranded);
    if stranded > 0 && stranded != *last_stranded {
        tracing::warn!(
            stranded,
            "workflows of dead executors are stranded: no live executor serves their version; \
             list them with `stead workflow stranded`, move them with \
             `stead workflow stranded --move-to <version>`"
        );
    }
    *last_stranded = stranded;
    Ok(())
}

async fn adopt(shared: &SharedRef, dead: String) -> Result<(), Error> {
    let names: Vec<String> = shared.registry.names().map(str::to_owned).collect();
    let adopted = shared
        .db
        .call_with(
            (shared.clone(), dead.clone(), names),
            |db, (me, dead, names)| async move {
                let a = Adoption {
                    me: me.config.executor(),
                    dead: &dead,
                    names: &names,
                };
                db.adopt(&a).await
            },
        )
        .await?;
    let Some(adopted) = adopted.filter(|a| a.workflows > 0) else {
        return Ok(());
    };
    crate::base::metrics::adopted(adopted.workflows);
    tracing::info!(dead = %dead, workflows = adopted.workflows,
        "adopted a dead executor's workflows");
    for queue in &adopted.queues {
        if let Some(actor) = shared.directory.queues.get(queue) {
            let _ = actor.send_message(QueueRequest::Wake);
        }
    }
    Ok(())
}

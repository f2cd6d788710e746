//! The listener actor: one LISTEN connection that turns other processes' announcements into
//! wake-ups: an enqueue wakes its queue's actor, a cancel or a pause tells the workflow's actor,
//! a message, event or stream write wakes the durable calls waiting for it.
//!
//! Wake-ups only make things faster: queue actors also poll, so a lost notification costs at
//! most a polling interval. After a reconnect, when notifications may have been missed, every
//! queue is woken. It never claims or writes anything itself.
//!
//! **Wake-ups.** An enqueue wakes the local queue actor by message and announces itself with
//! `pg_notify('stead_queue_channel', queue)` in the same statement; this actor wakes the queue
//! actor of any process. A freed slot claims at once when work is known to wait. Polling (the
//! queue's interval, doubled per contended claim up to ×8, ±10% jitter) is the fallback; an idle
//! queue costs one claim statement per interval. DBOS clients do not announce: their enqueues wait
//! for a poll. The Postgres listener skips this process's own queue announcements (NOTIFYs from
//! its lane sessions' server processes, `lane_pids`): they are not news here.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::base::backoff::Backoff;
use crate::engine::shared::SharedRef;
use crate::engine::start;
use crate::sysdb::{
    CancelNote, Store, CANCEL_CHANNEL, CHILD_CHANNEL, PAUSE_CHANNEL, QUEUE_CHANNEL,
};

pub(crate) struct ListenerActor;

pub(crate) struct ListenerArgs {
    pub shared: SharedRef,
    pub sys: Arc<dyn Store>,
}

const RECONNECT: Backoff = Backoff::exponential(Duration::from_millis(50), Duration::from_secs(5));

impl Actor for ListenerActor {
    type Msg = ();
    type State = ListenerArgs;
    type Arguments = ListenerArgs;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        args: ListenerArgs,
    ) -> Result<ListenerArgs, ActorProcessingErr> {
        Ok(args)
    }

    /// Listens for the actor's whole life; a kill (shutdown) ends it.
    async fn post_start(
        &self,
        _: ActorRef<()>,
        state: &mut ListenerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let mut failures = 0;
        loop {
            let mut listener = match state.sys.listen(CHANNELS).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for wake-ups; queues keep polling");
                    tokio::time::sleep(RECONNECT.delay(failures)).await;
                    failures += 1;
                    continue;
                }
            };
            failures = 0;
            state.shared.signals.set_heard(true);
            wake_all(&state.shared);
            loop {
                match listener.next().await {
                    Ok(Some(n)) => route(&state.shared, &n.channel, &n.payload),
                    // The connection dropped and was re-established: announcements may be lost.
                    Ok(None) => wake_all(&state.shared),
                    Err(e) => {
                        state.shared.signals.set_heard(false);
                        tracing::warn!(error = %e, "lost the LISTEN connection");
                        tokio::time::sleep(RECONNECT.delay(0)).await;
                        break;
                    }
                }
            }
        }
    }
}

/// The channels listened to: enqueues, cancels, pauses and children's ends (stead's), messages,
/// events and streams (DBOS's, announced by its trigger and by writers).
const CHANNELS: &[&str] = &[
    QUEUE_CHANNEL,
    CANCEL_CHANNEL,
    PAUSE_CHANNEL,
    "dbos_notifications_channel",
    "dbos_workflow_events_channel",
    "dbos_streams_channel",
    CHILD_CHANNEL,
];

fn route(shared: &SharedRef, channel: &str, payload: &str) {
    match channel {
        QUEUE_CHANNEL => start::wake(shared, payload),
        // Every run of the id after a cancel; only the owner's run after a takeover.
        CANCEL_CHANNEL => match CancelNote::parse(payload) {
            Some(note) => shared.cancel_local(&note.id, note.owner.as_deref()),
            None => tracing::debug!(payload, "ignored a cancel announcement not of ours"),
        },
        PAUSE_CHANNEL => shared.pause_local(payload, None),
        "dbos_notifications_channel" => shared.signals.notify(&format!("n:{payload}")),
        "dbos_workflow_events_channel" => shared.signals.notify(&format!("e:{payload}")),
        "dbos_streams_channel" => shared.signals.notify(&format!("s:{payload}")),
        CHILD_CHANNEL => shared.signals.child_ended(payload),
        _ => {}
    }
}

/// After a reconnect: every queue claims and every waiter re-reads.
fn wake_all(shared: &SharedRef) {
    let names: Vec<String> = shared
        .directory
        .queues
        .iter()
        .map(|e| e.key().clone())
        .collect();
    for name in names {
        start::wake(shared, &name);
    }
    shared.signals.notify_all();
}

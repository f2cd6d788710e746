//! The listener actor: one LISTEN connection that turns other processes' announcements into
//! wake-up messages (an enqueue on `stead_queue_channel` wakes that queue's actor).
//!
//! Wake-ups only make things faster: queue actors also poll, so a lost notification costs at
//! most a polling interval. After a reconnect, when notifications may have been missed, every
//! queue is woken. It never claims or writes anything itself.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::backoff::Backoff;
use crate::shared::SharedRef;
use crate::start;
use crate::sysdb::{self, SysDb, QUEUE_CHANNEL};

pub(crate) struct ListenerActor;

pub(crate) struct ListenerArgs {
    pub shared: SharedRef,
    pub sys: SysDb,
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
            let mut listener = match sysdb::listen(&state.sys, &[QUEUE_CHANNEL]).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for wake-ups; queues keep polling");
                    tokio::time::sleep(RECONNECT.delay(failures)).await;
                    failures += 1;
                    continue;
                }
            };
            failures = 0;
            wake_all(&state.shared);
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) if n.channel() == QUEUE_CHANNEL => {
                        start::wake(&state.shared, n.payload())
                    }
                    Ok(Some(_)) => {}
                    // The connection dropped and was re-established: announcements may be lost.
                    Ok(None) => wake_all(&state.shared),
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the LISTEN connection");
                        tokio::time::sleep(RECONNECT.delay(0)).await;
                        break;
                    }
                }
            }
        }
    }
}

fn wake_all(shared: &SharedRef) {
    let names: Vec<String> = shared.queues.iter().map(|e| e.key().clone()).collect();
    for name in names {
        start::wake(shared, &name);
    }
}

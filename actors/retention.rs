//! The retention actor: applies the runtime's retention policy once at launch, then every
//! interval, deleting finished workflows the policy no longer keeps. Started only when the
//! builder was given a policy.
//!
//! It never runs two collections at once, and never collects inside its handler: each runs as a
//! task, so a slow collection does not hold the actor.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinSet;

use crate::engine::retention::{self, Retention};
use crate::engine::shared::SharedRef;
use crate::error::Result;

pub(crate) enum RetentionMsg {
    /// Time to collect.
    Collect,
    /// A collection finished.
    Collected(Result<u64>),
}

pub(crate) struct RetentionArgs {
    pub shared: SharedRef,
    pub policy: Retention,
}

pub(crate) struct RetentionState {
    args: RetentionArgs,
    running: bool,
    /// The collection and the timer; dropped (aborted) with the actor.
    tasks: JoinSet<()>,
}

pub(crate) struct RetentionActor;

impl Actor for RetentionActor {
    type Msg = RetentionMsg;
    type State = RetentionState;
    type Arguments = RetentionArgs;

    async fn pre_start(
        &self,
        _: ActorRef<RetentionMsg>,
        args: RetentionArgs,
    ) -> std::result::Result<RetentionState, ActorProcessingErr> {
        Ok(RetentionState {
            args,
            running: false,
            tasks: JoinSet::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<RetentionMsg>,
        _: &mut RetentionState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let _ = myself.send_message(RetentionMsg::Collect);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<RetentionMsg>,
        msg: RetentionMsg,
        state: &mut RetentionState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // A collection that panicked would leave `running` set forever: restart clean.
        while let Some(done) = state.tasks.try_join_next() {
            if let Err(e) = done {
                if e.is_panic() {
                    return Err(format!("a retention task panicked: {e}").into());
                }
            }
        }
        match msg {
            RetentionMsg::Collect if !state.running => {
                state.running = true;
                let (shared, policy, me) =
                    (state.args.shared.clone(), state.args.policy, myself.clone());
                state.tasks.spawn(async move {
                    let result = retention::collect(&shared, &policy).await;
                    let _ = me.send_message(RetentionMsg::Collected(result));
                });
            }
            RetentionMsg::Collect => {}
            RetentionMsg::Collected(result) => {
                state.running = false;
                match result {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(deleted = n, "garbage-collected finished workflows"),
                    Err(e) => tracing::warn!(error = %e, "garbage collection failed"),
                }
                state.after(&myself, state.args.policy.every);
            }
        }
        Ok(())
    }
}

impl RetentionState {
    fn after(&mut self, myself: &ActorRef<RetentionMsg>, delay: Duration) {
        let myself = myself.clone();
        self.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = myself.send_message(RetentionMsg::Collect);
        });
    }
}

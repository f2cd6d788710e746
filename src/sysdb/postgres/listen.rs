//! LISTEN on Postgres: a connection that hears what other processes announce with NOTIFY.

use std::sync::Arc;

use async_trait::async_trait;
use dashmap::DashSet;
use sqlx::postgres::PgListener;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::listen::{Listen, Listener, Notification};
use crate::sysdb::start::QUEUE_CHANNEL;

struct PgListening {
    listener: PgListener,
    lane_pids: Arc<DashSet<u32>>,
}

#[async_trait]
impl Listener for PgListening {
    /// `PgListener` reconnects by itself after a loss and says so with `None`. A queue
    /// announcement by one of this process's lanes is skipped: its writer told the actor.
    async fn next(&mut self) -> Result<Option<Notification>, DbError> {
        loop {
            let Some(n) = self.listener.try_recv().await? else {
                return Ok(None);
            };
            if n.channel() == QUEUE_CHANNEL && self.lane_pids.contains(&n.process_id()) {
                continue;
            }
            return Ok(Some(Notification {
                channel: n.channel().to_owned(),
                payload: n.payload().to_owned(),
            }));
        }
    }
}

#[async_trait]
impl Listen for Postgres {
    async fn listen(&self, channels: &[&str]) -> Result<Box<dyn Listener>, DbError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Box::new(PgListening {
            listener,
            lane_pids: self.lane_pids.clone(),
        }))
    }
}

//! LISTEN on Postgres: a connection that hears what other processes announce with NOTIFY.

use async_trait::async_trait;
use sqlx::postgres::PgListener;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::listen::{Listen, Listener, Notification};

struct PgListening(PgListener);

#[async_trait]
impl Listener for PgListening {
    /// `PgListener` reconnects by itself after a loss and says so with `None`.
    async fn next(&mut self) -> Result<Option<Notification>, DbError> {
        Ok(self.0.try_recv().await?.map(|n| Notification {
            channel: n.channel().to_owned(),
            payload: n.payload().to_owned(),
        }))
    }
}

#[async_trait]
impl Listen for Postgres {
    async fn listen(&self, channels: &[&str]) -> Result<Box<dyn Listener>, DbError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Box::new(PgListening(listener)))
    }
}

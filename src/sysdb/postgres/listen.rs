//! LISTEN on Postgres: a connection that hears what other processes announce with NOTIFY.
//!
//! **On Citus, a connection per node.** A NOTIFY is heard only on the node that ran it, and a
//! statement on a bucket runs on the node holding that bucket (a delegated call, DBOS's trigger):
//! so a sharded store listens on every active node Citus lists, by the address Citus knows it
//! by, and merges what they hear. This process's own queue announcements are then heard too
//! (they come from Citus's connection, not a lane's): one more wake-up of a queue that knew.

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
        if self.shards.citus() {
            return self.listen_on_every_node(channels).await;
        }
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(Box::new(PgListening {
            listener,
            lane_pids: self.lane_pids.clone(),
        }))
    }
}

/// Announcements heard on several nodes, each node's forwarded by a task of its own.
struct Merged {
    heard: tokio::sync::mpsc::Receiver<Result<Option<Notification>, DbError>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Merged {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[async_trait]
impl Listener for Merged {
    async fn next(&mut self) -> Result<Option<Notification>, DbError> {
        match self.heard.recv().await {
            Some(heard) => heard,
            None => Err(DbError::Transient("every node's listener stopped".into())),
        }
    }
}

/// The active primary nodes of the cluster, as Citus addresses them.
const NODES: &str = "SELECT nodename, nodeport FROM pg_dist_node \
    WHERE isactive AND noderole = 'primary' ORDER BY nodeid";

impl Postgres {
    async fn listen_on_every_node(&self, channels: &[&str]) -> Result<Box<dyn Listener>, DbError> {
        let nodes: Vec<(String, i32)> = sqlx::query_as(NODES).fetch_all(&self.pool).await?;
        let (tx, heard) = tokio::sync::mpsc::channel(1024);
        let mut tasks = Vec::with_capacity(nodes.len());
        for (host, port) in nodes {
            let options = self
                .connect
                .clone()
                .host(&host)
                .port(u16::try_from(port).unwrap_or(5432));
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with(options);
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen_all(channels.iter().copied()).await?;
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let heard = listener.try_recv().await.map_err(DbError::from).map(|n| {
                        n.map(|n| Notification {
                            channel: n.channel().to_owned(),
                            payload: n.payload().to_owned(),
                        })
                    });
                    let failed = heard.is_err();
                    if tx.send(heard).await.is_err() || failed {
                        return;
                    }
                }
            }));
        }
        Ok(Box::new(Merged { heard, tasks }))
    }
}

//! Hearing other processes: the announcements (enqueues, cancels, messages, events, stream
//! writes) an executor wakes its actors for. Only a shared database announces anything; an
//! embedded one refuses to listen.

use async_trait::async_trait;

use crate::error::DbError;

/// One announcement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notification {
    pub channel: String,
    pub payload: String,
}

/// A listening connection.
#[async_trait]
pub(crate) trait Listener: Send {
    /// The next announcement. `Ok(None)`: the connection was lost and re-established, so
    /// announcements may have been missed. An error: the connection is gone.
    async fn next(&mut self) -> Result<Option<Notification>, DbError>;
}

#[async_trait]
pub(crate) trait Listen: Send + Sync {
    /// A connection listening on `channels`.
    async fn listen(&self, channels: &[&str]) -> Result<Box<dyn Listener>, DbError>;
}

//! LISTEN: the connection on which an executor hears enqueues (and, later, messages and events)
//! announced by other processes.

use sqlx::postgres::PgListener;

use super::SysDb;
use crate::error::DbError;

/// A listening connection on `channels`. It reconnects by itself after a loss; the caller is
/// told (its `try_recv` yields `None`) so it can assume it missed announcements.
pub(crate) async fn listen(db: &SysDb, channels: &[&str]) -> Result<PgListener, DbError> {
    let super::Backend::Postgres { pool, .. } = &db.backend else {
        return Err(DbError::Query("an embedded database has no LISTEN".into()));
    };
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all(channels.iter().copied()).await?;
    Ok(listener)
}

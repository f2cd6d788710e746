//! No LISTEN on SQLite: an embedded database serves one process, whose writers wake its
//! waiters themselves.

use async_trait::async_trait;

use super::Sqlite;
use crate::error::DbError;
use crate::sysdb::listen::{Listen, Listener};

#[async_trait]
impl Listen for Sqlite {
    async fn listen(&self, _channels: &[&str]) -> Result<Box<dyn Listener>, DbError> {
        Err(DbError::Query("an embedded database has no LISTEN".into()))
    }
}

//! TODO(sqlite): ops statements on SQLite.

#![allow(unused_variables)]

use super::Lite;
use crate::error::DbError;
use crate::sysdb::{Op, OpOutcome};

pub(crate) async fn send(
    lite: &Lite,
    message_id: &str,
    destination: &str,
    topic: &str,
    message: &str,
) -> Result<(), DbError> {
    Err(DbError::Query("not yet on SQLite: ops::send".into()))
}

pub(crate) async fn execute(
    tx: &mut sqlx::sqlite::SqliteConnection,
    batch: &[Op],
) -> Result<Vec<OpOutcome>, DbError> {
    Err(DbError::Query("not yet on SQLite: ops::execute".into()))
}

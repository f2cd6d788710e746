//! TODO(sqlite): cancel statements on SQLite.

#![allow(unused_variables)]

use super::Lite;
use crate::error::DbError;
use crate::sysdb::cancel::Cancelled;

pub(crate) async fn cancel(lite: &Lite, id: &str, cascade: bool) -> Result<Cancelled, DbError> {
    Err(DbError::Query("not yet on SQLite: cancel::cancel".into()))
}

//! TODO(sqlite): retention statements on SQLite.

#![allow(unused_variables)]

use super::Lite;
use crate::error::DbError;

pub(crate) async fn garbage_collect(
    lite: &Lite,
    older_than_ms: Option<i64>,
    keep_newest: Option<i64>,
) -> Result<u64, DbError> {
    Err(DbError::Query(
        "not yet on SQLite: retention::garbage_collect".into(),
    ))
}

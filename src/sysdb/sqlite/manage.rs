//! TODO(sqlite): manage statements on SQLite.

#![allow(unused_variables)]

use super::Lite;
use crate::error::DbError;
use crate::sysdb::manage::Resumed;
use crate::sysdb::{ListQuery, ListedRow, StepListing};

pub(crate) async fn list(lite: &Lite, q: &ListQuery) -> Result<Vec<ListedRow>, DbError> {
    Err(DbError::Query("not yet on SQLite: manage::list".into()))
}

pub(crate) async fn steps(lite: &Lite, id: &str) -> Result<Vec<StepListing>, DbError> {
    Err(DbError::Query("not yet on SQLite: manage::steps".into()))
}

pub(crate) async fn resume(lite: &Lite, id: &str, queue: &str) -> Result<Resumed, DbError> {
    Err(DbError::Query("not yet on SQLite: manage::resume".into()))
}

pub(crate) async fn fork(
    lite: &Lite,
    id: &str,
    new_id: &str,
    queue: &str,
    app_version: Option<&str>,
    from_step: i32,
) -> Result<(bool, bool), DbError> {
    Err(DbError::Query("not yet on SQLite: manage::fork".into()))
}

pub(crate) async fn delete(lite: &Lite, id: &str, cascade: bool) -> Result<Vec<String>, DbError> {
    Err(DbError::Query("not yet on SQLite: manage::delete".into()))
}

pub(crate) async fn set_delay(
    lite: &Lite,
    id: &str,
    until: i64,
) -> Result<Option<String>, DbError> {
    Err(DbError::Query(
        "not yet on SQLite: manage::set_delay".into(),
    ))
}

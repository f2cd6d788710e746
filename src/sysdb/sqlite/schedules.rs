//! TODO(sqlite): schedules statements on SQLite.

#![allow(unused_variables)]

use super::Lite;
use crate::error::DbError;
use crate::sysdb::{Firings, ScheduleRow};

pub(crate) async fn list(lite: &Lite, app: Option<&str>) -> Result<Vec<ScheduleRow>, DbError> {
    Err(DbError::Query("not yet on SQLite: schedules::list".into()))
}

pub(crate) async fn get(lite: &Lite, name: &str) -> Result<Option<ScheduleRow>, DbError> {
    Err(DbError::Query("not yet on SQLite: schedules::get".into()))
}

pub(crate) async fn put(
    lite: &Lite,
    s: &ScheduleRow,
    replace: bool,
) -> Result<Option<bool>, DbError> {
    Err(DbError::Query("not yet on SQLite: schedules::put".into()))
}

pub(crate) async fn set_status(lite: &Lite, name: &str, status: &str) -> Result<bool, DbError> {
    Err(DbError::Query(
        "not yet on SQLite: schedules::set_status".into(),
    ))
}

pub(crate) async fn delete(lite: &Lite, name: &str) -> Result<bool, DbError> {
    Err(DbError::Query(
        "not yet on SQLite: schedules::delete".into(),
    ))
}

pub(crate) async fn fire(lite: &Lite, f: &Firings) -> Result<u64, DbError> {
    Err(DbError::Query("not yet on SQLite: schedules::fire".into()))
}

//! TODO(sqlite): debounce statements on SQLite.

#![allow(unused_variables)]

use super::Lite;
use crate::error::DbError;
use crate::sysdb::{Bounce, Bounced};

pub(crate) async fn bounce(lite: &Lite, b: &Bounce) -> Result<Bounced, DbError> {
    Err(DbError::Query("not yet on SQLite: debounce::bounce".into()))
}

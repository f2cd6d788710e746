//! The DBOS 3.4 schema: what `stead::migrate` creates, how it treats databases that are
//! empty, migrated, behind, ahead or DBOS's own, and the SQL functions it installs.
//!
//! Each test gets its own database. The tests against DBOS's own migrations run the real DBOS
//! CLI (skipped without it, see `common::dbos_py`).

mod expected;
mod functions;
mod guard;
mod layout;
mod sqlite;
mod versions;

use serde_json::json;
use sqlx::{PgPool, Row};

use crate::common;
use crate::common::catalog::{
    assert_same, migration_rows, snapshot, snapshot_on, sqlite_snapshot, user_schemas,
    without_bodies,
};
use crate::common::dbos_py::{dbos_migrate, dbos_migrate_schema};
use crate::common::TestDb;

async fn fresh_snapshot() -> Vec<String> {
    let db = TestDb::new().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    snapshot(&db.pool().await, "dbos").await
}

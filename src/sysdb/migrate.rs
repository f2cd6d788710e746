//! The schema: bringing a system database to the DBOS Transact 3.4 layout, and reading the
//! version it is at (a client checks it before it trusts a database).
//!
//! A migration must never touch a schema already at or above DBOS's version (DBOS, or a newer
//! stead, owns it then), never record a version other than [`DBOS_SCHEMA_VERSION`], and never
//! half-migrate: it is one transaction.
//!
//! **DBOS interop and the compatibility guard.** Either side's migration is the other's "up to
//! date"; the Python client's portable enqueues, sends and `get_event`, and `dbos workflow
//! list/get/steps`, work on stead's rows (the DBOS interop and peer tests,
//! `tests/integration/dbos_interop.rs` and `dbos_peer.rs`, with the Python side in `tests/py/`).
//! The schema snapshot (`tests/common/catalog.rs`, the schema tests) covers every catalog fact
//! including function bodies and comments, but the stead-vs-DBOS comparison leaves bodies out:
//! stead's SQL functions are its own code (clearer errors, SQLSTATE 22023 for bad arguments where
//! DBOS raises P0001), so they are compared by what they write and announce instead.

use async_trait::async_trait;

use crate::error::DbError;

/// The `dbos_migrations.version` of DBOS Transact 3.4's schema.
pub(crate) const DBOS_SCHEMA_VERSION: i64 = 125;

/// What a migration run found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub schema: String,
    /// `dbos_migrations.version` before the run; None for an empty database.
    pub found_version: Option<i64>,
    /// The version after the run (125, or the higher one found).
    pub version: i64,
    /// Whether the script ran (false when the database was already at or above 125).
    pub applied: bool,
}

#[async_trait]
pub(crate) trait Schema: Send + Sync {
    /// Brings the schema to the DBOS 3.4 layout; safe to run concurrently with other migrators
    /// (stead's or DBOS's).
    async fn migrate(&self) -> Result<MigrationReport, DbError>;

    /// `dbos_migrations`' version; `None` when the table does not exist.
    async fn schema_version(&self) -> Result<Option<i64>, DbError>;
}

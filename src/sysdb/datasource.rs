//! The application database's side of transactional steps, in DBOS 3.4's datasource layout:
//! `datasource_outputs` (a step's output or error, written in the user's own transaction) and
//! its `dbos_datasource_migrations` version table. Types and the interface only, no SQL.
//!
//! [`AppSql`] is implemented for `sqlx::Postgres` (`postgres/datasource.rs`) and
//! `sqlx::Sqlite` (`sqlite/datasource.rs`). It is public only as a bound of
//! [`crate::durable::Datasource`]; this module is private, so users can neither name nor implement it.
//! It must never touch the system database.

use async_trait::async_trait;
use sqlx::{Pool, Transaction};

/// The isolation level a transactional step runs at (DBOS's default: `Serializable`).
///
/// SQLite has one level (its transactions are serializable); there every step begins with
/// `BEGIN IMMEDIATE`, as DBOS's SQLite datasource does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// `SERIALIZABLE`: conflicting steps fail with a serialization error and are retried.
    #[default]
    Serializable,
    /// `REPEATABLE READ`.
    RepeatableRead,
    /// `READ COMMITTED`.
    ReadCommitted,
}

/// The latest datasource schema version (the number of DBOS 3.4's datasource migrations).
pub const DATASOURCE_SCHEMA_VERSION: i64 = 1;

/// A step's recorded row in `datasource_outputs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub output: Option<String>,
    pub error: Option<String>,
    pub serialization: Option<String>,
}

/// What a transactional step records in its own transaction.
#[derive(Debug, Clone, Copy)]
pub struct RecordRow<'a> {
    pub workflow_id: &'a str,
    pub step_id: u32,
    pub output: Option<&'a str>,
    pub error: Option<&'a str>,
    pub serialization: &'a str,
}

/// The statements a datasource runs on one kind of application database. `schema` is a
/// checked identifier (ignored on SQLite, whose tables are unqualified).
#[async_trait]
pub trait AppSql: sqlx::Database + Sized {
    /// Brings the datasource tables to [`DATASOURCE_SCHEMA_VERSION`] in one transaction
    /// (serialized against concurrent migrators, DBOS's included); no DDL when already there
    /// or ahead.
    async fn migrate(pool: &Pool<Self>, schema: &str) -> Result<(), sqlx::Error>;

    /// The recorded version (0 when the table is missing).
    async fn schema_version(pool: &Pool<Self>, schema: &str) -> Result<i64, sqlx::Error>;

    /// The row of step `step_id` of `workflow_id`, if one committed.
    async fn recorded(
        pool: &Pool<Self>,
        schema: &str,
        workflow_id: &str,
        step_id: u32,
    ) -> Result<Option<Recorded>, sqlx::Error>;

    /// Begins a transaction at `isolation`.
    async fn begin(
        pool: &Pool<Self>,
        isolation: Isolation,
    ) -> Result<Transaction<'static, Self>, sqlx::Error>;

    /// Inserts the step's row in `tx`; false when a row for this step is already visible
    /// (a concurrent execution recorded it first).
    async fn record(
        tx: &mut Transaction<'static, Self>,
        schema: &str,
        row: RecordRow<'_>,
    ) -> Result<bool, sqlx::Error>;

    /// Deletes the workflow's rows from `from_step` on, in `tx`.
    async fn delete(
        tx: &mut Transaction<'static, Self>,
        schema: &str,
        workflow_id: &str,
        from_step: u32,
    ) -> Result<u64, sqlx::Error>;

    /// True for an error worth running the attempt again for: a serialization failure or
    /// deadlock (Postgres), a busy or locked database (SQLite), or a lost connection.
    fn is_retriable(error: &sqlx::Error) -> bool;
}

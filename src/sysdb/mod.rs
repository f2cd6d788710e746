//! The system database: the storage interface the rest of the crate uses ([`Store`] and
//! [`Session`], in `store.rs`), the backend-neutral types it speaks, and its two
//! implementations, `postgres/` and `sqlite/`, which hold every SQL statement stead runs.
//!
//! The neutral modules (one per concept: `start`, `steps`, `finish`, `ops`, `claim`,
//! `dispatch`, `continuations`, `fleet`, `reads`, `cancel`, `manage`, `batch`, `rewind`,
//! `versions`, `migrate`, `queues`, `schedules`, `debounce`, `retention`, `observe`, `listen`,
//! and `datasource` for the application database's side of transactional steps) declare types
//! and their part of the interface, and contain no SQL; `rows.rs` decodes and binds what both
//! backends share, `text.rs` holds a long payload in the driver's row, `classify.rs` sorts every
//! driver error once, `urls.rs` reads and prints URLs.
//! The backends import the neutral modules, never each other, and only [`connect`] (by the URL)
//! and `from_pool` (by the pool's type) choose between them.
//!
//! It must never decide *when* to run a statement: batching, retries and ordering belong to
//! the database actor and its callers.

mod batch;
mod cancel;
mod claim;
mod classify;
mod continuations;
mod datasource;
mod debounce;
mod dispatch;
mod finish;
mod fleet;
mod listen;
mod literal;
mod manage;
mod migrate;
mod observe;
mod ops;
mod pauses;
mod postgres;
mod queues;
mod reads;
mod retention;
mod rewind;
mod rows;
mod schedules;
mod sqlite;
mod start;
mod steps;
mod store;
#[cfg(test)]
mod suite;
mod text;
mod urls;
mod versions;

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;

pub(crate) use batch::{BatchAction, BatchPage};
pub(crate) use cancel::{CancelNote, HeldRun, CANCEL_CHANNEL};
pub(crate) use claim::{ClaimOutcome, ClaimRequest, Claimed, QueueKey};
pub(crate) use continuations::{ContinueOutcome, ContinueWrite, Continued};
pub use datasource::Isolation;
#[cfg(test)]
pub(crate) use datasource::DATASOURCE_SCHEMA_VERSION;
pub(crate) use datasource::{AppSql, RecordRow, Recorded};
pub(crate) use debounce::{Bounce, Bounced};
pub(crate) use dispatch::Executor;
pub(crate) use finish::{FinishOutcome, FinishWrite, CHILD_CHANNEL};
pub use fleet::ExecutorInfo;
pub(crate) use fleet::{Adoption, Lease, Member};
pub(crate) use manage::{
    AttributesUpdate, Delayed, Fork, ListQuery, ListedRow, Resumed, StatusCount, StepListing,
    StepQuery,
};
pub use migrate::MigrationReport;
pub(crate) use migrate::DBOS_SCHEMA_VERSION;
pub(crate) use observe::{CompletedBucket, QueueCounts, Waiting};
pub(crate) use ops::{Op, OpOutcome, OpStep, OutgoingMessage, PeekedMessage, UPDATE_CALL};
pub(crate) use pauses::{PauseOutcome, PAUSED_RUN, PAUSE_CHANNEL};
pub(crate) use queues::QueueDeletion;
pub(crate) use reads::{StatusRow, StepRow, StreamRow};
pub(crate) use rewind::{Rewind, Rewound, STREAM_CLOSED};
pub(crate) use schedules::{Fired, Firings, ScheduleRow};
pub(crate) use sqlite::default_url;
pub(crate) use start::{next_created_at, stamped_until, NewWorkflow, StartOutcome, QUEUE_CHANNEL};
pub(crate) use steps::{LoadSteps, Pieces, StepOutcome, StepPage, StepWrite, PIECE};
pub(crate) use store::{Session, Store};
#[cfg(any(test, feature = "testing"))]
pub(crate) use text::Text;
pub use versions::AppVersion;

/// The schema DBOS and stead use unless told otherwise.
pub(crate) const DEFAULT_SCHEMA: &str = "dbos";

/// Connects to `url` (`postgres://…` or `sqlite:…`) with `pool_size` connections and checks
/// the database answers: the one place that picks an implementation. A missing SQLite file is
/// created only when `create` is set (a runtime, a migration); otherwise it is an error, so a
/// client (every read-only CLI command) leaves no empty file behind a mistyped path.
///
/// Errors name the URL with its password redacted; a URL of another scheme, or one that does
/// not parse, is refused without being shown.
pub(crate) async fn connect(
    url: &str,
    schema: &str,
    pool_size: u32,
    connect_timeout: Duration,
    create: bool,
) -> Result<Arc<dyn Store>, Error> {
    validate_schema(schema)?;
    if urls::scheme(url)? == urls::Scheme::Sqlite {
        if schema != DEFAULT_SCHEMA {
            return Err(sqlite_schema_refused(
                schema,
                &format!("the SQLite database {url}"),
            ));
        }
        Ok(Arc::new(
            sqlite::Sqlite::connect(url, connect_timeout, create).await?,
        ))
    } else {
        let db = postgres::Postgres::connect(url, schema, pool_size, connect_timeout).await?;
        db.read_layout().await?;
        Ok(Arc::new(db))
    }
}

/// A connection pool the application already has, handed to stead instead of a URL
/// ([`RuntimeBuilder::pool`](crate::RuntimeBuilder::pool), [`Client::from_pool`](crate::Client::from_pool)).
///
/// What stead takes from it and what it opens itself:
///
/// - **Postgres**: every unbatched call (reads, management, queue and schedule definitions,
///   recovery, migration) borrows a connection from the pool for the call's length; the
///   listener (`LISTEN` for queue wake-ups, cancels and waits) holds one of the pool's
///   connections for the runtime's life. The database actor's lanes (start, checkpoint,
///   finish, load_steps, ops, claim: six for a runtime, as many for a client) are dedicated
///   connections stead opens itself with the pool's connect options, outside the pool's limit,
///   with their own session settings (`plan_cache_mode`, `enable_seqscan`); so is a runtime's
///   liveness connection (one, holding its executor's advisory lock). The pool needs at
///   least 2 connections (one is held for LISTEN); give it a few more than your own load.
/// - **SQLite**: reads borrow from the pool; stead opens its one writer connection to the same
///   file itself (WAL, `synchronous=FULL`), which every write and every lane shares. The pool
///   must be over a file, not `:memory:`.
///
/// Shutting stead down never closes the pool: it stays the application's.
#[derive(Debug, Clone)]
pub enum DatabasePool {
    /// A Postgres pool (`sqlx::PgPool`).
    Postgres(sqlx::PgPool),
    /// A pool over a SQLite file (`sqlx::SqlitePool`).
    Sqlite(sqlx::SqlitePool),
}

impl From<sqlx::PgPool> for DatabasePool {
    fn from(pool: sqlx::PgPool) -> Self {
        DatabasePool::Postgres(pool)
    }
}

impl From<sqlx::SqlitePool> for DatabasePool {
    fn from(pool: sqlx::SqlitePool) -> Self {
        DatabasePool::Sqlite(pool)
    }
}

/// Uses the application's pool: the other place that picks an implementation, by the pool's
/// type. See [`DatabasePool`] for which connections come from it.
///
/// The pool serves the `Store` calls only; the lanes stay stead's own connections (the pool's
/// connect options plus the lane settings), since a lane's session settings and its hold of a
/// connection for the process's life would otherwise leak into the application's pool. On
/// Postgres `LISTEN` holds one pooled connection, so a pool of one is refused (`Error::Config`);
/// on SQLite the pool is the reader and stead opens the one writer. Stead never closes a pool it
/// was given.
pub(crate) async fn from_pool(
    pool: DatabasePool,
    schema: &str,
    connect_timeout: Duration,
) -> Result<Arc<dyn Store>, Error> {
    validate_schema(schema)?;
    match pool {
        DatabasePool::Postgres(pool) => {
            let db = postgres::Postgres::from_pool(pool, schema)?;
            db.read_layout().await?;
            Ok(Arc::new(db))
        }
        DatabasePool::Sqlite(pool) => {
            if schema != DEFAULT_SCHEMA {
                return Err(sqlite_schema_refused(schema, "the SQLite pool"));
            }
            Ok(Arc::new(
                sqlite::Sqlite::from_pool(pool, connect_timeout).await?,
            ))
        }
    }
}

/// The cause of a failed connection, kept as the error's `source()`.
pub(crate) type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// A driver error's message for a connection failure: a database's own message without the
/// server's source line (Postgres appends "at line N" to its `Display`), else the error's.
pub(crate) fn connect_reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => {
            format!("{}{}", db.message(), classify::startup_hint(db.message()))
        }
        other => other.to_string(),
    }
}

/// A file holds one system database, its tables unqualified: a schema name would be silently
/// ignored, so it is refused instead.
fn sqlite_schema_refused(schema: &str, what: &str) -> Error {
    Error::Config(format!(
        "schema {schema:?} given for {what}: schemas are a Postgres feature (a SQLite file \
         holds one system database)"
    ))
}

/// Checks a schema name is a plain identifier, so it can be spliced into statements safely.
pub(crate) fn validate_schema(schema: &str) -> Result<(), Error> {
    let mut chars = schema.chars();
    let ok_start = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok_start && ok_rest && schema.len() <= 63 {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "schema name {schema:?} must be an identifier of at most 63 ASCII letters, digits \
             and underscores, not starting with a digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_must_be_identifiers() {
        assert!(validate_schema("dbos").is_ok());
        assert!(validate_schema("_tenant_42").is_ok());
        assert!(validate_schema("").is_err());
        assert!(validate_schema("1abc").is_err());
        assert!(validate_schema("a\"; DROP TABLE x; --").is_err());
        assert!(validate_schema(&"a".repeat(64)).is_err());
    }
}

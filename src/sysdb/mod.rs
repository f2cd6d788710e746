//! The system database: the storage interface the rest of the crate uses ([`Store`] and
//! [`Session`], in `store.rs`), the backend-neutral types it speaks, and its two
//! implementations, `postgres/` and `sqlite/`, which hold every SQL statement stead runs.
//!
//! The neutral modules (one per concept: `start`, `steps`, `finish`, `ops`, `claim`, `dispatch`, `fleet`,
//! `reads`, `cancel`, `manage`, `versions`, `migrate`, `queues`, `schedules`, `debounce`,
//! `retention`, `observe`, `listen`) declare types and their part of the interface, and contain
//! no SQL; `rows.rs` decodes and binds what both backends share. The backends import the
//! neutral modules, never each other, and only [`connect`] chooses between them.
//!
//! It must never decide *when* to run a statement: batching, retries and ordering belong to
//! the database actor and its callers.

mod cancel;
mod claim;
mod classify;
mod debounce;
mod dispatch;
mod finish;
mod fleet;
mod listen;
mod manage;
mod migrate;
mod observe;
mod ops;
mod postgres;
mod queues;
mod reads;
mod retention;
mod rows;
mod schedules;
mod sqlite;
mod start;
mod steps;
mod store;
#[cfg(test)]
mod suite;
mod urls;
mod versions;

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;

pub(crate) use cancel::{CancelNote, HeldRun, CANCEL_CHANNEL};
pub(crate) use claim::{ClaimOutcome, ClaimRequest, Claimed};
pub(crate) use debounce::{Bounce, Bounced};
pub(crate) use dispatch::Executor;
pub(crate) use finish::{FinishOutcome, FinishWrite};
pub use fleet::ExecutorInfo;
pub(crate) use fleet::{Adoption, Lease, Member};
pub(crate) use manage::{Delayed, Fork, ListQuery, ListedRow, Resumed, StepListing};
pub use migrate::MigrationReport;
pub(crate) use migrate::DBOS_SCHEMA_VERSION;
pub(crate) use observe::{CompletedBucket, QueueCounts};
pub(crate) use ops::{Op, OpOutcome, OpStep, OutgoingMessage};
pub(crate) use queues::QueueDeletion;
pub(crate) use reads::{StatusRow, StepRow, StreamRow};
pub(crate) use schedules::{Firings, ScheduleRow};
pub(crate) use sqlite::default_url;
pub(crate) use start::{next_created_at, NewWorkflow, StartOutcome, QUEUE_CHANNEL};
pub(crate) use steps::{LoadSteps, StepOutcome, StepWrite};
pub(crate) use store::{Session, Store};
pub use versions::AppVersion;

/// The schema DBOS and stead use unless told otherwise.
pub(crate) const DEFAULT_SCHEMA: &str = "dbos";

/// Connects to `url` (`postgres://…` or `sqlite:…`) with `pool_size` connections and checks
/// the database answers: the one place that picks an implementation.
///
/// Errors name the URL with its password redacted; a URL of another scheme, or one that does
/// not parse, is refused without being shown.
pub(crate) async fn connect(
    url: &str,
    schema: &str,
    pool_size: u32,
    connect_timeout: Duration,
) -> Result<Arc<dyn Store>, Error> {
    validate_schema(schema)?;
    if urls::scheme(url)? == urls::Scheme::Sqlite {
        // A file holds one system database, its tables unqualified: a schema name would be
        // silently ignored, so it is refused instead.
        if schema != DEFAULT_SCHEMA {
            return Err(Error::Config(format!(
                "schema {schema:?} given for the SQLite database {url}: schemas are a \
                 Postgres feature (a SQLite file holds one system database)"
            )));
        }
        Ok(Arc::new(
            sqlite::Sqlite::connect(url, connect_timeout).await?,
        ))
    } else {
        let db = postgres::Postgres::connect(url, schema, pool_size, connect_timeout).await?;
        Ok(Arc::new(db))
    }
}

/// The cause of a failed connection, kept as the error's `source()`.
pub(crate) type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// A driver error's message for a connection failure: a database's own message without the
/// server's source line (Postgres appends "at line N" to its `Display`), else the error's.
pub(crate) fn connect_reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
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

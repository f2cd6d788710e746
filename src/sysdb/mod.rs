//! The system database: every SQL statement stead runs, and the pool and connections they run on.
//!
//! Owns the DBOS-compatible schema (see `migrate`) and the statements over it: batched writes
//! (`writes`), reads (`reads`) and dispatch (`dispatch`: recovery and claims). Nothing outside this
//! module builds a query. It must never decide *when* to run a statement: batching, retries and
//! ordering belong to the database actor and its callers.

mod batch;
mod cancel;
mod claim;
mod debounce;
mod dispatch;
mod finish;
mod listen;
mod manage;
mod migrate;
mod observe;
mod ops;
mod queues;
mod reads;
mod retention;
mod rows;
mod schedules;
mod sqlite;
mod start;
mod steps;
mod versions;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, SqlStr};

use crate::error::{DbError, Error};

pub(crate) use batch::{run as run_batch, BatchWrite};
pub(crate) use cancel::{cancel, CANCEL_CHANNEL};
pub(crate) use claim::{ClaimOutcome, ClaimRequest, Claimed};
pub(crate) use debounce::{bounce, Bounce, Bounced};
pub(crate) use dispatch::{bump_attempts, recover, redispatch, Executor};
pub(crate) use finish::{FinishOutcome, FinishWrite};
pub(crate) use listen::listen;
pub(crate) use manage::{ListQuery, ListedRow, StepListing};
pub use migrate::MigrationReport;
pub(crate) use migrate::{migrate, DBOS_SCHEMA_VERSION};
pub(crate) use observe::{completed, ping, queue_counts, CompletedBucket};
pub(crate) use ops::{send, Op, OpOutcome, OpStep};
pub(crate) use queues::{delete as delete_queue, list as list_queues, put as put_queue};
pub(crate) use reads::{get_event, read_stream, status, StatusRow, StepRow, StreamRow};
pub(crate) use retention::garbage_collect;
pub(crate) use schedules::{
    delete as delete_schedule, fire as fire_schedule, get as get_schedule, list as list_schedules,
    put as put_schedule, set_status as set_schedule_status, Firings, ScheduleRow,
};
pub(crate) use sqlite::default_url;
pub(crate) use start::{next_created_at, NewWorkflow, StartOutcome, QUEUE_CHANNEL};
pub(crate) use steps::{LoadSteps, StepOutcome, StepWrite};
pub use versions::AppVersion;

/// The schema DBOS and stead use unless told otherwise.
pub(crate) const DEFAULT_SCHEMA: &str = "dbos";

pub(crate) use crate::clock::now_ms;
pub(crate) use crate::codec::PORTABLE_JSON;
pub(crate) use crate::queue::INTERNAL_QUEUE;

/// A connected system database: the statements, and the backend they run on.
#[derive(Clone)]
pub(crate) struct SysDb {
    pub(crate) sql: Arc<Sql>,
    pub(crate) backend: Backend,
}

/// Where the system database lives.
#[derive(Clone)]
pub(crate) enum Backend {
    /// A Postgres server: a pool for occasional calls, and the options to open the dedicated
    /// connections the database actor keeps for its write lanes.
    Postgres {
        pool: PgPool,
        connect: Box<PgConnectOptions>,
    },
    /// A SQLite file in WAL mode: one connection writes (the database actor serialises all
    /// writes through it), a few more read.
    Sqlite(sqlite::Lite),
}

/// The connection a write lane keeps between flushes.
pub(crate) enum LaneConn {
    Postgres(PgConnection),
    /// SQLite lanes share the one writer connection, borrowed for each flush.
    Sqlite,
}

impl SysDb {
    /// Connects to `url` (`postgres://…` or `sqlite:…`) with `pool_size` connections and checks
    /// the database answers.
    ///
    /// Errors name the URL with its password redacted.
    pub(crate) async fn connect(
        url: &str,
        schema: &str,
        pool_size: u32,
        connect_timeout: Duration,
    ) -> Result<SysDb, Error> {
        let backend = if sqlite::is_sqlite_url(url) {
            // A file holds one system database, its tables unqualified: a schema name would be
            // silently ignored, so it is refused instead.
            if schema != DEFAULT_SCHEMA {
                return Err(Error::Config(format!(
                    "schema {schema:?} given for the SQLite database {url}: schemas are a \
                     Postgres feature (a SQLite file holds one system database)"
                )));
            }
            Backend::Sqlite(sqlite::Lite::connect(url, connect_timeout).await?)
        } else {
            connect_postgres(url, pool_size, connect_timeout).await?
        };
        Ok(SysDb {
            sql: Arc::new(Sql::new(schema)?),
            backend,
        })
    }

    /// Closes every connection; later calls fail.
    pub(crate) async fn close(&self) {
        match &self.backend {
            Backend::Postgres { pool, .. } => pool.close().await,
            Backend::Sqlite(lite) => lite.close().await,
        }
    }

    /// Marks the pools closed at once, without waiting for connections to close (for `Drop`).
    pub(crate) fn close_now(&self) {
        match &self.backend {
            // `close` marks the pool closed when called; its future only waits.
            Backend::Postgres { pool, .. } => drop(pool.close()),
            Backend::Sqlite(lite) => lite.close_now(),
        }
    }

    /// An executor's claim on an embedded database, which serves one process; a no-op on
    /// Postgres, which serves a fleet.
    pub(crate) fn lock_for_executor(&self) -> Result<(), Error> {
        match &self.backend {
            Backend::Postgres { .. } => Ok(()),
            Backend::Sqlite(lite) => lite.lock_for_executor(),
        }
    }

    /// True for an embedded (SQLite) database, which only this process uses.
    pub(crate) fn is_embedded(&self) -> bool {
        matches!(self.backend, Backend::Sqlite(_))
    }

    /// Opens a connection for a lane that keeps it across flushes.
    ///
    /// Postgres lanes run only batched key lookups, thousands of times with one shape: plan
    /// each once, and never as a sequential scan (a plan cached while the tables were small
    /// would scan them whole forever after).
    pub(crate) async fn dedicated(&self) -> Result<LaneConn, DbError> {
        match &self.backend {
            Backend::Postgres { connect, .. } => {
                let options = connect.clone().options([
                    ("plan_cache_mode", "force_generic_plan"),
                    ("enable_seqscan", "off"),
                ]);
                Ok(LaneConn::Postgres(options.connect().await?))
            }
            Backend::Sqlite(_) => Ok(LaneConn::Sqlite),
        }
    }
}

async fn connect_postgres(
    url: &str,
    pool_size: u32,
    connect_timeout: Duration,
) -> Result<Backend, Error> {
    let connect = connect_options(url)?;
    // No health ping on acquire: a dead connection fails its statement with a transient
    // error and the caller retries, which costs less than a round trip on every acquire.
    let pool = PgPoolOptions::new()
        .max_connections(pool_size.max(1))
        .min_connections(0)
        .acquire_timeout(connect_timeout)
        .test_before_acquire(false)
        .connect_with(connect.clone())
        .await;
    let pool = match pool {
        Ok(pool) => pool,
        Err(e) => {
            let reason = failure_reason(&connect, e, connect_timeout).await;
            return Err(Error::Connect {
                url: redact_url(url),
                reason,
            });
        }
    };
    Ok(Backend::Postgres {
        pool,
        connect: Box::new(connect),
    })
}

/// Parses `url` into stead's connection settings; the error names the URL, password redacted.
fn connect_options(url: &str) -> Result<PgConnectOptions, Error> {
    Ok(PgConnectOptions::from_str(url)
        .map_err(|e| Error::InvalidUrl {
            url: redact_url(url),
            reason: e.to_string(),
        })?
        .application_name("stead")
        .disable_statement_logging())
}

/// Why a pool could not connect. The pool retries until its timeout and then reports only
/// that it timed out; one more attempt recovers the cause (refused, unknown host, bad password).
async fn failure_reason(options: &PgConnectOptions, e: sqlx::Error, waited: Duration) -> String {
    if !matches!(e, sqlx::Error::PoolTimedOut) {
        return e.to_string();
    }
    let attempt = tokio::time::timeout(Duration::from_secs(2), options.connect()).await;
    match attempt {
        Ok(Err(cause)) => format!("{cause} (retried for {waited:?})"),
        _ => format!("no connection within {waited:?}"),
    }
}

/// Replaces the password in a database URL with `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_owned(),
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

/// Every statement, with the schema spliced in once at startup.
pub(crate) struct Sql {
    pub(crate) schema: String,
    pub(crate) start: SqlStr,
    pub(crate) record_steps: SqlStr,
    pub(crate) classify_steps: SqlStr,
    pub(crate) finish: SqlStr,
    pub(crate) classify_finish: SqlStr,
    pub(crate) load_steps: SqlStr,
    pub(crate) status: SqlStr,
    pub(crate) recover: SqlStr,
    pub(crate) claim: SqlStr,
    pub(crate) claim_partitioned: SqlStr,
    pub(crate) redispatch: SqlStr,
    pub(crate) bump_attempts: SqlStr,
    pub(crate) op_send: SqlStr,
    pub(crate) op_recv: SqlStr,
    pub(crate) op_set_event: SqlStr,
    pub(crate) op_write_stream: SqlStr,
    pub(crate) send: SqlStr,
    pub(crate) get_event: SqlStr,
    pub(crate) read_stream: SqlStr,
    pub(crate) cancel: SqlStr,
    pub(crate) list_asc: SqlStr,
    pub(crate) list_desc: SqlStr,
    pub(crate) steps: SqlStr,
    pub(crate) resume: SqlStr,
    pub(crate) fork: SqlStr,
    pub(crate) delete_workflow: SqlStr,
    pub(crate) set_delay: SqlStr,
    pub(crate) register_version: SqlStr,
    pub(crate) list_versions: SqlStr,
    pub(crate) promote_version: SqlStr,
    pub(crate) schema_version: SqlStr,
    pub(crate) list_queues: SqlStr,
    pub(crate) upsert_queue: SqlStr,
    pub(crate) delete_queue: SqlStr,
    pub(crate) list_schedules: SqlStr,
    pub(crate) get_schedule: SqlStr,
    pub(crate) put_schedule: SqlStr,
    pub(crate) set_schedule_status: SqlStr,
    pub(crate) delete_schedule: SqlStr,
    pub(crate) fire_schedule: SqlStr,
    pub(crate) debounce: SqlStr,
    pub(crate) collect: SqlStr,
    pub(crate) queue_counts: SqlStr,
    pub(crate) throughput: SqlStr,
}

impl Sql {
    fn new(schema: &str) -> Result<Sql, Error> {
        validate_schema(schema)?;
        let q = |template: &str| -> SqlStr {
            let text: Arc<str> = template.replace("{s}", &format!("\"{schema}\"")).into();
            // Safe: the only spliced value is a schema name validated as a plain identifier.
            sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text))
        };
        Ok(Sql {
            schema: schema.to_owned(),
            start: q(&start::statement()),
            record_steps: q(&steps::statement()),
            classify_steps: q(steps::CLASSIFY),
            finish: q(&finish::statement()),
            classify_finish: q(finish::CLASSIFY),
            load_steps: q(reads::LOAD_STEPS),
            status: q(&reads::status_sql()),
            recover: q(dispatch::RECOVER),
            claim: q(&claim::claim_sql()),
            claim_partitioned: q(&claim::claim_partitioned_sql()),
            redispatch: q(dispatch::REDISPATCH),
            bump_attempts: q(dispatch::BUMP_ATTEMPTS),
            op_send: q(&ops::send_sql()),
            op_recv: q(&ops::recv_sql()),
            op_set_event: q(&ops::set_event_sql()),
            op_write_stream: q(&ops::write_stream_sql()),
            send: q(ops::SEND),
            get_event: q(reads::GET_EVENT),
            read_stream: q(reads::READ_STREAM),
            cancel: q(cancel::CANCEL),
            list_asc: q(&manage::list_sql(false)),
            list_desc: q(&manage::list_sql(true)),
            steps: q(manage::STEPS),
            resume: q(manage::RESUME),
            fork: q(manage::FORK),
            delete_workflow: q(manage::DELETE),
            set_delay: q(manage::SET_DELAY),
            register_version: q(versions::REGISTER),
            list_versions: q(versions::LIST),
            promote_version: q(versions::PROMOTE),
            schema_version: q(versions::SCHEMA_VERSION),
            list_queues: q(&queues::list_sql()),
            upsert_queue: q(&queues::upsert_sql()),
            delete_queue: q(queues::DELETE),
            list_schedules: q(&schedules::list_sql()),
            get_schedule: q(&schedules::get_sql()),
            put_schedule: q(&schedules::put_sql()),
            set_schedule_status: q(schedules::SET_STATUS),
            delete_schedule: q(schedules::DELETE),
            fire_schedule: q(schedules::FIRE),
            debounce: q(debounce::BOUNCE),
            collect: q(retention::COLLECT),
            queue_counts: q(observe::QUEUE_COUNTS),
            throughput: q(observe::THROUGHPUT),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db.example:5432/app?sslmode=require"),
            "postgres://bob:***@db.example:5432/app?sslmode=require"
        );
        assert_eq!(redact_url("postgres://bob@db/app"), "postgres://bob@db/app");
        assert_eq!(redact_url("postgres://db/app"), "postgres://db/app");
        assert_eq!(redact_url("not a url"), "not a url");
        // An '@' in the path is not userinfo.
        assert_eq!(redact_url("postgres://db/a@b"), "postgres://db/a@b");
    }

    #[test]
    fn schema_names_must_be_identifiers() {
        assert!(validate_schema("dbos").is_ok());
        assert!(validate_schema("_tenant_42").is_ok());
        assert!(validate_schema("").is_err());
        assert!(validate_schema("1abc").is_err());
        assert!(validate_schema("a\"; DROP TABLE x; --").is_err());
        assert!(validate_schema(&"a".repeat(64)).is_err());
    }

    #[test]
    fn statements_are_schema_qualified() {
        let sql = Sql::new("tenant_a").unwrap();
        assert!(sql
            .record_steps
            .as_str()
            .contains("\"tenant_a\".operation_outputs"));
        for statement in [&sql.start, &sql.finish, &sql.claim, &sql.claim_partitioned] {
            assert!(!statement.as_str().contains("{s}"));
        }
    }
}

/// Management statements, for the client.
pub(crate) mod admin {
    pub(crate) use super::manage::{delete, fork, list, resume, set_delay, steps};
    pub(crate) use super::versions::{list as list_versions, promote, register, schema_version};
}

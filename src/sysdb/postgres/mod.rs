//! The Postgres implementation of the store: a pool for the [`Store`] calls, dedicated
//! connections for the database actor's lanes ([`Session`]), and every Postgres statement, one
//! file per concept, each owning its statements (spliced with the schema by the private `Sql`).
//!
//! The hot path is one statement per flush (arrays expanded with `UNNEST`, data-modifying CTEs,
//! announcements with `pg_notify` in the same statement); it must stay so.

mod batch;
mod cancel;
mod claim;
mod claim_sharded;
mod continuations;
mod datasource;
mod debounce;
mod dispatch;
mod exec;
mod finish;
mod fleet;
mod fleet_sharded;
mod lex;
mod listen;
mod manage;
mod migrate;
mod observe;
mod ops;
mod pauses;
#[cfg(test)]
mod plans;
mod queues;
mod reads;
mod retention;
mod rewind;
mod route;
mod routines;
#[cfg(test)]
mod routing;
mod rowsource;
mod schedules;
mod session;
mod shards;
mod sql;
mod start;
mod steps;
mod versions;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashSet;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;

use super::urls;
use crate::error::Error;
use routines::Routines;
use shards::{Sharding, Shards};
use sql::Sql;

/// A Postgres system database.
pub(crate) struct Postgres {
    pool: PgPool,
    /// Opens the lanes' dedicated connections.
    connect: PgConnectOptions,
    sql: Arc<Sql>,
    /// The lanes' statements: the same, but carried by routines with the lanes' settings
    /// behind a transaction pooler.
    lane_sql: Arc<Sql>,
    /// What sits between stead and the server, as the URL's `pooler` parameter said.
    pooler: Pooler,
    /// False for a pool the application handed over: stead's shutdown leaves it open.
    owns_pool: bool,
    /// The server processes of the lanes' open sessions: their queue announcements are this
    /// process's own, already told to its actors, so the listener skips their echo.
    lane_pids: Arc<DashSet<u32>>,
    /// `stead_continuations` exists (learnt by a migration or a schema check): reads show the
    /// chain links; a DBOS-only schema read by a client (which never migrates) shows none.
    links: std::sync::atomic::AtomicBool,
    /// The buckets (one unless the layout is sharded) and where workflows live.
    shards: Arc<Shards>,
    /// What the URL asked of the layout (`sharding=citus`).
    sharding: Sharding,
}

impl Postgres {
    /// Whether reads show the chain links (`links`).
    fn links(&self) -> bool {
        self.links.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_links(&self, exist: bool) {
        self.links
            .store(exist, std::sync::atomic::Ordering::Relaxed);
    }

    /// Connects a pool of `pool_size` to `url`, for `schema` (a validated identifier).
    pub(crate) async fn connect(
        url: &str,
        schema: &str,
        pool_size: u32,
        connect_timeout: Duration,
    ) -> Result<Postgres, Error> {
        let (url, pooler, sharding) = url_settings(url)?;
        let url = url.as_str();
        let connect = pooler.adapt(connect_options(url)?);
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
                let (reason, source) = failure_reason(&connect, e, connect_timeout).await;
                return Err(Error::Connect {
                    url: urls::printable(url),
                    reason,
                    source,
                });
            }
        };
        let (sql, lane_sql) = if pooler == Pooler::Transaction {
            let routines = |settings: &[(&str, &str)]| {
                Some(Arc::new(Routines::new(schema, settings, pool.clone())))
            };
            (
                Sql::new(schema, routines(&[])),
                Sql::new(schema, routines(&session::SETTINGS)),
            )
        } else {
            (Sql::new(schema, None), Sql::new(schema, None))
        };
        let sql = Arc::new(sql);
        Ok(Postgres {
            pool,
            connect,
            shards: Arc::new(Shards::single(sql.clone())),
            sql,
            lane_sql: Arc::new(lane_sql),
            pooler,
            owns_pool: true,
            lane_pids: Arc::default(),
            links: Default::default(),
            sharding,
        })
    }

    /// Uses the application's `pool` for unbatched calls and LISTEN; the lanes' connections are
    /// opened with the pool's connect options (same server, user and settings), outside it.
    /// A pool of one connection is refused: LISTEN would hold it and every call would wait.
    pub(crate) fn from_pool(pool: PgPool, schema: &str) -> Result<Postgres, Error> {
        let max = pool.options().get_max_connections();
        if max < 2 {
            return Err(Error::Config(format!(
                "the Postgres pool allows {max} connection(s); stead needs at least 2 (one is \
                 held for LISTEN, the others serve calls)"
            )));
        }
        let connect = (*pool.connect_options()).clone();
        let sql = Arc::new(Sql::new(schema, None));
        Ok(Postgres {
            pool,
            connect,
            shards: Arc::new(Shards::single(sql.clone())),
            lane_sql: sql.clone(),
            sql,
            pooler: Pooler::None,
            owns_pool: false,
            lane_pids: Arc::default(),
            links: Default::default(),
            sharding: Sharding::Unset,
        })
    }
}

/// What sits between stead and the server, named by the URL's `pooler` parameter (stead's own;
/// it is taken out before the URL reaches the driver).
///
/// - `none` (the default): the server itself, or a pooler that keeps a server connection per
///   client connection. Prepared statements, `LISTEN`, lane session settings at startup.
/// - `session`: PgBouncer (or alike) in session mode: as `none`, but the lanes' session
///   settings are set after connecting (PgBouncer refuses unknown startup parameters), and
///   `extra_float_digits` is not sent at startup (PgBouncer refuses it unless told to ignore
///   it).
/// - `transaction`: a transaction pooler (PgBouncer in transaction mode, hosted providers'
///   poolers): statements go inline (simple protocol, no prepared statement), no session
///   setting is relied on, no `LISTEN` (wake-ups come from polling), and the liveness lock is
///   held in an open transaction, which keeps its server connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooler {
    None,
    Session,
    Transaction,
}

/// stead's own URL parameters (`pooler`, `sharding`, `shards`), taken out before the URL reaches
/// the driver: the URL without them, and what they said.
fn url_settings(url: &str) -> Result<(String, Pooler, Sharding), Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Pooler::None, Sharding::Unset));
    };
    let invalid = |reason: String| urls::invalid("postgres", reason);
    let (mut pooler, mut citus, mut shards) = (Pooler::None, false, None);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("pooler", value)) => pooler = Pooler::parse(value).map_err(invalid)?,
            Some(("sharding", "citus")) => citus = true,
            Some(("sharding", "none")) => citus = false,
            Some(("sharding", other)) => {
                return Err(invalid(format!(
                    "the parameter sharding={other:?} is neither `citus` nor `none`"
                )))
            }
            Some(("shards", value)) => shards = Some(shards::parse_shards(value).map_err(invalid)?),
            _ => kept.push(pair),
        }
    }
    let sharding = match (citus, shards) {
        (true, n) => Sharding::Citus {
            shards: n.unwrap_or(shards::DEFAULT_SHARDS),
        },
        (false, None) => Sharding::Unset,
        (false, Some(_)) => {
            return Err(invalid(
                "the parameter shards= needs sharding=citus beside it".into(),
            ))
        }
    };
    if sharding != Sharding::Unset && pooler == Pooler::Transaction {
        return Err(Error::Config(
            "sharding=citus cannot run behind a transaction pooler (pooler=transaction): its \
             stored routines and the fleet's locks need a session on the cluster; connect to \
             the Citus nodes directly or through a session pooler"
                .into(),
        ));
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, pooler, sharding))
}

impl Pooler {
    /// The pooler a `pooler=` value names.
    fn parse(value: &str) -> Result<Pooler, String> {
        match value {
            "none" => Ok(Pooler::None),
            "session" => Ok(Pooler::Session),
            "transaction" => Ok(Pooler::Transaction),
            other => Err(format!(
                "the parameter pooler={other:?} is none of `none`, `session` or `transaction`"
            )),
        }
    }

    /// Connection settings a pooler accepts.
    fn adapt(self, options: PgConnectOptions) -> PgConnectOptions {
        match self {
            Pooler::None => options,
            Pooler::Session | Pooler::Transaction => options.extra_float_digits(None),
        }
    }
}

/// Parses `url` into stead's connection settings; the error names the scheme and what was
/// wrong, never the URL (it did not parse, so its password could be anywhere).
fn connect_options(url: &str) -> Result<PgConnectOptions, Error> {
    Ok(PgConnectOptions::from_str(url)
        .map_err(|e| urls::invalid("postgres", super::connect_reason(&e)))?
        .application_name("stead")
        .disable_statement_logging())
}

/// Why a pool could not connect, and the cause. The pool retries until its timeout and then
/// reports only that it timed out; one more attempt recovers the cause (refused, unknown host,
/// bad password).
async fn failure_reason(
    options: &PgConnectOptions,
    e: sqlx::Error,
    waited: Duration,
) -> (String, Option<super::Cause>) {
    if !matches!(e, sqlx::Error::PoolTimedOut) {
        return (super::connect_reason(&e), Some(Arc::new(e)));
    }
    let attempt = tokio::time::timeout(Duration::from_secs(2), options.connect()).await;
    match attempt {
        Ok(Err(cause)) => (
            format!("{} (retried for {waited:?})", super::connect_reason(&cause)),
            Some(Arc::new(cause)),
        ),
        _ => (
            format!("no connection within {waited:?}"),
            Some(Arc::new(e)),
        ),
    }
}

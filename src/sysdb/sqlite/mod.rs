//! The embedded implementation of the store: the system database in one SQLite file, in DBOS
//! 3.4's SQLite layout.
//!
//! Owns the file's connections and every SQLite statement, one file per concept. One
//! connection writes and the database actor's lanes take turns on it ([`session`]: each flush
//! one `BEGIN IMMEDIATE` transaction); a small pool reads beside it (WAL). What Postgres does in
//! one statement with data-modifying CTEs is a few statements in one write transaction here.
//! No NOTIFY: the callers wake this process's waiters themselves. It must never be opened by two
//! executors at once: an executor holds an exclusive lock on `<file>.lock` for its lifetime.
//!
//! **Embedded backend.** With no URL configured, the system database is `sqlite://<app>.sqlite` in
//! the working directory. The file runs in WAL mode, `synchronous=FULL`, `busy_timeout` 30 s. Each
//! lane flush is one `BEGIN IMMEDIATE` transaction carrying the whole batch, one request after
//! another; reads use a separate read-only pool. No LISTEN: the listener actor is not started and
//! every wake-up is in-process (local enqueues, signals, cancels); where a statement's NOTIFY would
//! have woken this process (a delay brought forward), the caller wakes the actor itself. A second
//! executor on the file gets `Error::Config` naming it (clients may open it). Statements that are
//! one CTE on Postgres are a few statements in the flush's transaction here (no data-modifying
//! CTEs; `RETURNING` cannot name the table through an alias, so a claim reads the taken row after
//! its update). Messages are stamped by stead (`created_at` strictly increasing per process): the
//! column default has one-second resolution and receives go oldest first. A limit bound as a
//! parameter is written `LIMIT CAST(?n AS INTEGER)`: SQLite plans a bare `LIMIT ?n` with the
//! bound value, so every execution would prepare the statement again.
//!
//! The integration tests run on both backends through `both_backends!` (`tests/common`); only tests
//! about Postgres itself (cross-process NOTIFY, connection loss, SQL functions, fleets) are
//! Postgres-only. Both backends' tests share one test process, so a test's global state (gates,
//! counters, pools) is keyed by backend or workflow id.

mod batch;
mod cancel;
mod claim;
mod continuations;
mod datasource;
mod debounce;
mod dispatch;
mod finish;
mod fleet;
mod listen;
mod manage;
mod migrate;
mod observe;
mod ops;
mod pauses;
mod queues;
mod reads;
mod retention;
mod rewind;
mod schedules;
mod session;
mod start;
mod steps;
mod versions;

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Transaction;

use crate::error::{DbError, Error};

/// How long a statement waits for a lock held by another connection before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// True for SQLite's in-memory databases, which have no file to find.
fn is_in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// The URL of the default database file for application `app`, in the working directory.
pub(crate) fn default_url(app: Option<&str>) -> String {
    format!("sqlite://{}.sqlite", app.unwrap_or("stead"))
}

/// An open SQLite system database. Clones share the connections.
#[derive(Clone)]
pub(crate) struct Sqlite {
    writer: SqlitePool,
    reader: SqlitePool,
    /// False for a pool the application handed over: stead's shutdown leaves it open.
    owns_reader: bool,
    path: PathBuf,
    /// The executor's lock on `<file>.lock`, held until the database is closed.
    lock: Arc<Mutex<Option<File>>>,
    /// `stead_continuations` exists (learnt by a migration or a schema check): reads show the
    /// chain links; a file only DBOS migrated, read by a client, shows none.
    links: Arc<std::sync::atomic::AtomicBool>,
}

impl Sqlite {
    /// Opens the file named by `url`, creating it if missing when `create` is set (otherwise a
    /// missing file is a connect error naming it).
    pub(crate) async fn connect(
        url: &str,
        timeout: Duration,
        create: bool,
    ) -> Result<Sqlite, Error> {
        let base = SqliteConnectOptions::from_str(url)
            .map_err(|e| super::urls::invalid("sqlite", super::connect_reason(&e)))?
            .busy_timeout(BUSY_TIMEOUT);
        let file = base.get_filename();
        if !create && !file.exists() && !is_in_memory(url) {
            return Err(Error::Connect {
                url: super::urls::printable(url),
                reason: format!(
                    "{} does not exist (a runtime or `stead migrate` creates it)",
                    file.display()
                ),
                source: None,
            });
        }
        let writer = open_writer(base.clone().create_if_missing(create), url, timeout).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(BUSY_TIMEOUT.max(timeout))
            .connect_with(base.read_only(true))
            .await
            .map_err(|e| connect_error(url, e))?;
        Ok(Sqlite::new(writer, reader, true))
    }

    /// Reads through the application's `pool`; the one writer connection is opened with the
    /// pool's connect options (same file), under stead's settings (WAL, `synchronous=FULL`).
    pub(crate) async fn from_pool(pool: SqlitePool, timeout: Duration) -> Result<Sqlite, Error> {
        let options = (*pool.connect_options()).clone();
        let name = options.get_filename().display().to_string();
        let writer = open_writer(options.busy_timeout(BUSY_TIMEOUT), &name, timeout).await?;
        Ok(Sqlite::new(writer, pool, false))
    }

    fn new(writer: SqlitePool, reader: SqlitePool, owns_reader: bool) -> Sqlite {
        let path = writer.connect_options().get_filename().to_path_buf();
        Sqlite {
            writer,
            reader,
            owns_reader,
            path,
            lock: Arc::default(),
            links: Default::default(),
        }
    }

    /// Whether reads show the chain links (`links`).
    fn links(&self) -> bool {
        self.links.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_links(&self, exist: bool) {
        self.links
            .store(exist, std::sync::atomic::Ordering::Relaxed);
    }

    /// Begins a write transaction on the one writer connection.
    async fn write(&self) -> Result<Transaction<'static, sqlx::Sqlite>, DbError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// The pool for reads, which never wait for the writer.
    fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    /// Takes the executor's exclusive lock on the file, failing when another process holds it.
    fn lock_file(&self) -> Result<(), Error> {
        let lock_path = lock_path(&self.path);
        let in_use = |reason: String| {
            Error::Config(format!(
                "the SQLite system database {} is in use by another executor ({reason}); \
             an embedded database serves one process: use Postgres to run a fleet",
                self.path.display()
            ))
        };
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| in_use(format!("cannot open {}: {e}", lock_path.display())))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(in_use(format!("{} is locked", lock_path.display())))
            }
            Err(TryLockError::Error(e)) => return Err(in_use(e.to_string())),
        }
        if let Ok(mut held) = self.lock.lock() {
            *held = Some(file);
        }
        Ok(())
    }

    fn release(&self) {
        if let Ok(mut held) = self.lock.lock() {
            held.take();
        }
    }
}

/// The one writer connection, with the file's durability settings.
async fn open_writer(
    options: SqliteConnectOptions,
    url: &str,
    timeout: Duration,
) -> Result<SqlitePool, Error> {
    let options = options
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a committed checkpoint survives a power cut, not only a process crash.
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(BUSY_TIMEOUT.max(timeout))
        .connect_with(options)
        .await
        .map_err(|e| connect_error(url, e))
}

fn connect_error(url: &str, e: sqlx::Error) -> Error {
    Error::Connect {
        url: super::urls::printable(url),
        reason: super::connect_reason(&e),
        source: Some(Arc::new(e)),
    }
}

fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// A JSON array of `items`, for `json_each(?)`: SQLite's stand-in for Postgres arrays.
fn json_list<S: AsRef<str>>(items: &[S]) -> String {
    serde_json::Value::from(
        items
            .iter()
            .map(|s| serde_json::Value::from(s.as_ref()))
            .collect::<Vec<_>>(),
    )
    .to_string()
}

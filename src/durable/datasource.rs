//! Transactional steps: [`Context::transaction`] runs a closure in a transaction on the
//! application's own database (a [`Datasource`]) and records the step's output in that same
//! transaction, in DBOS 3.4's `datasource_outputs` table, so the user's writes and their
//! record commit together or not at all. The step is then checkpointed in the system database
//! as any step; a replay finds either checkpoint and never runs the closure again.
//!
//! The rules are DBOS's (`_datasource.py`): `SERIALIZABLE` by default; serialization failures,
//! deadlocks, a busy SQLite file and lost connections rerun the attempt after a backoff (1 ms,
//! ×1.5, at most 2 s); the record is inserted only if absent, so when two executions race the
//! first commit wins and the other replays it; the owner token is checked while holding the
//! row; a finished workflow's rows are deleted (its step checkpoints cover them).
//! It never builds SQL (`sysdb::AppSql` does) and never touches the system database directly.
//!
//! **The attempt, in order** (DBOS 3.4's `_datasource.py`): read `datasource_outputs` first (a row
//! there is the outcome: the process died between that commit and the system checkpoint); else
//! begin at the datasource's isolation (SQLite: `BEGIN IMMEDIATE`), run the closure, insert the
//! record `ON CONFLICT DO NOTHING`, check `owner_xid` in the system database (through the database
//! actor, `Reads::workflow_owner`) while holding the row, and commit. A retriable failure reruns
//! the attempt, stopping if the run is aborted; any other error is recorded in its own transaction
//! and fails the step. A record already there (a race) is replayed if this execution still owns the
//! workflow, else the run stops as `NotOwner`. The step is then checkpointed in `operation_outputs`
//! as any step (same name, same portable JSON), so the application table is the only extra write.
//! Rows are deleted when the body returns with an outcome of its own (not after an abort, whose
//! next execution needs them), in a transaction committed only while this execution still owns the
//! workflow; failures only warn.
//!
//! **The closure** is `FnMut(&mut Transaction<'static, DB>) -> BoxFuture<..>` (sqlx's own
//! `transaction` shape: the HRTB lets it borrow the transaction; `AsyncFnMut` cannot promise a
//! `Send` future), its error fixed to `BoxError` like `step`; a retriable error is recognised by
//! downcasting to `sqlx::Error`. The migration lock on Postgres is DBOS's key, computed in SQL (the
//! leading 8 bytes of SHA-256). The crash window is tested with `Fault::HoldAfterTransactionCommit`
//! (the step parks after its commit) in a child process killed with SIGKILL. Left to the caller: a
//! rewind does not know the datasources, so a workflow cancelled mid-run keeps its rows until
//! `Datasource::delete_records`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::{Pool, Transaction};

use crate::base::codec::{self, PORTABLE_JSON};
use crate::durable::context::{Abort, Context, Release};
use crate::durable::step::{self, BoxError};
use crate::error::{DbError, Error, Result, StepError};
use crate::sysdb::{validate_schema, AppSql, Isolation, RecordRow, Recorded, DEFAULT_SCHEMA};

/// A kind of application database a [`Datasource`] can use: `sqlx::Postgres` or
/// `sqlx::Sqlite`. Sealed.
pub trait AppDatabase: AppSql {}

impl<T: AppSql> AppDatabase for T {}

/// The application's own database, for [`Context::transaction`]: a sqlx pool plus the schema
/// of its `datasource_outputs` table (`dbos` unless told otherwise; SQLite tables are
/// unqualified). Cloning shares it.
///
/// ```no_run
/// # async fn demo(url: &str) -> stead::Result<()> {
/// let pool = sqlx::PgPool::connect(url).await.map_err(stead::error::DbError::from)?;
/// let orders = stead::durable::Datasource::new(pool).await?; // creates dbos.datasource_outputs
/// # Ok(()) }
/// ```
pub struct Datasource<DB: AppDatabase> {
    inner: Arc<Inner<DB>>,
    isolation: Isolation,
}

struct Inner<DB: AppDatabase> {
    pool: Pool<DB>,
    schema: String,
}

impl<DB: AppDatabase> Clone for Datasource<DB> {
    fn clone(&self) -> Self {
        Datasource {
            inner: self.inner.clone(),
            isolation: self.isolation,
        }
    }
}

impl<DB: AppDatabase> Datasource<DB> {
    /// A datasource on `pool` with its table in schema `dbos`, created or migrated now (as a
    /// DBOS datasource with `run_migrations` on).
    pub async fn new(pool: Pool<DB>) -> Result<Datasource<DB>> {
        Datasource::with_schema(pool, DEFAULT_SCHEMA).await
    }

    /// [`Datasource::new`] with the table in `schema` (Postgres; ignored on SQLite).
    pub async fn with_schema(pool: Pool<DB>, schema: &str) -> Result<Datasource<DB>> {
        validate_schema(schema)?;
        DB::migrate(&pool, schema)
            .await
            .map_err(|e| Error::Migration {
                schema: schema.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Datasource {
            inner: Arc::new(Inner {
                pool,
                schema: schema.to_owned(),
            }),
            isolation: Isolation::default(),
        })
    }

    /// The isolation level its transactions run at (default `Serializable`, as DBOS).
    pub fn isolation(mut self, level: Isolation) -> Datasource<DB> {
        self.isolation = level;
        self
    }

    /// The pool it runs on.
    pub fn pool(&self) -> &Pool<DB> {
        &self.inner.pool
    }

    /// Deletes the recorded transactions of `workflow_id` from call `from_step` on (what a
    /// rewind or a fork from that step must do first, as DBOS's `rewind_workflow` does).
    pub async fn delete_records(&self, workflow_id: &str, from_step: u32) -> Result<u64> {
        let run = async {
            let mut tx = self.inner.pool.begin().await?;
            let n = DB::delete(&mut tx, &self.inner.schema, workflow_id, from_step).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(n)
        };
        run.await.map_err(|e| Error::Database(DbError::from(e)))
    }

    async fn recorded(&self, workflow_id: &str, step_id: u32) -> sqlx::Result<Option<Recorded>> {
        DB::recorded(&self.inner.pool, &self.inner.schema, workflow_id, step_id).await
    }

    /// The row of a step, read again after retriable failures (DBOS's pre-check retry).
    async fn recorded_with_retry(
        &self,
        ctx: &Context,
        function_id: u32,
    ) -> Result<std::result::Result<Option<Recorded>, sqlx::Error>> {
        let mut wait = Wait::new();
        loop {
            match self.recorded(ctx.workflow_id(), function_id).await {
                Err(e) if DB::is_retriable(&e) => wait.next(ctx).await?,
                other => return Ok(other),
            }
        }
    }
}

impl Context {
    /// A transactional step: `f` runs inside a transaction on `ds` (at its isolation level),
    /// and the step's output is recorded in that transaction, so `f`'s writes happen exactly
    /// once: a replay returns the recorded output without calling `f`, even when the process
    /// died between this commit and the system database's checkpoint.
    ///
    /// `f` gets the open transaction (`&mut **tx` is an executor) and returns a boxed future;
    /// it is called again when the transaction fails with a serialization failure or deadlock
    /// (so it is `FnMut`: clone what it moves). Any other error rolls the transaction back and
    /// fails the step (recorded, not retried).
    ///
    /// ```no_run
    /// # async fn demo(ctx: stead::Context, ds: stead::durable::Datasource<sqlx::Postgres>) -> stead::Result<()> {
    /// let order_id: i64 = ctx
    ///     .transaction(&ds, "insert_order", |tx| {
    ///         Box::pin(async move {
    ///             let row: (i64,) = sqlx::query_as("INSERT INTO orders (item) VALUES ('book') RETURNING id")
    ///                 .fetch_one(&mut **tx)
    ///                 .await?;
    ///             Ok(row.0)
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn transaction<'c, DB, F, T>(
        &'c self,
        ds: &'c Datasource<DB>,
        name: &'c str,
        f: F,
    ) -> BoxFuture<'c, Result<T>>
    where
        DB: AppDatabase,
        F: for<'t> FnMut(
                &'t mut Transaction<'static, DB>,
            ) -> BoxFuture<'t, std::result::Result<T, BoxError>>
            + Send
            + 'c,
        T: Serialize + DeserializeOwned + Send + 'c,
    {
        // Numbered now, in program order, like every durable call.
        let function_id = self.next_function_id();
        // Even on a replay, so the finished workflow's rows are deleted whoever wrote them.
        self.use_datasource(Arc::new(ds.clone()));
        let body = run_body(self, ds, name, function_id, f);
        Box::pin(step::run(self, name, function_id, body))
    }
}

/// How one attempt ended.
enum Attempt<T> {
    Committed(T),
    /// A retriable failure: run the attempt again after a wait.
    Retry,
    /// A row for this step committed first (a concurrent or earlier execution).
    Conflict,
    Failed(String),
}

/// The step's body: the recorded row if one committed, else attempts until one commits.
async fn run_body<DB, F, T>(
    ctx: &Context,
    ds: &Datasource<DB>,
    name: &str,
    function_id: u32,
    mut f: F,
) -> Result<std::result::Result<T, StepError>>
where
    DB: AppDatabase,
    F: for<'t> FnMut(
            &'t mut Transaction<'static, DB>,
        ) -> BoxFuture<'t, std::result::Result<T, BoxError>>
        + Send,
    T: Serialize + DeserializeOwned + Send,
{
    match ds.recorded_with_retry(ctx, function_id).await? {
        Ok(Some(row)) => return replay(&row, name, function_id),
        Ok(None) => {}
        Err(e) => return Ok(Err(step::failed(name, function_id, vec![e.to_string()]))),
    }
    // An earlier step's record lands before this transaction commits anything.
    let _busy = ctx.fresh().await?;
    #[cfg(feature = "testing")]
    ctx.crash_point(name)?;
    let mut wait = Wait::new();
    loop {
        ctx.live().await?;
        match attempt(ctx, ds, function_id, &mut f).await? {
            Attempt::Committed(value) => {
                #[cfg(feature = "test-hooks")]
                if ctx.shared().faults.holds_after_commit() {
                    std::future::pending::<()>().await;
                }
                return Ok(Ok(value));
            }
            Attempt::Retry => wait.next(ctx).await?,
            Attempt::Conflict => return conflicting(ctx, ds, name, function_id).await,
            Attempt::Failed(message) => {
                let error = step::failed(name, function_id, vec![message]);
                return match record_error(ctx, ds, function_id, &error).await? {
                    true => Ok(Err(error)),
                    false => conflicting(ctx, ds, name, function_id).await,
                };
            }
        }
    }
}

/// One transaction: `f`, then the record, then the owner check while the row is held, then
/// the commit. Dropping the transaction on any early return rolls it back.
async fn attempt<DB, F, T>(
    ctx: &Context,
    ds: &Datasource<DB>,
    function_id: u32,
    f: &mut F,
) -> Result<Attempt<T>>
where
    DB: AppDatabase,
    F: for<'t> FnMut(
            &'t mut Transaction<'static, DB>,
        ) -> BoxFuture<'t, std::result::Result<T, BoxError>>
        + Send,
    T: Serialize,
{
    let mut tx = match DB::begin(&ds.inner.pool, ds.isolation).await {
        Ok(tx) => tx,
        Err(e) => return Ok(classify::<DB, T>(&e)),
    };
    let value = match f(&mut tx).await {
        Ok(value) => value,
        Err(e) => {
            return Ok(match e.downcast_ref::<sqlx::Error>() {
                Some(db) if DB::is_retriable(db) => Attempt::Retry,
                _ => Attempt::Failed(e.to_string()),
            })
        }
    };
    let output = codec::encode(&value, "a transactional step's output")?;
    let row = RecordRow {
        workflow_id: ctx.workflow_id(),
        step_id: function_id,
        output: Some(&output),
        error: None,
        serialization: PORTABLE_JSON,
    };
    match DB::record(&mut tx, &ds.inner.schema, row).await {
        Ok(true) => {}
        Ok(false) => return Ok(Attempt::Conflict),
        Err(e) => return Ok(classify::<DB, T>(&e)),
    }
    // Holding this step's row, so a later owner's insert waits on our commit.
    if !still_owns(ctx).await? {
        return Err(ctx.stop(Abort::NotOwner));
    }
    Ok(match tx.commit().await {
        Ok(()) => Attempt::Committed(value),
        Err(e) => classify::<DB, T>(&e),
    })
}

fn classify<DB: AppDatabase, T>(e: &sqlx::Error) -> Attempt<T> {
    if DB::is_retriable(e) {
        Attempt::Retry
    } else {
        Attempt::Failed(e.to_string())
    }
}

/// Records the step's failure in a transaction of its own (DBOS does too), so a replay after
/// a crash fails the same way. False when a row for the step committed first.
async fn record_error<DB: AppDatabase>(
    ctx: &Context,
    ds: &Datasource<DB>,
    function_id: u32,
    error: &StepError,
) -> Result<bool> {
    let encoded = codec::encode_error(&error.to_portable());
    let row = RecordRow {
        workflow_id: ctx.workflow_id(),
        step_id: function_id,
        output: None,
        error: Some(&encoded),
        serialization: PORTABLE_JSON,
    };
    let write = async {
        let mut tx = ds.inner.pool.begin().await?;
        let inserted = DB::record(&mut tx, &ds.inner.schema, row).await?;
        Ok::<_, sqlx::Error>((tx, inserted))
    };
    match write.await {
        Ok((_, false)) => Ok(false),
        Ok((tx, true)) => {
            if !still_owns(ctx).await? {
                return Err(ctx.stop(Abort::NotOwner));
            }
            // Best effort: without this row a replay still finds the step's checkpoint.
            if let Err(e) = tx.commit().await {
                tracing::warn!(error = %e, "recording a transactional step's failure");
            }
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(error = %e, "recording a transactional step's failure");
            Ok(true)
        }
    }
}

/// Another execution's row won: stop if that execution owns the workflow now; else the row
/// is this step's outcome (an earlier, ambiguous commit of ours or a stale execution's).
async fn conflicting<DB: AppDatabase, T: DeserializeOwned>(
    ctx: &Context,
    ds: &Datasource<DB>,
    name: &str,
    function_id: u32,
) -> Result<std::result::Result<T, StepError>> {
    if !still_owns(ctx).await? {
        return Err(ctx.stop(Abort::NotOwner));
    }
    match ds.recorded_with_retry(ctx, function_id).await? {
        Ok(Some(row)) => replay(&row, name, function_id),
        Ok(None) => Ok(Err(step::failed(
            name,
            function_id,
            vec!["conflicted with a concurrent execution, but no recorded result was found".into()],
        ))),
        Err(e) => Ok(Err(step::failed(name, function_id, vec![e.to_string()]))),
    }
}

/// A recorded row as the step's outcome: its output, or its error as a step failure.
fn replay<T: DeserializeOwned>(
    row: &Recorded,
    name: &str,
    function_id: u32,
) -> Result<std::result::Result<T, StepError>> {
    codec::check_format(
        row.serialization.as_deref(),
        format_args!("the recorded transaction {name:?} (call #{function_id})"),
    )?;
    match step::decode(
        row.serialization.as_deref(),
        row.output.as_deref(),
        row.error.as_deref(),
        name,
        function_id,
    ) {
        Ok(value) => Ok(Ok(value)),
        Err(Error::Step(e)) => Ok(Err(e)),
        Err(e) => Err(e),
    }
}

/// Whether this execution still owns its workflow (the system database's `owner_xid`); a
/// database failure is handled as in any durable call (`Context::db_failure`).
async fn still_owns(ctx: &Context) -> Result<bool> {
    owns(ctx).await.map_err(|e| ctx.db_failure(e))
}

async fn owns(ctx: &Context) -> std::result::Result<bool, DbError> {
    let id = ctx.workflow_id().to_owned();
    let owner = ctx
        .shared()
        .db
        .call_with(id, |db, id| async move { db.workflow_owner(&id).await })
        .await?;
    Ok(owner.as_deref() == Some(ctx.owner()))
}

/// DBOS's backoff between attempts: 1 ms, ×1.5, at most 2 s; stops when the run must stop.
struct Wait(Duration);

impl Wait {
    fn new() -> Wait {
        Wait(Duration::from_millis(1))
    }

    async fn next(&mut self, ctx: &Context) -> Result<()> {
        tokio::select! {
            _ = tokio::time::sleep(self.0) => {}
            _ = ctx.aborted() => {}
        }
        self.0 = self.0.mul_f64(1.5).min(Duration::from_secs(2));
        ctx.check_abort()
    }
}

impl<DB: AppDatabase> Release for Datasource<DB> {
    fn key(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    /// Deletes the finished workflow's rows, committed only while this execution owns it.
    /// Best effort: a leftover row is harmless (the step checkpoints cover it).
    fn release<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let deleted = async {
                let mut tx = self.inner.pool.begin().await?;
                DB::delete(&mut tx, &self.inner.schema, ctx.workflow_id(), 1).await?;
                Ok::<_, sqlx::Error>(tx)
            };
            let tx = match deleted.await {
                Ok(tx) => tx,
                Err(e) => {
                    tracing::warn!(error = %e, "deleting a finished workflow's transaction records");
                    return true;
                }
            };
            // Delete, then check: every removed row predates any later owner's.
            if !matches!(owns(ctx).await, Ok(true)) {
                return false;
            }
            if let Err(e) = tx.commit().await {
                tracing::warn!(error = %e, "deleting a finished workflow's transaction records");
            }
            true
        })
    }
}

//! Group commit: what the database actor batches. Requests of one kind (workflow starts, step
//! checkpoints, workflow outcomes, step loads, claims) that wait while a flush of that kind is in
//! flight go out together in the next one: one statement, one round trip and one commit however
//! many rows it carries. Rows are passed as arrays and expanded with `UNNEST`.
//!
//! Kinds are kept apart (a lane each) rather than combined: a start must not queue behind a big
//! batch of checkpoints, and a statement shaped for one kind plans and runs faster.
//!
//! Every write is idempotent, so the actor may resend a batch after a connection loss: a row
//! that already committed is recognised, not written twice.

use futures::future::BoxFuture;
use sqlx::postgres::{PgArguments, PgConnection};
use sqlx::sqlite::SqliteConnection;
use sqlx::Postgres;

use super::{Backend, LaneConn, Sql, SysDb};
use crate::error::DbError;

pub(super) type PgQuery<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// A kind of request the database actor batches: many go out as one statement on a connection
/// the actor keeps for that kind.
pub(crate) trait BatchWrite: Send + Sync + 'static {
    /// What each caller gets back.
    type Out: Send + 'static;
    /// Lane name, for metrics and logs.
    const LANE: &'static str;
    /// The most requests one flush carries.
    const MAX_BATCH: usize = usize::MAX;
    /// Runs the whole batch on Postgres; the result has one entry per request, in order.
    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<Self::Out>, DbError>>
    where
        Self: Sized;

    /// Runs the whole batch on SQLite, inside the writer's open transaction.
    fn execute_lite<'a>(
        tx: &'a mut SqliteConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<Self::Out>, DbError>>
    where
        Self: Sized;
}

/// Runs `batch` on the lane's connection: one statement on Postgres, one write transaction on
/// SQLite.
pub(crate) async fn run<W: BatchWrite>(
    db: &SysDb,
    conn: &mut LaneConn,
    batch: &[W],
) -> Result<Vec<W::Out>, DbError> {
    match (conn, &db.backend) {
        (LaneConn::Postgres(conn), _) => W::execute(&db.sql, conn, batch).await,
        (LaneConn::Sqlite, Backend::Sqlite(lite)) => {
            let mut tx = lite.write().await?;
            let outs = W::execute_lite(&mut tx, batch).await?;
            tx.commit().await?;
            Ok(outs)
        }
        (LaneConn::Sqlite, Backend::Postgres { .. }) => Err(DbError::Query(
            "a SQLite lane on a Postgres database".into(),
        )),
    }
}

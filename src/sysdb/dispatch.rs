//! Dispatch outside claims: recovery of this executor's unfinished workflows, taking back a
//! crashed queue actor's workflows, and counting crash restarts against the recovery budget.

use sqlx::postgres::PgRow;
use sqlx::PgPool;

use super::claim::Claimed;
use super::{now_ms, Sql, INTERNAL_QUEUE};
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;

/// Who this executor is, as the claim and recovery filters see it.
#[derive(Debug, Clone)]
pub(crate) struct Executor<'a> {
    pub executor_id: &'a str,
    pub app_version: &'a str,
    pub app_name: Option<&'a str>,
}

pub(super) const RECOVER: &str = r#"
UPDATE {s}.workflow_status
SET status = 'ENQUEUED', queue_name = COALESCE(queue_name, $4), owner_xid = NULL, updated_at = $5
WHERE status = 'PENDING' AND executor_id = $1 AND application_version = $2
  AND (application_name = $3 OR application_name IS NULL)
"#;

pub(super) const REDISPATCH: &str = r#"
UPDATE {s}.workflow_status w
SET owner_xid = gen_random_uuid()::text, updated_at = $5,
    recovery_attempts = COALESCE(w.recovery_attempts, 0) + 1
WHERE w.status = 'PENDING' AND w.executor_id = $1 AND w.application_version = $2
  AND (w.queue_name = $3 OR ($4 AND w.queue_name IS NULL))
  AND NOT (w.workflow_uuid = ANY($6::text[]))
RETURNING w.workflow_uuid, w.name, w.owner_xid, w.recovery_attempts,
    COALESCE((SELECT i.inputs FROM {s}.workflow_input i
              WHERE i.workflow_uuid = w.workflow_uuid), w.inputs),
    w.serialization,
    EXISTS (SELECT 1 FROM {s}.operation_outputs o WHERE o.workflow_uuid = w.workflow_uuid),
    w.priority, w.created_at, w.workflow_deadline_epoch_ms
"#;

pub(super) const BUMP_ATTEMPTS: &str = r#"
UPDATE {s}.workflow_status
SET recovery_attempts = COALESCE(recovery_attempts, 0) + 1, updated_at = $3
WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2
RETURNING recovery_attempts
"#;

/// Puts this executor's `PENDING` workflows back on their queue (the internal one when they had
/// none) so the queue actors claim them again. Returns how many were recovered.
pub(crate) async fn recover(db: &SysDb, me: &Executor<'_>) -> Result<u64, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => recover_pg(pool, &db.sql, me).await,
        Backend::Sqlite(lite) => sqlite::dispatch::recover(lite, me).await,
    }
}

async fn recover_pg(pool: &PgPool, sql: &Sql, me: &Executor<'_>) -> Result<u64, DbError> {
    let done = sqlx::query(sql.recover.clone())
        .bind(me.executor_id)
        .bind(me.app_version)
        .bind(me.app_name)
        .bind(INTERNAL_QUEUE)
        .bind(now_ms())
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

/// Takes back the `PENDING` workflows of `queue` that this executor owns but runs no actor for
/// (a crashed queue actor's, or a claim whose answer was lost); `running` are the ones it does
/// run. `with_direct` also takes direct starts (no queue), which the internal queue runs.
pub(crate) async fn redispatch(
    db: &SysDb,
    me: &Executor<'_>,
    queue: &str,
    with_direct: bool,
    running: &[String],
) -> Result<Vec<Claimed>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => {
            redispatch_pg(pool, &db.sql, me, queue, with_direct, running).await
        }
        Backend::Sqlite(lite) => {
            sqlite::dispatch::redispatch(lite, me, queue, with_direct, running).await
        }
    }
}

async fn redispatch_pg(
    pool: &PgPool,
    sql: &Sql,
    me: &Executor<'_>,
    queue: &str,
    with_direct: bool,
    running: &[String],
) -> Result<Vec<Claimed>, DbError> {
    let rows = sqlx::query(sql.redispatch.clone())
        .bind(me.executor_id)
        .bind(me.app_version)
        .bind(queue)
        .bind(with_direct)
        .bind(now_ms())
        .bind(running)
        .fetch_all(pool)
        .await?;
    sorted(rows)
}

/// Counts a crash restart of a running workflow; `None` when it is no longer ours.
pub(crate) async fn bump_attempts(
    db: &SysDb,
    id: &str,
    owner: &str,
) -> Result<Option<i64>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => bump_attempts_pg(pool, &db.sql, id, owner).await,
        Backend::Sqlite(lite) => sqlite::dispatch::bump_attempts(lite, id, owner).await,
    }
}

async fn bump_attempts_pg(
    pool: &PgPool,
    sql: &Sql,
    id: &str,
    owner: &str,
) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar(sql.bump_attempts.clone())
        .bind(id)
        .bind(owner)
        .bind(now_ms())
        .fetch_optional(pool)
        .await?
        .flatten())
}

/// `UPDATE ... RETURNING` has no order; dispatch in priority, then FIFO order.
fn sorted(rows: Vec<PgRow>) -> Result<Vec<Claimed>, DbError> {
    let mut keyed = rows
        .iter()
        .map(|row| {
            let key = Claimed::order_key(row, 0)?;
            Ok((key, Claimed::from_row(row, 0)?))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    keyed.sort_by_key(|(key, _)| *key);
    Ok(keyed.into_iter().map(|(_, c)| c).collect())
}

//! The `queues` table: queue definitions shared by every executor of an application.

use std::time::Duration;

use sqlx::PgPool;

use super::rows::{AnyRow, Bind};
use super::{now_ms, Sql};
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;
use crate::queue::{Queue, RateLimit};

/// Columns in `Queue` order, for every statement below.
pub(super) const COLUMNS: &str = "name, concurrency, worker_concurrency, rate_limit_max, \
    rate_limit_period_sec, priority_enabled, partition_queue, polling_interval_sec, \
    partition_concurrency, partition_worker_concurrency, partition_rate_limit_max, \
    partition_rate_limit_period_sec";

pub(super) fn list_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM {{s}}.queues \
         WHERE application_name = $1 OR application_name IS NULL ORDER BY name"
    )
}

pub(super) fn upsert_sql() -> String {
    format!(
        "INSERT INTO {{s}}.queues ({COLUMNS}, application_name, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14) \
         ON CONFLICT (name) DO UPDATE SET concurrency = EXCLUDED.concurrency, \
           worker_concurrency = EXCLUDED.worker_concurrency, \
           rate_limit_max = EXCLUDED.rate_limit_max, \
           rate_limit_period_sec = EXCLUDED.rate_limit_period_sec, \
           priority_enabled = EXCLUDED.priority_enabled, \
           partition_queue = EXCLUDED.partition_queue, \
           polling_interval_sec = EXCLUDED.polling_interval_sec, \
           partition_concurrency = EXCLUDED.partition_concurrency, \
           partition_worker_concurrency = EXCLUDED.partition_worker_concurrency, \
           partition_rate_limit_max = EXCLUDED.partition_rate_limit_max, \
           partition_rate_limit_period_sec = EXCLUDED.partition_rate_limit_period_sec, \
           application_name = EXCLUDED.application_name, updated_at = EXCLUDED.updated_at \
         WHERE $15 \
         RETURNING (xmax = 0)"
    )
}

pub(super) const DELETE: &str = "DELETE FROM {s}.queues WHERE name = $1";

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Binds a definition's `COLUMNS`, its application and the time, as `$1`..`$14` of either
/// backend's statements.
pub(super) fn bind_queue<'q, B: Bind<'q>>(b: B, q: &'q Queue, app: Option<&'q str>) -> B {
    let n = |v: Option<u32>| v.map(|v| v.min(i32::MAX as u32) as i32);
    b.arg(&q.name)
        .arg(n(q.concurrency))
        .arg(n(q.worker_concurrency))
        .arg(n(q.rate_limit.map(|r| r.limit)))
        .arg(q.rate_limit.map(|r| secs(r.period)))
        .arg(q.priority_enabled)
        .arg(q.partitioned)
        .arg(secs(q.polling_interval))
        .arg(n(q.partition_concurrency))
        .arg(n(q.partition_worker_concurrency))
        .arg(n(q.partition_rate_limit.map(|r| r.limit)))
        .arg(q.partition_rate_limit.map(|r| secs(r.period)))
        .arg(app)
        .arg(now_ms())
}

/// A `queues` row of either backend, columns in `COLUMNS` order.
pub(super) fn row_to_queue(row: &impl AnyRow) -> Result<Queue, sqlx::Error> {
    let count = |i: usize| -> Result<Option<u32>, sqlx::Error> {
        Ok(row.at::<Option<i32>>(i)?.map(|n| n.max(0) as u32))
    };
    let rate = |i: usize| -> Result<Option<RateLimit>, sqlx::Error> {
        let limit: Option<i32> = row.at(i)?;
        let period: Option<f64> = row.at(i + 1)?;
        Ok(match (limit, period) {
            (Some(limit), Some(period)) if limit > 0 && period > 0.0 => Some(RateLimit {
                limit: limit as u32,
                period: Duration::from_secs_f64(period),
            }),
            _ => None,
        })
    };
    let poll: f64 = row.at(7)?;
    Ok(Queue {
        name: row.at(0)?,
        concurrency: count(1)?,
        worker_concurrency: count(2)?,
        rate_limit: rate(3)?,
        priority_enabled: row.at(5)?,
        partitioned: row.at(6)?,
        polling_interval: Duration::from_secs_f64(if poll > 0.0 { poll } else { 1.0 }),
        partition_concurrency: count(8)?,
        partition_worker_concurrency: count(9)?,
        partition_rate_limit: rate(10)?,
    })
}

/// The queues of this application (rows of its name, and rows of none).
pub(crate) async fn list(db: &SysDb, app: Option<&str>) -> Result<Vec<Queue>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => list_pg(pool, &db.sql, app).await,
        Backend::Sqlite(lite) => sqlite::queues::list(lite, app).await,
    }
}

async fn list_pg(pool: &PgPool, sql: &Sql, app: Option<&str>) -> Result<Vec<Queue>, DbError> {
    let rows = sqlx::query(sql.list_queues.clone())
        .bind(app)
        .fetch_all(pool)
        .await?;
    Ok(rows.iter().map(row_to_queue).collect::<Result<_, _>>()?)
}

/// Writes a queue's definition. `replace` overwrites an existing row; otherwise an existing
/// row is left alone. Returns whether the row was created.
pub(crate) async fn put(
    db: &SysDb,
    q: &Queue,
    app: Option<&str>,
    replace: bool,
) -> Result<Option<bool>, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => put_pg(pool, &db.sql, q, app, replace).await,
        Backend::Sqlite(lite) => sqlite::queues::put(lite, q, app, replace).await,
    }
}

async fn put_pg(
    pool: &PgPool,
    sql: &Sql,
    q: &Queue,
    app: Option<&str>,
    replace: bool,
) -> Result<Option<bool>, DbError> {
    let created: Option<bool> = bind_queue(sqlx::query_scalar(sql.upsert_queue.clone()), q, app)
        .bind(replace)
        .fetch_optional(pool)
        .await?;
    Ok(created)
}

/// Deletes a queue's definition; false when there was none.
pub(crate) async fn delete(db: &SysDb, name: &str) -> Result<bool, DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => delete_pg(pool, &db.sql, name).await,
        Backend::Sqlite(lite) => sqlite::queues::delete(lite, name).await,
    }
}

async fn delete_pg(pool: &PgPool, sql: &Sql, name: &str) -> Result<bool, DbError> {
    let done = sqlx::query(sql.delete_queue.clone())
        .bind(name)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

//! The `queues` table on Postgres.

use std::sync::LazyLock;

use async_trait::async_trait;

use super::Postgres;
use crate::base::queue::Queue;
use crate::error::DbError;
use crate::sysdb::queues::{QueueDeletion, Queues};
use crate::sysdb::rows::{all, app_queue_from_row, bind_queue, queue_from_row, QUEUE_COLUMNS};

/// Built once per process; `Sql::get` splices the schema in.
static UPSERT: LazyLock<String> = LazyLock::new(upsert_sql);

/// Built once per process; `Sql::get` splices the schema in.
static LIST: LazyLock<String> = LazyLock::new(list_sql);

/// Built once per process; `Sql::get` splices the schema in.
static LIST_ALL: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {QUEUE_COLUMNS}, application_name FROM {{s}}.queues ORDER BY name")
});

fn list_sql() -> String {
    format!(
        "SELECT {QUEUE_COLUMNS} FROM {{s}}.queues \
         WHERE application_name = $1 OR application_name IS NULL ORDER BY name"
    )
}

fn upsert_sql() -> String {
    format!(
        "INSERT INTO {{s}}.queues ({QUEUE_COLUMNS}, application_name, created_at, updated_at) \
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

/// Counts the waiting workflows and deletes only when there are none, in one statement (the
/// final `EXISTS` reads the snapshot before the delete: whether the queue existed). The two
/// statuses are an `OR` so the in-flight and delayed partial indexes serve it.
/// Rows waiting on queue $1 in one bucket.
const WAITING: &str = "SELECT count(*) FROM {s}.workflow_status \
    WHERE queue_name = $1 AND (status = 'ENQUEUED' OR status = 'DELAYED')";

pub(super) const DELETE: &str = "WITH waiting AS (SELECT count(*) AS n FROM {s}.workflow_status \
       WHERE queue_name = $1 AND (status = 'ENQUEUED' OR status = 'DELAYED')), \
     gone AS (DELETE FROM {s}.queues WHERE name = $1 AND (SELECT n FROM waiting) = 0) \
     SELECT (SELECT n FROM waiting), EXISTS (SELECT 1 FROM {s}.queues WHERE name = $1)";

#[async_trait]
impl Queues for Postgres {
    async fn list_queues(&self, app: Option<&str>) -> Result<Vec<Queue>, DbError> {
        let rows = self
            .sql
            .query(&LIST)
            .bind(app)
            .fetch_all(&self.pool)
            .await?;
        all(&rows, queue_from_row)
    }

    async fn list_all_queues(&self) -> Result<Vec<(Option<String>, Queue)>, DbError> {
        let rows = self.sql.query(&LIST_ALL).fetch_all(&self.pool).await?;
        all(&rows, app_queue_from_row)
    }

    async fn put_queue(
        &self,
        q: &Queue,
        app: Option<&str>,
        replace: bool,
    ) -> Result<Option<bool>, DbError> {
        let query = bind_queue(self.sql.query(&UPSERT), q, app);
        Ok(query
            .bind(replace)
            .fetch_optional_scalar(&self.pool)
            .await?)
    }

    /// On a sharded layout a queue with work in any bucket stays.
    async fn delete_queue(&self, name: &str) -> Result<QueueDeletion, DbError> {
        let mut elsewhere = 0;
        for sql in self.buckets().iter().skip(1) {
            let n: Option<i64> = sql
                .query(WAITING)
                .bind(name)
                .fetch_optional_scalar(&self.pool)
                .await?;
            elsewhere += n.unwrap_or(0);
        }
        if elsewhere > 0 {
            let existed = !self
                .list_all_queues()
                .await?
                .iter()
                .all(|(_, q)| q.name != name);
            return Ok(QueueDeletion::of(existed, elsewhere));
        }
        let row = self
            .sql
            .query(DELETE)
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        let (waiting, existed): (i64, bool) =
            (sqlx::Row::try_get(&row, 0)?, sqlx::Row::try_get(&row, 1)?);
        Ok(QueueDeletion::of(existed, waiting))
    }
}

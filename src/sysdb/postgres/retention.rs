//! Garbage collection on Postgres: batches of one statement each, victims locked
//! `FOR UPDATE SKIP LOCKED` so executors collecting at once split the work.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use crate::error::DbError;
use crate::sysdb::retention::{Collect, COLLECT_BATCH};

/// One batch: victims are finished rows created before $1, or older than the $2-th newest
/// finished row (by `created_at`, then id, so the cap keeps exactly $2); at most $3 of them.
/// The cap is a cutoff row, so the victims are a range of the `created_at` index, not an
/// anti-join against every kept row (a scan of the whole history per batch).
pub(super) const COLLECT: &str = r#"
WITH cutoff AS (
    SELECT created_at AS c, workflow_uuid AS u FROM {s}.workflow_status
    WHERE $2::int8 > 0
      AND status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
    ORDER BY created_at DESC, workflow_uuid DESC
    OFFSET GREATEST($2::int8 - 1, 0) LIMIT 1
), victims AS (
    SELECT w.workflow_uuid FROM {s}.workflow_status w
    WHERE w.status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')
      AND (($1::int8 IS NOT NULL AND w.created_at < $1::int8)
           OR $2::int8 = 0
           OR (w.created_at, w.workflow_uuid)
              < ((SELECT c FROM cutoff), (SELECT u FROM cutoff)))
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), ids AS (
    -- One array, so each delete is a primary-key lookup whatever plan the statement gets
    -- (a generic plan guesses the victims' count and would hash-join whole tables).
    SELECT COALESCE(array_agg(workflow_uuid), '{}') AS a FROM victims
), d_steps AS (
    DELETE FROM {s}.operation_outputs WHERE workflow_uuid = ANY((SELECT a FROM ids)::text[])
), d_input AS (
    DELETE FROM {s}.workflow_input WHERE workflow_uuid = ANY((SELECT a FROM ids)::text[])
), d_output AS (
    DELETE FROM {s}.workflow_output WHERE workflow_uuid = ANY((SELECT a FROM ids)::text[])
), d_status AS (
    DELETE FROM {s}.workflow_status WHERE workflow_uuid = ANY((SELECT a FROM ids)::text[])
    RETURNING 1
)
SELECT count(*) FROM d_status
"#;

#[async_trait]
impl Collect for Postgres {
    async fn garbage_collect(
        &self,
        older_than_ms: Option<i64>,
        keep_newest: Option<i64>,
    ) -> Result<u64, DbError> {
        if older_than_ms.is_none() && keep_newest.is_none() {
            return Ok(0);
        }
        let keep = keep_newest.map(|n| n.max(0));
        let shares = match keep {
            Some(keep) if self.shards.sharded() => self.kept_by_bucket(keep).await?,
            _ => vec![keep],
        };
        let mut total = 0u64;
        for (sql, keep) in self.buckets().iter().zip(shares) {
            loop {
                let deleted: i64 = sql
                    .query(COLLECT)
                    .bind(older_than_ms)
                    .bind(keep)
                    .bind(COLLECT_BATCH)
                    .fetch_scalar(&self.pool)
                    .await?;
                total += deleted.max(0) as u64;
                if deleted < COLLECT_BATCH {
                    break;
                }
            }
        }
        Ok(total)
    }
}

/// The newest $1 finished rows of one bucket, as keys.
const NEWEST: &str = "SELECT created_at, workflow_uuid FROM {s}.workflow_status \
    WHERE status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED') \
    ORDER BY created_at DESC, workflow_uuid DESC LIMIT $1";

impl Postgres {
    /// On a sharded layout, how many of the `keep` newest finished workflows (of them all)
    /// each bucket holds: each bucket then keeps that many of its own (this fans out, reading
    /// up to `keep` keys per bucket).
    async fn kept_by_bucket(&self, keep: i64) -> Result<Vec<Option<i64>>, DbError> {
        let mut newest: Vec<(i64, String, usize)> = Vec::new();
        for (b, sql) in self.buckets().iter().enumerate() {
            let rows = sql.query(NEWEST).bind(keep).fetch_all(&self.pool).await?;
            for row in rows {
                newest.push((row.try_get(0)?, row.try_get(1)?, b));
            }
        }
        newest.sort_by(|x, y| (y.0, &y.1).cmp(&(x.0, &x.1)));
        newest.truncate(usize::try_from(keep).unwrap_or(0));
        let mut shares = vec![0i64; self.shards.count()];
        for (_, _, b) in newest {
            shares[b] += 1;
        }
        Ok(shares.into_iter().map(Some).collect())
    }
}

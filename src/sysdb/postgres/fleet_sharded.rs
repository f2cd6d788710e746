//! The fleet on a sharded layout: the roster and every liveness lock live in the home (the locks
//! are taken through a home table, so on Citus they sit on the home's node, `fleet.rs`), while
//! the workflows an adoption moves are in every bucket. So what one statement does on one
//! bucket takes a few here: the roster read once in the home, the workflows read or moved in
//! each bucket; an adoption holds the dead executor's lock (in the home) in one transaction
//! around its moves, and announces the queues after its commit (Citus cannot commit a NOTIFY
//! made on one of several nodes a transaction wrote).

use std::collections::BTreeSet;

use sqlx::{PgConnection, Row};

use super::fleet::{LIVE_SQL, QUIET_SQL};
use super::Postgres;
use crate::base::queue::INTERNAL_QUEUE;
use crate::error::DbError;
use crate::sysdb::dispatch::Executor;
use crate::sysdb::fleet::{Adopted, Adoption};

/// A bucket's `PENDING` workflows of executor $1 at version $2, of application $3 (or none).
const HAS_WORK: &str = "SELECT EXISTS (SELECT 1 FROM {s}.workflow_status \
    WHERE status = 'PENDING' AND executor_id = $1 AND application_version = $2 \
      AND (application_name = $3 OR application_name IS NULL))";

/// Moves a bucket's `PENDING` workflows of dead executor $1 (version $2, application $3,
/// workflow names $4) back to their queues ($5 for those that had none).
const MOVE_PENDING: &str = "UPDATE {s}.workflow_status w \
    SET status = 'ENQUEUED', queue_name = COALESCE(w.queue_name, $5), owner_xid = NULL, \
        started_at_epoch_ms = NULL, updated_at = $6 \
    WHERE w.status = 'PENDING' AND w.executor_id = $1 AND w.application_version = $2 \
      AND (w.application_name = $3 OR w.application_name IS NULL) \
      AND w.name = ANY($4::text[]) \
    RETURNING w.queue_name";

/// A bucket's `PENDING` workflows of executors $1: id, executor, version, application, time.
const PENDING_OF: &str = "SELECT workflow_uuid, executor_id, application_version, \
    application_name, created_at FROM {s}.workflow_status \
    WHERE status = 'PENDING' AND executor_id = ANY($1::text[])";

/// Moves a bucket's `PENDING` workflows $1 of executors $4 to version $2 and their queues ($3
/// for those that had none).
const MOVE_TO_VERSION: &str = "UPDATE {s}.workflow_status w \
    SET status = 'ENQUEUED', application_version = $2, queue_name = COALESCE(w.queue_name, $3), \
        owner_xid = NULL, started_at_epoch_ms = NULL, updated_at = $5 \
    WHERE w.workflow_uuid = ANY($1::text[]) AND w.status = 'PENDING' \
      AND w.executor_id = ANY($4::text[]) \
    RETURNING w.queue_name";

/// A bucket's `PENDING` count by executor.
const PENDING_COUNTS: &str = "SELECT executor_id, count(*) FROM {s}.workflow_status \
    WHERE status = 'PENDING' GROUP BY executor_id";

const ANNOUNCE: &str = "SELECT pg_notify('stead_queue_channel', $1)::text";

impl Postgres {
    /// Dead and quiet executors (not `me`) of the home roster, oldest silence first, with
    /// work of `me`'s version in some bucket.
    pub(super) async fn adoptable_sharded(
        &self,
        me: &Executor<'_>,
    ) -> Result<Vec<String>, DbError> {
        let dead: Vec<String> = self
            .sql
            .query(&DEAD_SQL)
            .bind(me.executor_id)
            .fetch_scalars(&self.pool)
            .await?;
        let mut adoptable = Vec::new();
        for executor in dead {
            for sql in self.buckets().iter() {
                let has: bool = sql
                    .query(HAS_WORK)
                    .bind(&executor)
                    .bind(me.app_version)
                    .bind(me.app_name)
                    .fetch_one(&self.pool)
                    .await?
                    .try_get(0)?;
                if has {
                    adoptable.push(executor);
                    break;
                }
            }
        }
        Ok(adoptable)
    }

    /// Takes the dead executor's lock (in the home) and, holding it, moves its work in every
    /// bucket; `None` when its lock is held (it lives) or it is not quiet.
    pub(super) async fn adopt_sharded(&self, a: &Adoption<'_>) -> Result<Option<Adopted>, DbError> {
        let mut conn = self.pool.acquire().await?;
        sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
        let moved = self.adopt_in(&mut conn, a).await;
        let end = if matches!(moved, Ok(Some(_))) {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        sqlx::raw_sql(end).execute(&mut *conn).await?;
        if let Ok(Some(adopted)) = &moved {
            self.announce(&mut conn, &adopted.queues).await?;
        }
        moved
    }

    async fn adopt_in(
        &self,
        conn: &mut PgConnection,
        a: &Adoption<'_>,
    ) -> Result<Option<Adopted>, DbError> {
        let got: Option<bool> = self
            .sql
            .query(&TAKE_LOCK_SQL)
            .bind(a.dead)
            .fetch_optional_scalar(&mut *conn)
            .await?;
        if got != Some(true) {
            return Ok(None);
        }
        let now = crate::base::clock::now_ms();
        let mut adopted = Adopted::default();
        let mut queues = BTreeSet::new();
        for sql in self.buckets().iter() {
            let rows = sql
                .query(MOVE_PENDING)
                .bind(a.dead)
                .bind(a.me.app_version)
                .bind(a.me.app_name)
                .bind(a.names)
                .bind(INTERNAL_QUEUE)
                .bind(now)
                .fetch_all(&mut *conn)
                .await?;
            adopted.workflows += rows.len() as u64;
            for row in rows {
                queues.insert(row.try_get::<String, _>(0)?);
            }
        }
        adopted.queues = queues.into_iter().collect();
        Ok(Some(adopted))
    }

    /// `PENDING` workflows of dead executors (of application `app`) whose version no live
    /// executor serves, oldest first, from every bucket.
    pub(super) async fn stranded_sharded(&self, app: Option<&str>) -> Result<Vec<String>, DbError> {
        let dead: Vec<String> = self
            .sql
            .query(&DEAD_OF_APP_SQL)
            .bind(app)
            .fetch_scalars(&self.pool)
            .await?;
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let served: Vec<(String, Option<String>)> = self
            .sql
            .query(&SERVED_SQL)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let mut stranded = Vec::new();
        for sql in self.buckets().iter() {
            for row in sql
                .query(PENDING_OF)
                .bind(&dead)
                .fetch_all(&self.pool)
                .await?
            {
                let version: Option<String> = row.try_get(2)?;
                let app: Option<String> = row.try_get(3)?;
                let live = served
                    .iter()
                    .any(|(v, a)| Some(v) == version.as_ref() && *a == app);
                if !live {
                    let created: i64 = row.try_get(4)?;
                    stranded.push((created, row.try_get::<String, _>(0)?));
                }
            }
        }
        stranded.sort();
        Ok(stranded.into_iter().map(|(_, id)| id).collect())
    }

    /// Moves `ids` (of dead, quiet executors, whose locks this takes) to `version`.
    pub(super) async fn move_stranded_sharded(
        &self,
        ids: &[String],
        version: &str,
    ) -> Result<u64, DbError> {
        let mut owners = BTreeSet::new();
        for sql in self.buckets().iter() {
            for row in sql
                .query(PENDING_OF_IDS)
                .bind(ids)
                .fetch_all(&self.pool)
                .await?
            {
                owners.insert(row.try_get::<String, _>(0)?);
            }
        }
        let mut conn = self.pool.acquire().await?;
        sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
        let moved = self.move_in(&mut conn, ids, version, owners).await;
        let end = if moved.is_ok() { "COMMIT" } else { "ROLLBACK" };
        sqlx::raw_sql(end).execute(&mut *conn).await?;
        let (count, queues) = moved?;
        self.announce(&mut conn, &queues).await?;
        Ok(count)
    }

    async fn move_in(
        &self,
        conn: &mut PgConnection,
        ids: &[String],
        version: &str,
        owners: BTreeSet<String>,
    ) -> Result<(u64, Vec<String>), DbError> {
        let mut locked = Vec::new();
        for owner in owners {
            let got: Option<bool> = self
                .sql
                .query(&TAKE_LOCK_SQL)
                .bind(&owner)
                .fetch_optional_scalar(&mut *conn)
                .await?;
            if got == Some(true) {
                locked.push(owner);
            }
        }
        let now = crate::base::clock::now_ms();
        let (mut count, mut queues) = (0, BTreeSet::new());
        for sql in self.buckets().iter() {
            let rows = sql
                .query(MOVE_TO_VERSION)
                .bind(ids)
                .bind(version)
                .bind(INTERNAL_QUEUE)
                .bind(&locked)
                .bind(now)
                .fetch_all(&mut *conn)
                .await?;
            count += rows.len() as u64;
            for row in rows {
                queues.insert(row.try_get::<String, _>(0)?);
            }
        }
        Ok((count, queues.into_iter().collect()))
    }

    /// Each executor's `PENDING` workflows in the buckets beyond the home (the home's are
    /// counted by the roster's own listing).
    pub(super) async fn pending_beyond_home(&self) -> Result<Vec<(String, i64)>, DbError> {
        let mut counts: Vec<(String, i64)> = Vec::new();
        for sql in self.buckets().iter().skip(1) {
            for row in sql.query(PENDING_COUNTS).fetch_all(&self.pool).await? {
                let (executor, n): (Option<String>, i64) = (row.try_get(0)?, row.try_get(1)?);
                let Some(executor) = executor else { continue };
                match counts.iter_mut().find(|(e, _)| *e == executor) {
                    Some((_, have)) => *have += n,
                    None => counts.push((executor, n)),
                }
            }
        }
        Ok(counts)
    }

    /// Announces new work on `queues` (after the commit that made it).
    async fn announce(&self, conn: &mut PgConnection, queues: &[String]) -> Result<(), DbError> {
        for queue in queues {
            self.sql
                .query(ANNOUNCE)
                .bind(queue)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}

/// Dead, quiet roster executors other than $1, oldest silence first.
static DEAD_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT e.executor_id FROM {{s}}.stead_executors e \
         WHERE e.executor_id <> $1 AND {} AND NOT {} ORDER BY e.last_seen",
        *QUIET_SQL, LIVE_SQL
    )
});

/// Dead, quiet roster executors of application $1 (every one when NULL).
static DEAD_OF_APP_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT e.executor_id FROM {{s}}.stead_executors e \
         WHERE ($1::text IS NULL OR e.application_name = $1) AND {} AND NOT {}",
        *QUIET_SQL, LIVE_SQL
    )
});

/// The (version, application) pairs live executors serve.
static SERVED_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT DISTINCT e.application_version, e.application_name \
         FROM {{s}}.stead_executors e WHERE {LIVE_SQL}"
    )
});

/// Takes dead, quiet executor $1's liveness lock for this transaction (on the home's node).
static TAKE_LOCK_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT pg_try_advisory_xact_lock(e.lock_key1, e.lock_key2) \
         FROM {{s}}.stead_executors e WHERE e.executor_id = $1 AND {}",
        *QUIET_SQL
    )
});

/// The executors of workflows $1 that are `PENDING`, in one bucket.
const PENDING_OF_IDS: &str = "SELECT DISTINCT executor_id FROM {s}.workflow_status \
    WHERE workflow_uuid = ANY($1::text[]) AND status = 'PENDING' AND executor_id IS NOT NULL";

//! The fleet on Postgres: liveness locks (two-int4 advisory locks, held in an open transaction
//! on a lease's own connection, taken for a statement by adoption), the roster in `stead_executors`, adoption
//! and stranded work. Liveness is read from `pg_locks`, so listing never takes a lock a
//! relaunch could then miss.

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row};

use super::shards::Sharding;
use super::sql::Sql;
use super::Postgres;
use crate::base::queue::INTERNAL_QUEUE;
use crate::error::DbError;
use crate::sysdb::dispatch::Executor;
use crate::sysdb::fleet::{
    lock_key, Adopted, Adoption, ExecutorInfo, Fleet, Lease, Member, QUIET_MARGIN,
};

/// The server's clock in epoch ms: every roster time is the database's, so no two hosts'
/// clocks are ever compared. The statement's start, not the transaction's (a lease's transaction
/// stays open), and not `clock_timestamp()`, which Citus refuses in a write (on Citus it is the
/// clock of the node the executor is connected to: the nodes' clocks must agree).
const NOW: &str = "(extract(epoch from statement_timestamp()) * 1000)::int8";

/// [`LIVE`] and the quiet test, spliced (for `fleet_sharded.rs`).
pub(super) const LIVE_SQL: &str = LIVE;
pub(super) static QUIET_SQL: LazyLock<String> = LazyLock::new(|| splice("{QUIET}"));

/// Whether roster row `e`'s lock is held by some session of this database. The database is
/// this backend's (a function, not the `pg_database` catalog, which Citus would read on the
/// coordinator and take `pg_locks` there with it, away from the lock's node).
const LIVE: &str = "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' \
    AND l.granted AND l.objsubid = 2 \
    AND l.database = (SELECT a.datid FROM pg_stat_get_activity(pg_backend_pid()) a) \
    AND l.classid::int8 = (e.lock_key1::int8 & 4294967295) \
    AND l.objid::int8 = (e.lock_key2::int8 & 4294967295))";

const REGISTER: &str = r#"
INSERT INTO {s}.stead_executors AS e (executor_id, host, pid, application_name,
    application_version, lock_key1, lock_key2, lease_ms, started_at, last_seen)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {NOW}, {NOW})
ON CONFLICT (executor_id) DO UPDATE SET host = $2, pid = $3, application_name = $4,
    application_version = $5, lock_key1 = $6, lock_key2 = $7, lease_ms = $8,
    started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen
"#;

const PING: &str = "UPDATE {s}.stead_executors SET last_seen = {NOW} WHERE executor_id = $1";

const LIST: &str = r#"
SELECT e.executor_id, e.host, e.pid, e.application_name, e.application_version, e.started_at,
       e.last_seen, {LIVE} AS live, COALESCE(p.n, 0)
FROM {s}.stead_executors e
LEFT JOIN (SELECT executor_id, count(*) AS n FROM {s}.workflow_status
           WHERE status = 'PENDING' GROUP BY executor_id) p ON p.executor_id = e.executor_id
WHERE $1::text IS NULL OR e.application_name = $1
ORDER BY 8 DESC, e.executor_id
"#;

/// The dead executors first, materialised: with none (the usual case) no workflow row is read;
/// joined the other way round, every round read every `PENDING` row (there is no index on the
/// executor), a second each at a million waiting workflows.
const ADOPTABLE: &str = r#"
WITH dead AS MATERIALIZED (
    SELECT e.executor_id, e.last_seen FROM {s}.stead_executors e
    WHERE e.executor_id <> $1 AND {QUIET} AND NOT {LIVE}
)
SELECT d.executor_id FROM dead d
WHERE EXISTS (SELECT 1 FROM dead)
  AND EXISTS (SELECT 1 FROM {s}.workflow_status w
              WHERE w.status = 'PENDING' AND w.executor_id = d.executor_id
                AND w.application_version = $2
                AND (w.application_name = $3 OR w.application_name IS NULL))
ORDER BY d.last_seen
"#;

/// Live roster executors (of application $1, every one when NULL); reads no workflow row.
const LIVE_COUNT: &str = r#"
SELECT count(*) FROM {s}.stead_executors e
WHERE ($1::text IS NULL OR e.application_name = $1) AND {LIVE}
"#;

const ADOPT: &str = r#"
WITH got AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(e.lock_key1, e.lock_key2) AS ok
    FROM {s}.stead_executors e WHERE e.executor_id = $1 AND {QUIET}
), moved AS (
    UPDATE {s}.workflow_status w
    SET status = 'ENQUEUED', queue_name = COALESCE(w.queue_name, $5), owner_xid = NULL,
        started_at_epoch_ms = NULL, updated_at = {NOW}
    WHERE w.status = 'PENDING' AND w.executor_id = $1 AND w.application_version = $2
      AND (w.application_name = $3 OR w.application_name IS NULL)
      AND w.name = ANY($4::text[])
      AND COALESCE((SELECT ok FROM got), false)
    RETURNING w.queue_name
), queues AS (
    SELECT DISTINCT queue_name FROM moved
), told AS (
    SELECT pg_notify('stead_queue_channel', queue_name)::text FROM queues
)
SELECT COALESCE((SELECT ok FROM got), false), (SELECT count(*) FROM moved),
       (SELECT COALESCE(json_agg(queue_name), '[]')::text FROM queues), (SELECT count(*) FROM told)
"#;

/// Dead executors first, as in [`ADOPTABLE`]: with none, no workflow row is read.
const STRANDED: &str = r#"
WITH e AS MATERIALIZED (
    SELECT e.executor_id, e.application_name FROM {s}.stead_executors e
    WHERE ($1::text IS NULL OR e.application_name = $1) AND {QUIET} AND NOT {LIVE}
)
SELECT w.workflow_uuid FROM {s}.workflow_status w
JOIN e ON e.executor_id = w.executor_id
WHERE w.status = 'PENDING' AND EXISTS (SELECT 1 FROM e)
  AND NOT EXISTS (SELECT 1 FROM {s}.stead_executors e2
                  WHERE e2.application_version = w.application_version
                    AND e2.application_name IS NOT DISTINCT FROM e.application_name
                    AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory'
                        AND l.granted AND l.objsubid = 2
                        AND l.database = (SELECT a.datid
                                          FROM pg_stat_get_activity(pg_backend_pid()) a)
                        AND l.classid::int8 = (e2.lock_key1::int8 & 4294967295)
                        AND l.objid::int8 = (e2.lock_key2::int8 & 4294967295)))
ORDER BY w.created_at, w.workflow_uuid
"#;

const MOVE: &str = r#"
WITH dead AS MATERIALIZED (
    SELECT e.executor_id, pg_try_advisory_xact_lock(e.lock_key1, e.lock_key2) AS ok
    FROM {s}.stead_executors e
    WHERE {QUIET}
      AND e.executor_id IN (SELECT executor_id FROM {s}.workflow_status
                            WHERE workflow_uuid = ANY($1::text[]) AND status = 'PENDING')
), moved AS (
    UPDATE {s}.workflow_status w
    SET status = 'ENQUEUED', application_version = $2, queue_name = COALESCE(w.queue_name, $3),
        owner_xid = NULL, started_at_epoch_ms = NULL, updated_at = {NOW}
    WHERE w.workflow_uuid = ANY($1::text[]) AND w.status = 'PENDING'
      AND w.executor_id IN (SELECT executor_id FROM dead WHERE ok)
    RETURNING w.queue_name
), told AS (
    SELECT pg_notify('stead_queue_channel', q)::text FROM (SELECT DISTINCT queue_name AS q FROM moved) x
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM told)
"#;

fn splice(t: &str) -> String {
    let quiet = format!("e.last_seen < {NOW} - (e.lease_ms + {QUIET_MARGIN})");
    t.replace("{QUIET}", &quiet)
        .replace("{NOW}", NOW)
        .replace("{LIVE}", LIVE)
}

// Built once per process with `{NOW}` and `{LIVE}` spliced in; `Sql::get` splices the schema.
static REGISTER_SQL: LazyLock<String> = LazyLock::new(|| splice(REGISTER));
static PING_SQL: LazyLock<String> = LazyLock::new(|| splice(PING));
static LIST_SQL: LazyLock<String> = LazyLock::new(|| splice(LIST));
pub(super) static ADOPTABLE_SQL: LazyLock<String> = LazyLock::new(|| splice(ADOPTABLE));
static ADOPT_SQL: LazyLock<String> = LazyLock::new(|| splice(ADOPT));
pub(super) static STRANDED_SQL: LazyLock<String> = LazyLock::new(|| splice(STRANDED));
static LIVE_COUNT_SQL: LazyLock<String> = LazyLock::new(|| splice(LIVE_COUNT));
static MOVE_SQL: LazyLock<String> = LazyLock::new(|| splice(MOVE));

/// The lease's settings, local to its open transaction, so the server ends a session whose
/// process froze or lost the network within `timeout_ms` (older servers lack some: those are
/// skipped). Only numbers, rendered here: the statement is sent as simple-protocol text.
fn lease_settings(timeout_ms: u64) -> String {
    let secs = (timeout_ms / 3000).max(1);
    [
        ("idle_in_transaction_session_timeout", timeout_ms),
        ("tcp_user_timeout", timeout_ms),
        ("tcp_keepalives_idle", secs),
        ("tcp_keepalives_interval", secs),
        ("tcp_keepalives_count", 2),
    ]
    .iter()
    .map(|(name, value)| {
        format!("SELECT set_config(name, '{value}', true) FROM pg_settings WHERE name = '{name}';")
    })
    .collect()
}

/// Begins the lease's transaction and takes the lock in it; false when another session holds
/// it. One simple-protocol string that ends inside the transaction, so a transaction pooler
/// keeps this client on one server connection for the lease's whole life.
///
/// Read committed, whatever the server's default: between statements an idle transaction of
/// that level holds no snapshot, so the open lease never holds back vacuum.
async fn lock_in_transaction(
    conn: &mut PgConnection,
    sql: &Sql,
    key: (i32, i32),
    timeout_ms: u64,
) -> Result<bool, DbError> {
    // On Citus, anchored to a table of the home (`claim::anchor`): the lock lives on the home's
    // node, where every `pg_locks` probe of the roster (routed there with it) looks for it.
    let text = format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; {} SELECT pg_try_advisory_xact_lock({}, {}){}",
        lease_settings(timeout_ms),
        key.0,
        key.1,
        super::claim::anchor(sql)
    );
    let rows = sqlx::raw_sql(AssertSqlSafe(text))
        .fetch_all(&mut *conn)
        .await?;
    let got = match rows.last() {
        Some(row) => row.try_get::<bool, _>(0)?,
        None => false,
    };
    if !got {
        sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
    }
    Ok(got)
}

/// The liveness lock, held as a transaction-level advisory lock in a transaction that stays
/// open (idle in transaction) for the lease's life and is never committed: a session-level lock
/// would be lost to a transaction pooler, which hands the server connection to other clients
/// between transactions, and a commit would let the lock go for a moment in which a twin could
/// take it. `pg_locks` shows both kinds alike. The roster row is written on a second
/// connection of the lease's own, in autocommit; a ping proves the lock's session on the first.
struct PgLease {
    conn: PgConnection,
    writer: PgConnection,
    sql: Arc<Sql>,
    key: (i32, i32),
}

#[async_trait]
impl Lease for PgLease {
    async fn register(&mut self, me: &Member) -> Result<(), DbError> {
        self.sql
            .query(&REGISTER_SQL)
            .bind(&me.executor_id)
            .bind(&me.host)
            .bind(me.pid)
            .bind(&me.app_name)
            .bind(&me.app_version)
            .bind(self.key.0)
            .bind(self.key.1)
            .bind(me.lease_ms)
            .execute(&mut self.writer)
            .await?;
        Ok(())
    }

    async fn ping(&mut self, executor_id: &str) -> Result<(), DbError> {
        sqlx::raw_sql("SELECT 1").execute(&mut self.conn).await?;
        self.sql
            .query(&PING_SQL)
            .bind(executor_id)
            .execute(&mut self.writer)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Fleet for Postgres {
    async fn hold(
        &self,
        executor_id: &str,
        timeout_ms: u64,
    ) -> Result<Option<Box<dyn Lease>>, DbError> {
        // A sharded layout asked for by the URL is made first: its lock lives on the home's node.
        if self.sharding != Sharding::Unset && !self.shards.citus() {
            crate::sysdb::migrate::Schema::migrate(self).await?;
        }
        let mut conn = self.connect.clone().connect().await?;
        let key = lock_key(&self.sql.schema, executor_id);
        if !lock_in_transaction(&mut conn, &self.sql, key, timeout_ms).await? {
            let _ = conn.close().await;
            return Ok(None);
        }
        let writer = self.connect.clone().connect().await?;
        Ok(Some(Box::new(PgLease {
            conn,
            writer,
            sql: self.sql.clone(),
            key,
        })))
    }

    async fn list_executors(&self, app: Option<&str>) -> Result<Vec<ExecutorInfo>, DbError> {
        let rows = self
            .sql
            .query(&LIST_SQL)
            .bind(app)
            .fetch_all(&self.pool)
            .await;
        let rows = or_no_roster(rows, Vec::new())?;
        let beyond = match self.shards.sharded() {
            true => self.pending_beyond_home().await?,
            false => Vec::new(),
        };
        rows.iter()
            .map(|r| {
                let executor_id: String = r.try_get(0)?;
                let more = beyond
                    .iter()
                    .find(|(e, _)| *e == executor_id)
                    .map_or(0, |(_, n)| *n);
                Ok(ExecutorInfo {
                    executor_id,
                    host: r.try_get(1)?,
                    pid: r.try_get(2)?,
                    app_name: r.try_get(3)?,
                    app_version: r.try_get(4)?,
                    started_at_ms: r.try_get(5)?,
                    last_seen_ms: r.try_get(6)?,
                    live: r.try_get(7)?,
                    pending: r.try_get::<i64, _>(8)? + more,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    async fn live_executors(&self, app: Option<&str>) -> Result<u64, DbError> {
        let n = self
            .sql
            .query(&LIVE_COUNT_SQL)
            .bind(app)
            .fetch_scalar::<_, i64>(&self.pool)
            .await;
        Ok(or_no_roster(n, 0)? as u64)
    }

    async fn adoptable(&self, me: &Executor<'_>) -> Result<Vec<String>, DbError> {
        if self.shards.sharded() {
            return self.adoptable_sharded(me).await;
        }
        Ok(self
            .sql
            .query(&ADOPTABLE_SQL)
            .bind(me.executor_id)
            .bind(me.app_version)
            .bind(me.app_name)
            .fetch_scalars(&self.pool)
            .await?)
    }

    async fn adopt(&self, a: &Adoption<'_>) -> Result<Option<Adopted>, DbError> {
        if self.shards.sharded() {
            return self.adopt_sharded(a).await;
        }
        let row = self
            .sql
            .query(&ADOPT_SQL)
            .bind(a.dead)
            .bind(a.me.app_version)
            .bind(a.me.app_name)
            .bind(a.names)
            .bind(INTERNAL_QUEUE)
            .fetch_one(&self.pool)
            .await?;
        if !row.try_get::<bool, _>(0)? {
            return Ok(None);
        }
        Ok(Some(Adopted {
            workflows: row.try_get::<i64, _>(1)? as u64,
            // As JSON: an inline statement's text array reads an element `NULL` as NULL.
            queues: serde_json::from_str(&row.try_get::<String, _>(2)?)
                .map_err(|e| DbError::Query(format!("the adopted queues: {e}")))?,
        }))
    }

    async fn stranded(&self, app: Option<&str>) -> Result<Vec<String>, DbError> {
        if self.shards.sharded() {
            return self.stranded_sharded(app).await;
        }
        let ids = self
            .sql
            .query(&STRANDED_SQL)
            .bind(app)
            .fetch_scalars(&self.pool)
            .await;
        or_no_roster(ids, Vec::new())
    }

    async fn move_stranded(&self, ids: &[String], version: &str) -> Result<u64, DbError> {
        if self.shards.sharded() {
            return self.move_stranded_sharded(ids, version).await;
        }
        let moved: i64 = self
            .sql
            .query(&MOVE_SQL)
            .bind(ids)
            .bind(version)
            .bind(INTERNAL_QUEUE)
            .fetch_scalar(&self.pool)
            .await?;
        Ok(moved as u64)
    }
}

/// A roster read's result, or `empty` when there is no roster yet (42P01: a schema DBOS
/// migrated that no stead executor used).
fn or_no_roster<T>(read: Result<T, sqlx::Error>, empty: T) -> Result<T, DbError> {
    match read {
        Ok(found) => Ok(found),
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P01") => Ok(empty),
        Err(e) => Err(e.into()),
    }
}

//! Creating workflow rows on Postgres: the whole batch in one statement that also announces
//! waiting enqueues on `stead_queue_channel`.

use std::collections::HashMap;
use std::sync::LazyLock;

use sqlx::postgres::PgConnection;
use sqlx::{Acquire, Row};

use super::exec::Stmt;
use super::ops;
use super::rowsource::{self, Column};
use super::sql::Sql;
use crate::error::DbError;
use crate::sysdb::{NewWorkflow, OutgoingMessage, StartOutcome};

/// Built once per process; `Sql::get` splices the schema in.
static STATEMENT: LazyLock<String> =
    LazyLock::new(|| statement(&rowsource::arrays(&COLUMNS, 1, true)));
/// A lone request (`bind_single`): the awaited producer's path, where arrays cost an enqueue
/// alone 15% of its rate (`rowsource.rs`, "A lone request is one row").
static SINGLE: LazyLock<String> =
    LazyLock::new(|| statement(&rowsource::single(&COLUMNS, 1, true)));

/// The Citus forms of [`STATEMENT`] and [`SINGLE`] (`migrations/postgres/citus.sql`).
pub(super) static CITUS: LazyLock<String> = LazyLock::new(|| citus(false));
static CITUS_SINGLE: LazyLock<String> = LazyLock::new(|| citus(true));

fn citus(lone: bool) -> String {
    rowsource::call(
        "stead_start",
        &COLUMNS,
        1,
        lone,
        &["$17::text", "$18::text"],
    )
}

/// The requests' columns, parameters 1 to 16 (`bind`, `bind_single`).
const COLUMNS: [Column; 16] = [
    ("id", "text"),
    ("name", "text"),
    ("owner", "text"),
    ("inputs", "text"),
    ("status", "text"),
    ("queue", "text"),
    ("priority", "int4"),
    ("dedup", "text"),
    ("part", "text"),
    ("delay_until", "int8"),
    ("created", "int8"),
    ("timeout", "int8"),
    ("deadline", "int8"),
    ("parent", "text"),
    ("version", "text"),
    ("attrs", "text"),
];

/// The start statement: the inserts and announcements, and one result row per request.
fn statement(rows: &str) -> String {
    format!("WITH {}\n{RESULT}", cte(rows))
}

/// The inserts as CTEs `sr` (the requests, as `rows` gives them), `s_ins`, `s_announce`; the executor id and app name are parameters 17 and 18.
fn cte(rows: &str) -> String {
    format!(
        r#"sr AS (
    SELECT * FROM {rows}
), s_ins AS (
    INSERT INTO {{s}}.workflow_status AS w (
        workflow_uuid, status, name, owner_xid, executor_id, application_version,
        application_name, queue_name, priority, deduplication_id, queue_partition_key,
        delay_until_epoch_ms, recovery_attempts, serialization, created_at, updated_at,
        started_at_epoch_ms, workflow_timeout_ms, workflow_deadline_epoch_ms,
        parent_workflow_id, attributes, inputs)
    SELECT r.id, r.status, r.name, r.owner, CASE WHEN r.owner IS NOT NULL THEN $17 END,
        r.version, $18, r.queue, r.priority, r.dedup, r.part, r.delay_until,
        CASE WHEN r.owner IS NOT NULL THEN 1 ELSE 0 END, 'portable_json', r.created, r.created,
        CASE WHEN r.owner IS NOT NULL THEN r.created END, r.timeout, r.deadline, r.parent,
        r.attrs::jsonb, r.inputs
    FROM sr r ORDER BY r.n
    -- Either key: the workflow id, or the queue's deduplication id.
    ON CONFLICT DO NOTHING
    RETURNING w.workflow_uuid
), s_announce AS (
    SELECT pg_notify('stead_queue_channel', q.queue)::text
    FROM (SELECT DISTINCT r.queue FROM sr r JOIN s_ins ON s_ins.workflow_uuid = r.id
          WHERE r.queue IS NOT NULL AND r.owner IS NULL) q
)"#,
    )
}

/// One result row per request.
const RESULT: &str = r#"
SELECT r.n, s_ins.workflow_uuid IS NOT NULL, w.name, w.status, w.owner_xid, d.workflow_uuid,
       (SELECT count(*) FROM s_announce)
FROM sr r
LEFT JOIN s_ins ON s_ins.workflow_uuid = r.id
LEFT JOIN {s}.workflow_status w ON w.workflow_uuid = r.id AND s_ins.workflow_uuid IS NULL
LEFT JOIN {s}.workflow_status d
    ON s_ins.workflow_uuid IS NULL AND w.workflow_uuid IS NULL
   AND d.queue_name = r.queue AND d.deduplication_id = r.dedup"#;

/// What the statement found for one start.
struct StartRow {
    pub created: bool,
    pub name: Option<String>,
    pub status: Option<String>,
    pub owner: Option<String>,
    pub holder: Option<String>,
}

/// Binds the arrays and the identity of `cte`.
fn bind<'q>(q: Stmt<'q>, batch: &[&'q NewWorkflow]) -> Stmt<'q> {
    let col =
        |f: fn(&'q NewWorkflow) -> Option<&'q str>| batch.iter().map(|w| f(w)).collect::<Vec<_>>();
    let head = batch.first();
    q.bind(col(|w| Some(&w.id)))
        .bind(col(|w| Some(&w.name)))
        .bind(col(|w| w.owner.as_deref()))
        .bind(col(|w| Some(&w.inputs)))
        .bind(col(|w| Some(w.status())))
        .bind(col(|w| w.queue.as_deref()))
        .bind(batch.iter().map(|w| w.priority).collect::<Vec<_>>())
        .bind(col(|w| w.dedup_id.as_deref()))
        .bind(col(|w| w.partition_key.as_deref()))
        .bind(batch.iter().map(|w| w.delay_until).collect::<Vec<_>>())
        .bind(batch.iter().map(|w| w.created_at).collect::<Vec<_>>())
        .bind(batch.iter().map(|w| w.timeout_ms).collect::<Vec<_>>())
        .bind(batch.iter().map(|w| w.deadline).collect::<Vec<_>>())
        .bind(col(|w| w.parent.as_deref()))
        .bind(col(|w| w.app_version.as_deref()))
        .bind(col(|w| w.attributes.as_deref()))
        .bind(head.map(|w| w.executor_id.as_str()))
        .bind(head.and_then(|w| w.app_name.as_deref()))
}

/// Binds a lone request's values and the identity of `cte`, for `SINGLE`.
fn bind_single<'q>(q: Stmt<'q>, w: &'q NewWorkflow) -> Stmt<'q> {
    q.bind(&w.id)
        .bind(&w.name)
        .bind(w.owner.as_deref())
        .bind(&w.inputs)
        .bind(w.status())
        .bind(w.queue.as_deref())
        .bind(w.priority)
        .bind(w.dedup_id.as_deref())
        .bind(w.partition_key.as_deref())
        .bind(w.delay_until)
        .bind(w.created_at)
        .bind(w.timeout_ms)
        .bind(w.deadline)
        .bind(w.parent.as_deref())
        .bind(w.app_version.as_deref())
        .bind(w.attributes.as_deref())
        .bind(w.executor_id.as_str())
        .bind(w.app_name.as_deref())
}

/// Creates the batch's rows; one outcome per request, in order. A batch carrying a
/// signal-with-start message runs in one transaction with the messages it delivers.
pub(super) async fn run(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&NewWorkflow],
) -> Result<Vec<StartOutcome>, DbError> {
    if batch.iter().all(|w| w.message.is_none()) {
        return create(sql, conn, batch).await;
    }
    let mut tx = conn.begin().await?;
    let outcomes = create(sql, &mut tx, batch).await?;
    let messages: Vec<&OutgoingMessage> = batch
        .iter()
        .zip(&outcomes)
        .filter(|(w, outcome)| w.delivers_message(outcome))
        .filter_map(|(w, _)| w.message.as_deref())
        .collect();
    ops::send_on(sql, &mut tx, &messages).await?;
    tx.commit().await?;
    Ok(outcomes)
}

/// Creates the batch's rows (one statement, or two when a key was taken meanwhile).
async fn create(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&NewWorkflow],
) -> Result<Vec<StartOutcome>, DbError> {
    let mut found = outcomes(batch, answer(sql, conn, batch).await?)?;
    // A start whose key another transaction inserted meanwhile waited for that commit and did
    // nothing, but its statement's snapshot predates the row: asked again, the row is there.
    let again: Vec<usize> = (0..batch.len()).filter(|&i| found[i].is_none()).collect();
    if !again.is_empty() {
        let retried: Vec<&NewWorkflow> = again.iter().map(|&i| batch[i]).collect();
        let answers = outcomes(&retried, answer(sql, conn, &retried).await?)?;
        for (i, outcome) in again.into_iter().zip(answers) {
            found[i] = outcome;
        }
    }
    batch
        .iter()
        .zip(found)
        .map(|(w, outcome)| {
            outcome.ok_or_else(|| DbError::Query(format!("start of {} found nothing", w.id)))
        })
        .collect()
}

/// Runs the start statement for `batch`: its result rows, in request order.
async fn answer(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&NewWorkflow],
) -> Result<Vec<StartRow>, DbError> {
    let query = match batch {
        [lone] => bind_single(sql.query(sql.dialect(&SINGLE, &CITUS_SINGLE)), lone),
        _ => bind(sql.query(sql.dialect(&STATEMENT, &CITUS)), batch),
    };
    let mut rows = Vec::with_capacity(batch.len());
    for row in query.fetch_all(&mut *conn).await? {
        let n: i64 = row.try_get(0)?;
        rows.push((
            n,
            StartRow {
                created: row.try_get(1)?,
                name: row.try_get(2)?,
                status: row.try_get(3)?,
                owner: row.try_get(4)?,
                holder: row.try_get(5)?,
            },
        ));
    }
    rows.sort_by_key(|(n, _)| *n);
    Ok(rows.into_iter().map(|(_, r)| r).collect())
}

/// Outcomes of `batch` from its result rows (in request order); `None` where the statement
/// found neither its row nor the one holding its key.
fn outcomes(
    batch: &[&NewWorkflow],
    rows: Vec<StartRow>,
) -> Result<Vec<Option<StartOutcome>>, DbError> {
    if rows.len() != batch.len() {
        return Err(DbError::Query("a start was not answered".into()));
    }
    let mut outcomes = Vec::with_capacity(batch.len());
    // Later rows of the batch with the key of an earlier one were skipped by the insert and
    // could not see it (a repeated id even reads as created): answer them from the earlier row.
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    let mut by_dedup: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, (w, row)) in batch.iter().zip(rows).enumerate() {
        let ours = w.owner.is_some() && row.owner == w.owner;
        let outcome = if let Some(&f) = by_id.get(w.id.as_str()) {
            if w.owner.is_some() && batch[f].owner == w.owner {
                StartOutcome::Created
            } else {
                StartOutcome::Existing {
                    name: batch[f].name.clone(),
                    status: batch[f].status().into(),
                }
            }
        } else if row.created || ours {
            StartOutcome::Created
        } else if let Some(name) = row.name {
            StartOutcome::Existing {
                name,
                status: row.status.unwrap_or_default(),
            }
        } else if let Some(holder) = row.holder {
            StartOutcome::Duplicate { holder }
        } else if let Some(&f) = w.dedup_key().and_then(|k| by_dedup.get(&k)) {
            StartOutcome::Duplicate {
                holder: batch[f].id.clone(),
            }
        } else {
            outcomes.push(None);
            continue;
        };
        if outcome == StartOutcome::Created {
            by_id.entry(&w.id).or_insert(i);
            if let Some(k) = w.dedup_key() {
                by_dedup.entry(k).or_insert(i);
            }
        }
        outcomes.push(Some(outcome));
    }
    Ok(outcomes)
}

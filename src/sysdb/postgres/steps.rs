//! Step checkpoints on Postgres: the batch in one insert that writes a row only while its
//! workflow is `PENDING` under the writer's owner token (rows it did not write are classified
//! with one more statement); and the batched, paged read of recorded steps.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::LazyLock;

use sqlx::postgres::{PgConnection, PgRow, PgValueFormat};
use sqlx::Row;

use super::exec::Stmt;
use super::rowsource::{self, Column};
use super::sql::Sql;
use crate::error::DbError;
use crate::sysdb::{LoadSteps, Pieces, StepOutcome, StepPage, StepRow, StepWrite, PIECE};

/// Built once per process; `Sql::get` splices the schema in.
static STATEMENT: LazyLock<String> = LazyLock::new(|| statement(&cte(1)));
/// A lone step (`bind_single`): a workflow's steps one after another (W1) skip building and
/// unnesting arrays.
pub(super) static SINGLE: LazyLock<String> =
    LazyLock::new(|| statement(&insert(&rowsource::single(&COLUMNS, 1, false))));

/// The Citus forms of [`STATEMENT`] and [`SINGLE`] (`migrations/postgres/citus.sql`).
pub(super) static CITUS: LazyLock<String> =
    LazyLock::new(|| rowsource::call("stead_checkpoint", &COLUMNS, 1, false, &[]));
static CITUS_SINGLE: LazyLock<String> =
    LazyLock::new(|| rowsource::call("stead_checkpoint", &COLUMNS, 1, true, &[]));

/// The steps' columns (`bind`, `bind_single`).
pub(super) const COLUMNS: [Column; 10] = [
    ("id", "text"),
    ("fid", "int4"),
    ("name", "text"),
    ("output", "text"),
    ("error", "text"),
    ("child", "text"),
    ("started", "int8"),
    ("completed", "int8"),
    ("app", "text"),
    ("owner", "text"),
];

/// The checkpoint statement: the insert, and the keys it wrote.
fn statement(cte: &str) -> String {
    format!("WITH {cte}\nSELECT workflow_uuid, function_id FROM c_ins")
}

/// The insert as a CTE `c_ins`, from ten arrays whose parameters start at `${p}`.
pub(super) fn cte(p: usize) -> String {
    insert(&rowsource::arrays(&COLUMNS, p, false))
}

/// The insert as a CTE `c_ins` of the steps `rows` gives as `r`.
fn insert(rows: &str) -> String {
    format!(
        r#"c_ins AS (
    INSERT INTO {{s}}.operation_outputs AS o (
        workflow_uuid, function_id, function_name, output, error, child_workflow_id,
        started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name)
    SELECT r.id, r.fid, r.name, r.output, r.error, r.child, r.started, r.completed,
        'portable_json', r.app
    FROM {rows}
    CROSS JOIN LATERAL (
        -- LIMIT keeps the status checks out of the lookup: one primary-key probe per row.
        SELECT status, owner_xid FROM {{s}}.workflow_status w
        WHERE w.workflow_uuid = r.id LIMIT 1
    ) w
    WHERE w.status = 'PENDING' AND w.owner_xid = r.owner
    ON CONFLICT (workflow_uuid, function_id) DO NOTHING
    RETURNING o.workflow_uuid, o.function_id
)"#
    )
}

/// Binds a lone step's values, for `SINGLE`.
fn bind_single<'q>(q: Stmt<'q>, s: &'q StepWrite) -> Stmt<'q> {
    q.bind(s.workflow_id.as_str())
        .bind(s.function_id as i32)
        .bind(s.name.as_str())
        .bind(s.output.as_deref())
        .bind(s.error.as_deref())
        .bind(s.child_workflow_id.as_deref())
        .bind(s.started_at)
        .bind(s.completed_at)
        .bind(s.app_name.as_deref())
        .bind(s.owner.as_str())
}

/// Binds the ten arrays of `cte`.
pub(super) fn bind<'q>(q: Stmt<'q>, batch: &[&'q StepWrite]) -> Stmt<'q> {
    q.bind(
        batch
            .iter()
            .map(|s| s.workflow_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        batch
            .iter()
            .map(|s| s.function_id as i32)
            .collect::<Vec<_>>(),
    )
    .bind(batch.iter().map(|s| s.name.as_str()).collect::<Vec<_>>())
    .bind(
        batch
            .iter()
            .map(|s| s.output.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(batch.iter().map(|s| s.error.as_deref()).collect::<Vec<_>>())
    .bind(
        batch
            .iter()
            .map(|s| s.child_workflow_id.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(batch.iter().map(|s| s.started_at).collect::<Vec<_>>())
    .bind(batch.iter().map(|s| s.completed_at).collect::<Vec<_>>())
    .bind(
        batch
            .iter()
            .map(|s| s.app_name.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(batch.iter().map(|s| s.owner.as_str()).collect::<Vec<_>>())
}

/// A recorded row counts as the writer's own only while the workflow is `PENDING` under its
/// owner token: a stale run (adopted, resumed elsewhere) never takes another run's record.
const CLASSIFY: &str = r#"
SELECT r.id, r.fid, o.function_name, o.output, o.error, w.status,
    COALESCE(w.status = 'PENDING' AND w.owner_xid = r.owner, false), o.serialization
FROM UNNEST($1::text[], $2::int4[], $3::text[]) WITH ORDINALITY AS r(id, fid, owner, n)
LEFT JOIN {s}.operation_outputs o ON o.workflow_uuid = r.id AND o.function_id = r.fid
LEFT JOIN {s}.workflow_status w ON w.workflow_uuid = r.id
ORDER BY r.n
"#;

/// Records the batch; one outcome per request, in order.
pub(super) async fn record(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&StepWrite],
) -> Result<Vec<StepOutcome>, DbError> {
    let query = match batch {
        [lone] => bind_single(sql.query(sql.dialect(&SINGLE, &CITUS_SINGLE)), lone),
        _ => bind(sql.query(sql.dialect(&STATEMENT, &CITUS)), batch),
    };
    let rows = query.fetch_all(&mut *conn).await?;
    // The insert returns one row per row it wrote: all of them is the common case, with no
    // set of keys to build.
    if rows.len() == batch.len() {
        return Ok(vec![StepOutcome::Recorded; batch.len()]);
    }
    let mut written = HashSet::with_capacity(rows.len());
    for row in rows {
        written.insert((row.try_get::<String, _>(0)?, row.try_get::<i32, _>(1)?));
    }
    outcomes(sql, conn, batch, &written).await
}

/// Outcomes of `batch` given the `(workflow, function id)` rows the insert wrote; the rare rows
/// it did not write are classified with one more statement.
async fn outcomes(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&StepWrite],
    written: &HashSet<(String, i32)>,
) -> Result<Vec<StepOutcome>, DbError> {
    let mut outcomes = vec![StepOutcome::Recorded; batch.len()];
    let missing: Vec<usize> = (0..batch.len())
        .filter(|&i| {
            !written.contains(&(batch[i].workflow_id.clone(), batch[i].function_id as i32))
        })
        .collect();
    if missing.is_empty() {
        return Ok(outcomes);
    }
    let rows = sql
        .query(CLASSIFY)
        .bind(
            missing
                .iter()
                .map(|&i| batch[i].workflow_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            missing
                .iter()
                .map(|&i| batch[i].function_id as i32)
                .collect::<Vec<_>>(),
        )
        .bind(
            missing
                .iter()
                .map(|&i| batch[i].owner.as_str())
                .collect::<Vec<_>>(),
        )
        .fetch_all(&mut *conn)
        .await?;
    for (&i, row) in missing.iter().zip(rows) {
        let recorded_name: Option<String> = row.try_get(2)?;
        let status: Option<String> = row.try_get(5)?;
        let own: bool = row.try_get(6)?;
        outcomes[i] = match recorded_name {
            Some(name) if own && name == batch[i].name => StepOutcome::AlreadyRecorded {
                output: row.try_get(3)?,
                error: row.try_get(4)?,
                serialization: row.try_get(7)?,
            },
            _ if status.as_deref() == Some("CANCELLED") => StepOutcome::Cancelled,
            _ => StepOutcome::NotOwner,
        };
    }
    Ok(outcomes)
}

/// Why the call `function_id` of `workflow_id` (named `name`), written under `owner`, was not
/// written.
pub(super) async fn classify_one(
    sql: &Sql,
    conn: &mut PgConnection,
    workflow_id: &str,
    owner: &str,
    function_id: u32,
    name: &str,
) -> Result<StepOutcome, DbError> {
    let probe = StepWrite {
        workflow_id: workflow_id.to_owned(),
        owner: owner.to_owned(),
        function_id,
        name: name.to_owned(),
        output: None,
        error: None,
        child_workflow_id: None,
        started_at: 0,
        completed_at: 0,
        app_name: None,
    };
    let mut outcomes = outcomes(sql, conn, &[&probe], &HashSet::new()).await?;
    outcomes
        .pop()
        .ok_or_else(|| DbError::Query("a call was not classified".into()))
}

/// A sized page per request (`LoadSteps`): the rows after `after`, by the primary key, with a
/// row's payloads only while the payload bytes before it stay under the budget. Neither page
/// statement sorts its answer: the sort copied every row and was half of a 500-row page's
/// execution (0.3 of 0.57 ms); `StepPage::new` puts the rows in order. The sizes come
/// from `octet_length`, which reads a stored value's size without detoasting it, so an output
/// past the budget is never read (the window carries toast pointers, not values; joining the
/// rows back by key, as SQLite must, measured slower for W7, on a loaded machine).
pub(super) static LOAD: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
SELECT o.function_id, o.function_name,
       CASE WHEN o.before < r.budget AND o.osize <= $5 THEN o.output END AS output,
       CASE WHEN o.before < r.budget THEN o.error END AS error,
       o.child_workflow_id, o.serialization, o.before < r.budget AS loaded, r.i, o.osize
FROM unnest($1::text[], $2::int4[], $3::int4[], $4::int8[])
     WITH ORDINALITY AS r(id, after, lim, budget, i)
CROSS JOIN LATERAL (
    SELECT p.*, coalesce(sum(p.size) OVER (ORDER BY p.function_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
    FROM ({RANGE}) p
) o"#
    )
});

/// An unsized page (`LoadSteps::sized` false): a row's payloads when they are at most the
/// request's per-row share, or when it is the page's first row (`f.first`, one probe of the key).
/// No running sum: a plain range of the primary key, 0.74 ms for 500 small rows against `LOAD`'s
/// 1.3 ms (W7, 2026-12-05).
static LOAD_UNSIZED: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
SELECT o.function_id, o.function_name,
       CASE WHEN (o.size <= r.per_row OR o.function_id = f.first) AND o.osize <= $5
            THEN o.output END AS output,
       CASE WHEN o.size <= r.per_row OR o.function_id = f.first THEN o.error END AS error,
       o.child_workflow_id, o.serialization, o.size <= r.per_row OR o.function_id = f.first, r.i,
       o.osize
FROM unnest($1::text[], $2::int4[], $3::int4[], $4::int8[])
     WITH ORDINALITY AS r(id, after, lim, per_row, i)
CROSS JOIN LATERAL (
    SELECT min(function_id) AS first FROM {{s}}.operation_outputs
    WHERE workflow_uuid = r.id AND function_id > r.after
) f
CROSS JOIN LATERAL ({RANGE}) o"#
    )
});

/// A request's rows with their payload sizes, by the primary key.
const RANGE: &str = "
    SELECT function_id, function_name, output, error, child_workflow_id,
           serialization, coalesce(octet_length(output), 0) AS osize,
           coalesce(octet_length(output), 0) + coalesce(octet_length(error), 0) AS size
    FROM {s}.operation_outputs
    WHERE workflow_uuid = r.id AND function_id > r.after
    ORDER BY function_id
    LIMIT r.lim";

/// An output's pieces (`PIECE` bytes, `$3`), each with its offset and the whole's size. The
/// value is detoasted and converted once (the subquery, kept apart by `OFFSET 0`, is the outer
/// side of the lateral join), each piece a cheap slice of it; no `ORDER BY`, which would sort the
/// whole value (spilling past `work_mem`): pieces are placed by offset (`Pieces`).
const PIECES: &str = "
SELECT octet_length(o.b), p.at, substring(o.b FROM p.at FOR $3)
FROM (SELECT convert_to(output, 'UTF8') AS b FROM {s}.operation_outputs
      WHERE workflow_uuid = $1 AND function_id = $2 OFFSET 0) o
CROSS JOIN LATERAL generate_series(1, octet_length(o.b), $3) AS p(at)";

/// The output recorded at `function_id`, read in pieces, each handed on as it arrives.
async fn read_pieces(
    sql: &Sql,
    conn: &mut PgConnection,
    workflow_id: &str,
    function_id: u32,
) -> Result<String, DbError> {
    let mut pieces = Pieces::default();
    let piece = i32::try_from(PIECE).unwrap_or(i32::MAX);
    sql.query(PIECES)
        .bind(workflow_id)
        .bind(clamp(function_id))
        .bind(piece)
        .fetch_each(&mut *conn, |row| {
            let total = usize::try_from(row.try_get::<i32, _>(0)?).unwrap_or(0);
            let at = usize::try_from(row.try_get::<i32, _>(1)? - 1).unwrap_or(usize::MAX);
            pieces.put(total, at, &piece_of(&row)?)
        })
        .await?;
    pieces.finish()
}

/// A piece's bytes: borrowed from the row when they came in binary (a prepared statement), else
/// decoded from their text form (an inline statement's answer is text).
fn piece_of(row: &PgRow) -> Result<Cow<'_, [u8]>, sqlx::Error> {
    match row.try_get_raw(2)?.format() {
        PgValueFormat::Binary => row.try_get::<&[u8], _>(2).map(Cow::Borrowed),
        PgValueFormat::Text => row.try_get::<Vec<u8>, _>(2).map(Cow::Owned),
    }
}

/// One page of recorded steps per request: one statement for the sized requests, one for the
/// others; then each output longer than `PIECE` of the rows read with their payloads, in pieces.
pub(super) async fn load(
    sql: &Sql,
    conn: &mut PgConnection,
    pages: &[&LoadSteps],
) -> Result<Vec<StepPage>, DbError> {
    let mut found: Vec<Vec<(StepRow, bool)>> = vec![Vec::new(); pages.len()];
    // Rows whose output is read in pieces: (page, call number).
    let mut longs: Vec<(usize, u32)> = Vec::new();
    let piece = i32::try_from(PIECE).unwrap_or(i32::MAX);
    for sized in [false, true] {
        let group: Vec<usize> = (0..pages.len())
            .filter(|&i| pages[i].sized == sized)
            .collect();
        if group.is_empty() {
            continue;
        }
        let requests: Vec<&LoadSteps> = group.iter().map(|&i| pages[i]).collect();
        let ids: Vec<&str> = requests.iter().map(|p| p.workflow_id.as_str()).collect();
        let after: Vec<i32> = requests.iter().map(|p| clamp(p.after)).collect();
        let rows: Vec<i32> = requests.iter().map(|p| clamp(p.rows)).collect();
        // The page's budget when sized, else each row's share of it.
        let bytes: Vec<i64> = requests
            .iter()
            .map(|p| if sized { p.bytes } else { p.per_row() })
            .map(|b| i64::try_from(b).unwrap_or(i64::MAX))
            .collect();
        let statement: &'static str = if sized { &LOAD } else { &LOAD_UNSIZED };
        let query = sql
            .query(statement)
            .bind(ids)
            .bind(after)
            .bind(rows)
            .bind(bytes)
            .bind(piece);
        // Each row is decoded as it arrives, while the server sends the next.
        query
            .fetch_each(&mut *conn, |row| {
                let i: i64 = row.try_get(7)?;
                let loaded: bool = row.try_get(6)?;
                let long = loaded && row.try_get::<i32, _>(8)? > piece;
                let page = usize::try_from(i - 1)
                    .ok()
                    .and_then(|i| group.get(i).copied())
                    .filter(|&page| page < found.len())
                    .ok_or_else(|| DbError::Query("a page answered no request".into()))?;
                let step = StepRow::from_row(&row)?;
                if long {
                    longs.push((page, step.function_id));
                }
                found[page].push((step, loaded));
                Ok::<_, DbError>(())
            })
            .await?;
    }
    for (page, function_id) in longs {
        let mut rows = found.get_mut(page).into_iter().flatten();
        if let Some((row, _)) = rows.find(|(r, _)| r.function_id == function_id) {
            row.output = Some(
                read_pieces(sql, conn, &pages[page].workflow_id, row.function_id)
                    .await?
                    .into(),
            );
        }
    }
    Ok(pages
        .iter()
        .zip(found)
        .map(|(request, rows)| StepPage::new(request, rows))
        .collect())
}

/// A call number as the column's type (numbers past `i32::MAX` are never recorded).
fn clamp(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

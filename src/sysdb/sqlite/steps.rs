//! Step checkpoints on SQLite, written only while the workflow is `PENDING` under the writer's
//! owner token, and the paged read of a workflow's recorded steps.

use std::sync::LazyLock;

use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Row};

use crate::base::codec::PORTABLE_JSON;
use crate::error::DbError;
use crate::sysdb::{LoadSteps, StepOutcome, StepPage, StepRow, StepWrite};

const RECORD: &str = r#"
INSERT INTO operation_outputs (
    workflow_uuid, function_id, function_name, output, error, child_workflow_id,
    started_at_epoch_ms, completed_at_epoch_ms, serialization, application_name,
    retention_timestamp)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?8
FROM workflow_status w
WHERE w.workflow_uuid = ?1 AND w.status = 'PENDING' AND w.owner_xid = ?11
ON CONFLICT (workflow_uuid, function_id) DO NOTHING
"#;

/// Records the batch; one outcome per request, in order.
pub(super) async fn record(
    tx: &mut SqliteConnection,
    batch: &[&StepWrite],
) -> Result<Vec<StepOutcome>, DbError> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for s in batch {
        let written = sqlx::query(RECORD)
            .bind(&s.workflow_id)
            .bind(s.function_id as i64)
            .bind(&s.name)
            .bind(&s.output)
            .bind(&s.error)
            .bind(&s.child_workflow_id)
            .bind(s.started_at)
            .bind(s.completed_at)
            .bind(PORTABLE_JSON)
            .bind(&s.app_name)
            .bind(&s.owner)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        outcomes.push(if written {
            StepOutcome::Recorded
        } else {
            classify(tx, &s.workflow_id, &s.owner, s.function_id, &s.name).await?
        });
    }
    Ok(outcomes)
}

/// Why the call `function_id` of `workflow_id` (named `name`), written under `owner`, was not
/// written. A recorded row counts as the writer's own only while the workflow is `PENDING`
/// under its owner token: a stale run (adopted, resumed elsewhere) never takes another's record.
pub(super) async fn classify(
    tx: &mut SqliteConnection,
    workflow_id: &str,
    owner: &str,
    function_id: u32,
    name: &str,
) -> Result<StepOutcome, DbError> {
    let recorded = sqlx::query(
        "SELECT o.function_name, o.output, o.error, o.serialization FROM operation_outputs o \
         JOIN workflow_status w ON w.workflow_uuid = o.workflow_uuid \
         WHERE o.workflow_uuid = ?1 AND o.function_id = ?2 \
           AND w.status = 'PENDING' AND w.owner_xid = ?3",
    )
    .bind(workflow_id)
    .bind(function_id as i64)
    .bind(owner)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(row) = recorded {
        if row.try_get::<String, _>(0)? == name {
            return Ok(StepOutcome::AlreadyRecorded {
                output: row.try_get(1)?,
                error: row.try_get(2)?,
                serialization: row.try_get(3)?,
            });
        }
    }
    let status: Option<Option<String>> =
        sqlx::query_scalar("SELECT status FROM workflow_status WHERE workflow_uuid = ?1")
            .bind(workflow_id)
            .fetch_optional(&mut *tx)
            .await?;
    Ok(match status.flatten().as_deref() {
        Some("CANCELLED") => StepOutcome::Cancelled,
        _ => StepOutcome::NotOwner,
    })
}

/// One sized page of a workflow's recorded steps (`LoadSteps`): payloads only while the payload
/// bytes before a row stay under the budget. The running sum is over sizes alone and the rows
/// are joined back by key: a window over the rows themselves would hold every output of the
/// page in SQLite's memory, which is this process's (2 GB for W8's page of 10 MB outputs).
/// A row past the prefix reads no column stored after `output` either: reaching one walks the
/// output's whole overflow chain (2,560 page reads for 10 MB), which made each page of W8 read
/// half its history (13 million `pread`s, 0.15 s a step). No `ORDER BY`: SQLite sorted the rows
/// in a temporary b-tree, one more copy of each output; `StepPage::new` puts the rows in order.
const LOAD: &str = r#"
SELECT o.function_id, o.function_name,
       CASE WHEN p.before < ?4 THEN o.output END AS output,
       CASE WHEN p.before < ?4 THEN o.error END AS error,
       CASE WHEN p.before < ?4 THEN o.child_workflow_id END,
       CASE WHEN p.before < ?4 THEN o.serialization END, p.before < ?4 AS loaded
FROM (
    SELECT function_id, coalesce(sum(size) OVER (ORDER BY function_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
    FROM (
        SELECT function_id,
               coalesce(octet_length(output), 0) + coalesce(octet_length(error), 0) AS size
        FROM operation_outputs
        WHERE workflow_uuid = ?1 AND function_id > ?2
        ORDER BY function_id
        LIMIT CAST(?3 AS INTEGER)
    )
) p
JOIN operation_outputs o ON o.workflow_uuid = ?1 AND o.function_id = p.function_id
"#;

/// An unsized page (`LoadSteps::sized` false): a row's payloads when they are at most the
/// per-row share (`?4`), or when it is the page's first row. One range of the primary key, in
/// its order, with no running sum and no join: 1.4 ms for 500 small rows against `LOAD`'s 2.5 ms
/// (W7's history, 2026-12-06). As in `LOAD`, a row not loaded reads no column past `output`
/// (its size comes from the record header).
static LOAD_UNSIZED: LazyLock<String> = LazyLock::new(|| {
    let loaded = format!("({FITS} OR function_id = {FIRST})");
    format!(
        "SELECT function_id, function_name, \
                CASE WHEN {loaded} THEN output END, CASE WHEN {loaded} THEN error END, \
                CASE WHEN {loaded} THEN child_workflow_id END, \
                CASE WHEN {loaded} THEN serialization END, {loaded} \
         FROM operation_outputs WHERE workflow_uuid = ?1 AND function_id > ?2 \
         ORDER BY function_id LIMIT CAST(?3 AS INTEGER)"
    )
});

/// A row's payloads are within the per-row share (`?4`).
const FITS: &str = "coalesce(octet_length(output), 0) + coalesce(octet_length(error), 0) <= ?4";
/// The page's first row.
const FIRST: &str =
    "(SELECT min(function_id) FROM operation_outputs WHERE workflow_uuid = ?1 AND function_id > ?2)";

/// [`LOAD_UNSIZED`] as one row, a JSON array of `[function_id, name, output, error, child,
/// serialization, fits]`, for shares up to [`JSON_SHARE`]: the driver hands rows over one at a
/// time, copying each column, which cost more than replaying the step (2.8 µs a row). A first
/// row past its share comes without payloads; it is read on its own, and held in its row.
static LOAD_UNSIZED_JSON: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT json_group_array(json_array(function_id, function_name, o, e, c, s, fits)) \
         FROM (SELECT function_id, function_name, CASE WHEN {FITS} THEN output END AS o, \
                      CASE WHEN {FITS} THEN error END AS e, \
                      CASE WHEN {FITS} THEN child_workflow_id END AS c, \
                      CASE WHEN {FITS} THEN serialization END AS s, {FITS} AS fits \
               FROM operation_outputs WHERE workflow_uuid = ?1 AND function_id > ?2 \
               ORDER BY function_id LIMIT CAST(?3 AS INTEGER))"
    )
});

/// The largest per-row share read as JSON: past it a page's outputs are long enough that a
/// second (escaped) copy would matter more than the driver's per-row cost.
const JSON_SHARE: u64 = 64 << 10;

/// One row of [`LOAD_UNSIZED_JSON`].
type JsonRow = (
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

/// One page of recorded steps.
async fn load(conn: &mut SqliteConnection, page: &LoadSteps) -> Result<StepPage, DbError> {
    let found = match page.sized {
        true => load_rows(conn, page, LOAD, page.bytes).await?,
        false if page.per_row() <= JSON_SHARE => load_json(conn, page).await?,
        false => load_rows(conn, page, &LOAD_UNSIZED, page.per_row()).await?,
    };
    Ok(StepPage::new(page, found))
}

/// A page read by `statement`, a row at a time, with whether each row's payloads were read (put
/// in order by `StepPage::new`).
async fn load_rows(
    conn: &mut SqliteConnection,
    page: &LoadSteps,
    statement: &str,
    budget: u64,
) -> Result<Vec<(StepRow, bool)>, DbError> {
    let rows = sqlx::query(AssertSqlSafe(statement))
        .bind(&page.workflow_id)
        .bind(i64::from(page.after))
        .bind(i64::from(page.rows))
        .bind(i64::try_from(budget).unwrap_or(i64::MAX))
        .fetch_all(&mut *conn)
        .await?;
    let mut found = Vec::with_capacity(rows.len());
    // A long output stays in its driver row, read in place when replayed: never a second copy.
    for row in rows {
        let loaded = row.try_get::<bool, _>(6)?;
        found.push((StepRow::from_sqlite(row)?, loaded));
    }
    Ok(found)
}

/// An unsized page read as one JSON row ([`LOAD_UNSIZED_JSON`]).
async fn load_json(
    conn: &mut SqliteConnection,
    page: &LoadSteps,
) -> Result<Vec<(StepRow, bool)>, DbError> {
    let json: String = sqlx::query_scalar(AssertSqlSafe(LOAD_UNSIZED_JSON.as_str()))
        .bind(&page.workflow_id)
        .bind(i64::from(page.after))
        .bind(i64::from(page.rows))
        .bind(i64::try_from(page.per_row()).unwrap_or(i64::MAX))
        .fetch_one(&mut *conn)
        .await?;
    let rows: Vec<JsonRow> = serde_json::from_str(&json).map_err(|e| {
        DbError::Query(format!(
            "a page of {}'s steps read as JSON: {e}",
            page.workflow_id
        ))
    })?;
    let mut found = Vec::with_capacity(rows.len());
    for (function_id, name, output, error, child_workflow_id, serialization, fits) in rows {
        let fits = fits != 0;
        if found.is_empty() && !fits {
            let first = LoadSteps {
                rows: 1,
                ..page.clone()
            };
            found.extend(load_rows(conn, &first, &LOAD_UNSIZED, 0).await?);
            continue;
        }
        let function_id = u32::try_from(function_id)
            .map_err(|_| DbError::Query(format!("a step numbered {function_id}")))?;
        let row = StepRow {
            function_id,
            name,
            output: output.map(Into::into),
            error,
            child_workflow_id,
            serialization,
        };
        found.push((row, fits));
    }
    Ok(found)
}

/// One page of recorded steps per request.
pub(super) async fn load_all(
    tx: &mut SqliteConnection,
    pages: &[&LoadSteps],
) -> Result<Vec<StepPage>, DbError> {
    let mut out = Vec::with_capacity(pages.len());
    for page in pages {
        out.push(load(tx, page).await?);
    }
    Ok(out)
}

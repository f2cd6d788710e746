//! Workflow outcomes on Postgres: the batch in one statement that updates each status row still
//! `PENDING` under the writer's owner token and writes its payload (and the held-back last steps
//! some carry); the others are classified with one more statement.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::exec::Stmt;
use super::sql::Sql;
use super::steps;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::{FinishOutcome, FinishWrite, StepWrite};

/// Built once per process; `Sql::get` splices the schema in.
pub(super) static STATEMENT: LazyLock<String> = LazyLock::new(statement);
static WITH_STEPS: LazyLock<String> = LazyLock::new(with_steps);

/// The finish statement: the update (with the payload), and the workflows it changed.
fn statement() -> String {
    format!("WITH {}\n{RESULT}", cte(1, ""))
}

/// The workflows the update changed; the scalar subquery makes `f_child` run.
const RESULT: &str = "SELECT workflow_uuid, (SELECT count(*) FROM f_child) FROM f_upd";

/// The finish statement for a batch carrying held-back steps: their insert (`c_ins`, from
/// parameter 7) first; a workflow whose step is not written now is not finished either.
fn with_steps() -> String {
    let guard = "AND (r.id <> ALL($7::text[])
           OR EXISTS (SELECT 1 FROM c_ins c WHERE c.workflow_uuid = r.id))";
    format!("WITH {},\n{}\n{RESULT}", steps::cte(7), cte(1, guard))
}

/// The update, the children's announcements and the payload row's update as CTEs
/// `f_upd`/`f_child`/`f_out`; parameters start at `${p}` (five
/// arrays, then the time); `guard` is one more condition on the update.
fn cte(p: usize, guard: &str) -> String {
    let a = |i: usize| format!("${}", p + i);
    format!(
        r#"fr AS (
    SELECT * FROM UNNEST({}::text[], {}::text[], {}::text[], {}::text[], {}::text[])
        AS r(id, owner, status, output, error)
), f_upd AS (
    UPDATE {{s}}.workflow_status w
    SET status = r.status, owner_xid = NULL, deduplication_id = NULL,
        completed_at = {now}, updated_at = {now},
        -- The outcome goes in the row itself (`sysdb::finish`, "Where the outcome goes").
        output = CASE WHEN r.status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
            THEN w.output ELSE r.output END,
        error = CASE WHEN r.status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
            THEN w.error ELSE r.error END,
        -- Parked as DBOS dead-letters: off its queue, out of rate-limit windows.
        started_at_epoch_ms = CASE WHEN r.status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
            THEN NULL ELSE w.started_at_epoch_ms END,
        queue_name = CASE WHEN r.status = 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
            THEN NULL ELSE w.queue_name END
    FROM fr r
    -- Not `status = 'PENDING'`: that would let the partial index of PENDING rows drive the
    -- join, a scan of every running workflow per batch. This form leaves only the primary key.
    WHERE w.workflow_uuid = r.id AND w.status IS NOT DISTINCT FROM 'PENDING'
      AND w.owner_xid = r.owner {guard}
    RETURNING w.workflow_uuid, w.parent_workflow_id
), f_child AS (
    -- A child's end wakes its parent wherever it waits (`sysdb::CHILD_CHANNEL`).
    SELECT pg_notify('stead_child_channel', workflow_uuid)::text FROM f_upd
    WHERE parent_workflow_id IS NOT NULL
), f_out AS (
    -- A payload row an earlier run left (DBOS writes one) would shadow the new outcome.
    UPDATE {{s}}.workflow_output o SET output = r.output, error = r.error
    FROM fr r JOIN f_upd ON f_upd.workflow_uuid = r.id
    WHERE o.workflow_uuid = r.id AND r.status <> 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
)"#,
        a(0),
        a(1),
        a(2),
        a(3),
        a(4),
        now = format!("{}::int8", a(5))
    )
}

/// Binds the five arrays and the time of `cte`.
fn bind<'q>(q: Stmt<'q>, batch: &[&'q FinishWrite], now: i64) -> Stmt<'q> {
    q.bind(
        batch
            .iter()
            .map(|f| f.workflow_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(batch.iter().map(|f| f.owner.as_str()).collect::<Vec<_>>())
    .bind(batch.iter().map(|f| f.status).collect::<Vec<_>>())
    .bind(
        batch
            .iter()
            .map(|f| f.output.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(batch.iter().map(|f| f.error.as_deref()).collect::<Vec<_>>())
    .bind(now)
}

const CLASSIFY: &str = r#"
SELECT workflow_uuid, status, owner_xid FROM {s}.workflow_status
WHERE workflow_uuid = ANY($1::text[])
"#;

/// Finishes the batch; one outcome per request, in order.
pub(super) async fn run(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&FinishWrite],
) -> Result<Vec<FinishOutcome>, DbError> {
    let held: Vec<&StepWrite> = batch.iter().filter_map(|f| f.step.as_ref()).collect();
    if sql.is_citus() && !held.is_empty() {
        return run_citus(sql, conn, batch, &held).await;
    }
    let query = if held.is_empty() {
        bind(sql.query(&STATEMENT), batch, now_ms())
    } else {
        let query = bind(sql.query(&WITH_STEPS), batch, now_ms());
        steps::bind(query, &held)
    };
    let updated: HashSet<String> = query
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    outcomes(sql, conn, batch, &updated).await
}

/// On Citus, the held steps first (their own statement: Citus cannot run an insert and an update
/// as one), then the outcomes of the workflows whose step was written now; the others are left
/// for `outcomes` to classify, as the one statement leaves them (a step recorded before, by an
/// attempt cut off before its outcome, is a `StepConflict`: the run replays it).
async fn run_citus(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&FinishWrite],
    held: &[&StepWrite],
) -> Result<Vec<FinishOutcome>, DbError> {
    let written = steps::record(sql, conn, held).await?;
    let blocked: HashSet<&str> = held
        .iter()
        .zip(&written)
        .filter(|(_, o)| !matches!(o, crate::sysdb::StepOutcome::Recorded))
        .map(|(s, _)| s.workflow_id.as_str())
        .collect();
    let go: Vec<&FinishWrite> = batch
        .iter()
        .copied()
        .filter(|f| !blocked.contains(f.workflow_id.as_str()))
        .collect();
    let updated: HashSet<String> = if go.is_empty() {
        HashSet::new()
    } else {
        bind(sql.query(&STATEMENT), &go, now_ms())
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?
    };
    outcomes(sql, conn, batch, &updated).await
}

/// Outcomes of `batch` given the workflows the update changed; the rare others are classified
/// with one more statement.
async fn outcomes(
    sql: &Sql,
    conn: &mut PgConnection,
    batch: &[&FinishWrite],
    updated: &HashSet<String>,
) -> Result<Vec<FinishOutcome>, DbError> {
    let missing: Vec<&str> = batch
        .iter()
        .map(|f| f.workflow_id.as_str())
        .filter(|id| !updated.contains(*id))
        .collect();
    if missing.is_empty() {
        return Ok(vec![FinishOutcome::Finished; batch.len()]);
    }
    type Found = (Option<String>, Option<String>);
    let status: HashMap<String, Found> = sql
        .query(CLASSIFY)
        .bind(&missing)
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|row| Ok((row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?))))
        .collect::<Result<_, sqlx::Error>>()?;
    Ok(batch
        .iter()
        .map(|f| {
            if updated.contains(&f.workflow_id) {
                return FinishOutcome::Finished;
            }
            let (state, owner) = status.get(&f.workflow_id).cloned().unwrap_or_default();
            match state.as_deref() {
                Some("CANCELLED") => FinishOutcome::Cancelled,
                // Already final with no owner: an earlier attempt of this write landed before
                // the connection dropped.
                Some(s) if s == f.status => FinishOutcome::Finished,
                // Still ours: only the step it carried can have held it back.
                Some("PENDING") if owner.as_deref() == Some(&f.owner) && f.step.is_some() => {
                    FinishOutcome::StepConflict
                }
                _ => FinishOutcome::NotOwner,
            }
        })
        .collect())
}

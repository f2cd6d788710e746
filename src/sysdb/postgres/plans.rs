//! Plan tests: statements that would scan the whole history if rewritten carelessly are
//! EXPLAINed on a small migrated schema with sequential scans disabled, and must name the
//! index that keeps them flat on a million-row history (`benches/README.md`, "Growth").
//!
//! **Plans on a long history (W5).** Every statement the runtime and the client run on the big
//! tables was EXPLAINed with 1,000,000 finished workflows (10 steps each) present. Everything on
//! the hot path (claims, recovery, fleet probes, cancel checks, dedup, finish, steps) is driven by
//! DBOS's partial indexes over in-flight rows or by primary keys, so history costs it nothing.
//! Fixed: statements whose `status IN (...)` list spans two partial indexes (listing queued work,
//! deleting a queue) say `status IN ('ENQUEUED', 'PENDING') OR status = 'DELAYED'`, which the
//! planner serves with both indexes (187 ms → 0.1 ms); retention by count deletes below a cutoff
//! row (`sysdb::retention`); the claim's `seen` probe is ordered like the in-flight index
//! (unordered, a planner with stale statistics chose a heap scan that passed every row claimed
//! since: 150 ms → 4.5 ms); the claim updates its candidates by an array of ids
//! (`postgres/claim.rs`); the claim's "has it recorded steps" check is a key probe per claimed row
//! (as an `EXISTS` planned generically on small tables it read every step row per claim: 10 ms at
//! 15,000 step rows). No stead-owned index: the remaining scans are a listing or count filtered by
//! workflow name with few matches and the unfiltered per-status count (`/api/counts`, 312 ms at
//! 1,000,000), which DBOS's schema cannot serve without an index on every finished row that each
//! insert would pay for.

use sqlx::{Connection, PgConnection, Row};

use super::migrate::migrate_pg;
use super::sql::{PgQuery, Sql};
use crate::sysdb::suite::TestDb;

/// The plan of `q` (text format, one line per node) on a connection without seq scans.
async fn plan(conn: &mut PgConnection, q: PgQuery<'_>) -> String {
    let rows = q.fetch_all(&mut *conn).await.unwrap();
    rows.iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn migrated() -> (TestDb, PgConnection, Sql) {
    let db = TestDb::new().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    migrate_pg(&mut conn, "dbos", false).await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut conn)
        .await
        .unwrap();
    (db, conn, Sql::new("dbos", None))
}

/// The plan a lane would run `template` with: prepared with `types`, planned generically (as a
/// lane's settings force) on the tables as they are, executed with `args`.
async fn generic_plan(
    conn: &mut PgConnection,
    sql: &Sql,
    template: &'static str,
    types: &str,
    args: &str,
) -> String {
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let prepare = format!("PREPARE lane({types}) AS {}", sql.get(template).as_str());
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
        .execute(&mut *conn)
        .await
        .unwrap();
    let explain = format!("EXPLAIN EXECUTE lane({args})");
    plan(conn, sqlx::query(sqlx::AssertSqlSafe(explain))).await
}

fn explain(sql: &Sql, template: &'static str) -> String {
    format!("EXPLAIN {}", sql.get(template).as_str())
}

#[tokio::test]
async fn queue_delete_counts_waiting_rows_through_the_partial_indexes() {
    let (_db, mut conn, sql) = migrated().await;
    let text = explain(&sql, super::queues::DELETE);
    let p = plan(&mut conn, sqlx::query(sqlx::AssertSqlSafe(text)).bind("q")).await;
    assert!(p.contains("idx_workflow_status_in_flight_v2"), "{p}");
    assert!(p.contains("idx_workflow_status_delayed"), "{p}");
}

#[tokio::test]
async fn listing_in_flight_queued_work_uses_the_partial_indexes() {
    let (_db, mut conn, sql) = migrated().await;
    let text = explain(&sql, &super::manage::LIST_DESC);
    let none: Option<String> = None;
    let q = sqlx::query(sqlx::AssertSqlSafe(text))
        .bind(None::<Vec<String>>)
        .bind(None::<Vec<String>>);
    let q = (0..4).fold(q, |q, _| q.bind(none.clone()));
    let q = q.bind(None::<i64>).bind(None::<i64>);
    let q = (0..3).fold(q, |q, _| q.bind(none.clone()));
    let q = q
        .bind(false)
        .bind(true)
        .bind(50i64)
        .bind(0i64)
        .bind(None::<serde_json::Value>);
    let p = plan(&mut conn, q).await;
    assert!(p.contains("idx_workflow_status_in_flight_v2"), "{p}");
    assert!(p.contains("idx_workflow_status_delayed"), "{p}");
}

/// A batch page starts its scan at the cursor (an index condition), so no page rescans the
/// pages before it (`sysdb::batch`), even planned generically on an empty table.
#[tokio::test]
async fn a_batch_page_is_a_range_of_the_created_at_index() {
    let (_db, mut conn, sql) = migrated().await;
    let p = generic_plan(
        &mut conn,
        &sql,
        &super::batch::STATEMENTS[0][0],
        "text[], text[], text, text, text, text, int8, int8, text, text, text, bool, bool, \
         int8, int8, text, int8, text, int8, text",
        "NULL, NULL, 'n', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false, false, 100, 0, \
         NULL, 5, 'w', 0, NULL",
    )
    .await;
    assert!(p.contains("workflow_status_created_at_index"), "{p}");
    assert!(p.contains("Index Cond: (created_at >= $17)"), "{p}");
}

#[tokio::test]
async fn retention_by_count_is_a_range_of_the_created_at_index() {
    let (_db, mut conn, sql) = migrated().await;
    let text = explain(&sql, super::retention::COLLECT);
    let q = sqlx::query(sqlx::AssertSqlSafe(text))
        .bind(None::<i64>)
        .bind(Some(100_000i64))
        .bind(1000i64);
    let p = plan(&mut conn, q).await;
    // The victims are bounded by the cutoff row, not an anti-join against the kept rows.
    assert!(p.contains("Index Cond: (created_at <="), "{p}");
    assert!(!p.contains("hashed SubPlan"), "{p}");
}

/// A lane plans each statement once, generically, usually while the tables are still empty;
/// that plan must still be a key lookup when a hundred thousand workflows are running.
#[tokio::test]
async fn an_op_planned_on_an_empty_table_checks_ownership_by_primary_key() {
    let (_db, mut conn, sql) = migrated().await;
    let p = generic_plan(
        &mut conn,
        &sql,
        &super::ops::OP_RECV,
        "text, text, int4, int8, int8, text, text, bool",
        "'w', 'o', 1, 0, 0, 'app', 't', false",
    )
    .await;
    assert_probes_by_key(&p);
    assert!(!p.contains("in_flight"), "{p}");
}

/// The workflow row is found by its primary key, not by reading the running ones.
fn assert_probes_by_key(p: &str) {
    assert!(p.contains("workflow_status_pkey"), "{p}");
    assert!(!p.contains("idx_workflow_status_pending"), "{p}");
}

/// A lone step's one-row form must not let the `PENDING` index drive its workflow lookup.
#[tokio::test]
async fn a_lone_checkpoint_planned_on_an_empty_table_probes_its_workflow_by_key() {
    let (_db, mut conn, sql) = migrated().await;
    let p = generic_plan(
        &mut conn,
        &sql,
        &super::steps::SINGLE,
        &super::rowsource::types(&super::steps::COLUMNS),
        "'w', 1, 'step', NULL, NULL, NULL, 0, 0, 'app', 'o'",
    )
    .await;
    assert_probes_by_key(&p);
}

/// Each fleet round asks for adoptable and stranded work; with no dead executor (the usual
/// case) that must read no workflow row, however many are running.
#[tokio::test]
async fn a_fleet_round_with_no_dead_executor_reads_no_workflow_row() {
    let (_db, mut conn, sql) = migrated().await;
    let analyze = |template: &'static str| {
        format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {}",
            sql.get(template).as_str()
        )
    };
    let adoptable = sqlx::query(sqlx::AssertSqlSafe(analyze(&super::fleet::ADOPTABLE_SQL)))
        .bind("me")
        .bind("v1")
        .bind("app");
    let stranded =
        sqlx::query(sqlx::AssertSqlSafe(analyze(&super::fleet::STRANDED_SQL))).bind("app");
    for p in [
        plan(&mut conn, adoptable).await,
        plan(&mut conn, stranded).await,
    ] {
        let reads: Vec<&str> = p
            .lines()
            .filter(|l| l.contains("workflow_status"))
            .collect();
        assert!(!reads.is_empty(), "{p}");
        assert!(reads.iter().all(|l| l.contains("never executed")), "{p}");
    }
}

/// The generic plan of an unpartitioned claim of 50.
async fn claim_plan() -> String {
    let (_db, mut conn, sql) = migrated().await;
    let p = generic_plan(
        &mut conn,
        &sql,
        &super::claim::CLAIM,
        "text, text, text, int8, text, int8, int8, int8, int8, text, text, int8, int8, int4, int8, \
         text",
        "'q', 'v', 'app', 50, 'e', 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'tok'",
    )
    .await;
    p
}

/// A survey reads the in-flight index only, and its look below a floor is an index condition:
/// a due time, not in the index, would read every waiting row's heap (`sysdb::claim`,
/// "Surveys").
#[tokio::test]
async fn a_survey_reads_the_in_flight_index_only() {
    let (_db, mut conn, sql) = migrated().await;
    let p = generic_plan(
        &mut conn,
        &sql,
        super::observe::WAITING,
        "text, int4, int8",
        "'q', 0, 0",
    )
    .await;
    let scans: Vec<&str> = p.lines().filter(|l| l.contains("Scan")).collect();
    assert_eq!(scans.len(), 2, "{p}");
    assert!(
        scans
            .iter()
            .all(|l| l.contains("Index Only Scan using idx_workflow_status_in_flight_v2")),
        "{p}"
    );
    assert!(p.contains("(priority = $2) AND (created_at < $3))"), "{p}");
}

/// A claim's generic plan is made once per lane, usually on small tables; its check for
/// recorded steps must stay a key probe per claimed row, not a hashed read of every step row
/// (W6: 10 ms per claim at 15,000 step rows, growing with the history).
#[tokio::test]
async fn a_claim_planned_on_small_tables_probes_steps_by_key() {
    let p = claim_plan().await;
    assert!(!p.contains("hashed SubPlan"), "{p}");
    let steps: Vec<&str> = p
        .lines()
        .skip_while(|l| !l.contains("operation_outputs_pkey"))
        .take(2)
        .collect();
    assert!(
        steps
            .iter()
            .any(|l| l.contains("Index Cond: (workflow_uuid = w.workflow_uuid)")),
        "{p}"
    );
}

/// A floored claim's pick and `seen` start their index scans at the floor (an index condition,
/// not a filter), so the versions below it are never visited (W9, `sysdb::claim`).
#[tokio::test]
async fn a_claim_starts_its_index_scans_at_the_floor() {
    let p = claim_plan().await;
    let floored = p
        .lines()
        .filter(|l| l.contains("Index Cond") && l.contains("ROW(priority, created_at) >="))
        .count();
    assert!(
        floored >= 2,
        "the pick and seen each scan from the floor: {p}"
    );
    assert!(
        !p.lines()
            .any(|l| l.contains("Filter") && l.contains("ROW(priority, created_at)")),
        "{p}"
    );
}

/// A claim's pause check is a key probe of the paused queues (`sysdb::pauses`), once per claim.
#[tokio::test]
async fn a_claim_checks_its_pause_by_key() {
    let p = claim_plan().await;
    assert!(p.contains("stead_queue_pauses_pkey"), "{p}");
}

//! On Citus, every hot-path statement about one workflow is routed whole to one node: `EXPLAIN`
//! of each, as a lane sends it (its Citus form where it has one), shows one task and no
//! distributed subplan (a step through the coordinator). Runs on the Citus target of the store
//! suite (`STEAD_TEST_CITUS`); skipped, with one line, without a cluster.

use sqlx::{Connection, PgConnection, Row};

use super::sql::Sql;
use crate::sysdb::suite::{citus, TestDb};

/// The plan of `template` prepared (its parameter types from its casts, or `types`) and
/// executed with `args`, as `EXPLAIN` prints it.
async fn plan(
    conn: &mut PgConnection,
    sql: &Sql,
    template: &'static str,
    types: &str,
    args: &str,
) -> String {
    let _ = sqlx::raw_sql("DEALLOCATE ALL").execute(&mut *conn).await;
    let types = if types.is_empty() {
        String::new()
    } else {
        format!("({types})")
    };
    let text = sql.get(template);
    let prepare = format!("PREPARE s{types} AS {}", text.as_str());
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("prepare {template}: {e}"));
    let explain = format!("EXPLAIN (COSTS OFF) EXECUTE s({args})");
    let rows = sqlx::query(sqlx::AssertSqlSafe(explain))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One task on one node, no subplan.
fn assert_routed(what: &str, p: &str) {
    assert!(
        p.contains("Task Count: 1"),
        "{what} is not routed to one node:\n{p}"
    );
    assert!(
        !p.contains("Distributed Subplan"),
        "{what} has a distributed subplan:\n{p}"
    );
    assert_eq!(p.matches("Task Count").count(), 1, "{what}:\n{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hot_statement_is_routed_to_one_node() {
    let Some(kind) = citus() else { return };
    let db = TestDb::on(kind).await;
    crate::sysdb::connect(
        &db.stead_url(),
        "dbos",
        2,
        std::time::Duration::from_secs(10),
        true,
    )
    .await
    .unwrap()
    .migrate()
    .await
    .unwrap();
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    // A bucket beyond the home: its statements, in their Citus forms.
    let sql = Sql::new("dbos_shard1", None);
    sql.set_citus(true);
    let a = |n: usize, ty: &str, v: &str| vec![format!("ARRAY[{v}]::{ty}[]"); n].join(", ");
    let start = format!(
        "ARRAY['w'], ARRAY['wf'], ARRAY[NULL]::text[], ARRAY['{{}}'], ARRAY['ENQUEUED'], \
         ARRAY['q'], ARRAY[0], {}, ARRAY[NULL]::int8[], ARRAY[1]::int8[], {}, \
         ARRAY[NULL]::text[], ARRAY['v']::text[], ARRAY[NULL]::text[], 'e', 'app'",
        a(2, "text", "NULL"),
        a(2, "int8", "NULL"),
    );
    let p = plan(&mut conn, &sql, &super::start::CITUS, "", &start).await;
    assert_routed("start", &p);
    let step = "ARRAY['w'], ARRAY[1], ARRAY['s'], ARRAY['1'], ARRAY[NULL]::text[], \
                ARRAY[NULL]::text[], ARRAY[1]::int8[], ARRAY[2]::int8[], ARRAY['app'], ARRAY['o']";
    let p = plan(&mut conn, &sql, &super::steps::CITUS, "", step).await;
    assert_routed("checkpoint", &p);
    let p = plan(
        &mut conn,
        &sql,
        &super::finish::STATEMENT,
        "text[], text[], text[], text[], text[], int8",
        "ARRAY['w'], ARRAY['o'], ARRAY['SUCCESS'], ARRAY['1'], ARRAY[NULL]::text[], 5",
    )
    .await;
    assert_routed("finish", &p);
    let p = plan(
        &mut conn,
        &sql,
        &super::claim::CLAIM,
        "text, text, text, int8, text, int8, int8, int8, int8, int8, int8, int8, int8, int4, \
         int8, text",
        "'q', 'v', 'app', 50, 'e', 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'tok'",
    )
    .await;
    assert_routed("claim", &p);
    let op = "'w', 'o', 3, 1, 2, 'app'";
    let p = plan(
        &mut conn,
        &sql,
        super::ops::CITUS_RECV,
        "",
        &format!("{op}, 't', false"),
    )
    .await;
    assert_routed("recv", &p);
    let set_event = format!("{op}, 'k', '1'");
    let p = plan(&mut conn, &sql, super::ops::CITUS_SET_EVENT, "", &set_event).await;
    assert_routed("set_event", &p);
    let send = format!("{op}, 'w-3', 'w', 't', '1'");
    let p = plan(&mut conn, &sql, super::ops::CITUS_SEND, "", &send).await;
    assert_routed("send", &p);
    let p = plan(
        &mut conn,
        &sql,
        &super::steps::LOAD,
        "text[], int4[], int4[], int8[], int8",
        "ARRAY['w'], ARRAY[0], ARRAY[500], ARRAY[2000000]::int8[], 1000000",
    )
    .await;
    assert_routed("a page of recorded steps", &p);
    let p = plan(
        &mut conn,
        &sql,
        &super::claim_sharded::SURVEY,
        "text, text, text, int8, int4, int8, int8",
        "'q', 'v', 'app', 50, NULL, NULL, 0",
    )
    .await;
    assert_routed("a claim's survey", &p);
    let _ = conn.close().await;
}

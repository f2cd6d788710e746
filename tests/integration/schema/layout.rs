//! What a fresh migrate creates, column by column, constraint, index, function and trigger
//! (against `expected`), and that a second migrate changes nothing.

use super::*;

/// Runs a catalog query whose rows are text columns, writing this schema's name as `<s>`.
/// The columns of stead's own table `table` in schema `dbos`, in order.
async fn stead_columns(pool: &PgPool, table: &str) -> Vec<String> {
    let sql = format!(
        "SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE c.relnamespace = $1::regnamespace AND c.relname = '{table}'
           AND a.attnum > 0 ORDER BY a.attnum"
    );
    texts(pool, "dbos", &sql).await.concat()
}

async fn texts(pool: &PgPool, schema: &str, sql: &str) -> Vec<Vec<String>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(schema)
        .fetch_all(pool)
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (0..r.len())
                .map(|i| {
                    let v: Option<String> = r.get(i);
                    v.unwrap_or_default().replace(&format!("{schema}."), "<s>.")
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn fresh_migrate_creates_the_dbos_3_4_schema() {
    let db = TestDb::new().await;
    let report = stead::migrate(&db.url, "dbos").await.unwrap();
    assert_eq!(
        report,
        stead::client::MigrationReport {
            schema: "dbos".into(),
            found_version: None,
            version: 125,
            applied: true
        }
    );
    let pool = db.pool().await;

    let columns = texts(
        &pool,
        "dbos",
        "SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod),
                CASE WHEN a.attnotnull THEN 'no' ELSE 'yes' END, pg_get_expr(d.adbin, d.adrelid)
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r'
           AND a.attnum > 0 AND NOT a.attisdropped AND c.relname NOT LIKE 'stead\\_%'
         ORDER BY c.relname, a.attnum",
    )
    .await;
    assert_eq!(columns, expected::column_rows(), "tables and columns");
    // Beside DBOS's tables, stead's own: the fleet's roster, the paused queues and workflows,
    // the continuation links.
    let roster = stead_columns(&pool, "stead_executors").await;
    assert_eq!(roster.len(), 10, "stead_executors: {roster:?}");
    for (table, columns) in [
        ("stead_queue_pauses", &["queue_name", "paused_at"][..]),
        ("stead_workflow_pauses", &["workflow_uuid", "paused_at"]),
        (
            "stead_continuations",
            &["from_id", "to_id", "root_id", "generation", "created_at"],
        ),
    ] {
        assert_eq!(stead_columns(&pool, table).await, columns, "{table}");
    }

    let mut constraints = texts(
        &pool,
        "dbos",
        "SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
         FROM pg_constraint WHERE connamespace = $1::regnamespace
           AND contype IN ('p', 'u', 'f', 'c', 'x', 't')
           AND conrelid::regclass::text NOT LIKE '%stead\\_%'",
    )
    .await;
    constraints.sort();
    assert_eq!(constraints, expected::constraint_rows(), "constraints");

    let mut indexes = texts(
        &pool,
        "dbos",
        "SELECT i.indexname::text, i.indexdef, x.indisunique::text
         FROM pg_indexes i JOIN pg_index x ON x.indexrelid = format('%I.%I', i.schemaname, i.indexname)::regclass
         WHERE i.schemaname = $1 AND NOT x.indisprimary AND i.tablename NOT LIKE 'stead\\_%'
         ORDER BY 1",
    )
    .await;
    indexes.sort();
    assert_eq!(indexes, expected::index_rows(), "secondary indexes");

    let functions = texts(
        &pool,
        "dbos",
        "SELECT proname::text, pg_get_function_arguments(oid), pg_get_function_result(oid),
                array_to_string(proconfig, ';')
         FROM pg_proc WHERE pronamespace = $1::regnamespace ORDER BY 1",
    )
    .await;
    assert_eq!(functions, expected::function_rows(), "functions");

    let triggers = texts(
        &pool,
        "dbos",
        "SELECT tgname::text, pg_get_triggerdef(t.oid), tgenabled::text
         FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = $1::regnamespace AND NOT tgisinternal",
    )
    .await;
    assert_eq!(triggers, expected::trigger_rows(), "triggers");

    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);
}

#[tokio::test]
async fn migrating_twice_changes_nothing() {
    let db = TestDb::new().await;
    let pool = db.pool().await;
    assert!(stead::migrate(&db.url, "dbos").await.unwrap().applied);
    let before = snapshot(&pool, "dbos").await;
    assert!(before.len() > 100, "snapshot too small to mean anything");

    let again = stead::migrate(&db.url, "dbos").await.unwrap();
    assert_eq!(
        (again.found_version, again.version, again.applied),
        (Some(125), 125, false)
    );
    assert_same(
        &before,
        &snapshot(&pool, "dbos").await,
        "after a second migrate",
    );
    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);
}

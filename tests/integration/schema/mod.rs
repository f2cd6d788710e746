//! The DBOS 3.4 schema: what `stead::migrate` creates, how it treats databases that are
//! empty, migrated, behind, ahead or DBOS's own, and the SQL functions it installs.
//!
//! Each test gets its own database. The last two run the real DBOS CLI, which is installed
//! from PyPI into the target directory on first use (see `common::dbos_py`).

mod expected;

use serde_json::json;
use sqlx::{PgPool, Row};

use crate::common;
use crate::common::catalog::{
    assert_same, migration_rows, snapshot, snapshot_on, sqlite_snapshot, user_schemas,
    without_bodies,
};
use crate::common::dbos_py::{dbos_migrate, dbos_migrate_schema};
use crate::common::TestDb;

/// Runs a catalog query whose rows are text columns, writing this schema's name as `<s>`.
async fn texts(pool: &PgPool, schema: &str, sql: &'static str) -> Vec<Vec<String>> {
    let rows = sqlx::query(sql).bind(schema).fetch_all(pool).await.unwrap();
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

async fn fresh_snapshot() -> Vec<String> {
    let db = TestDb::new().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    snapshot(&db.pool().await, "dbos").await
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
           AND a.attnum > 0 AND NOT a.attisdropped AND c.relname <> 'stead_executors'
         ORDER BY c.relname, a.attnum",
    )
    .await;
    assert_eq!(columns, expected::column_rows(), "tables and columns");
    // Beside DBOS's tables, stead's own: the fleet's roster.
    let roster = texts(
        &pool,
        "dbos",
        "SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE c.relnamespace = $1::regnamespace AND c.relname = 'stead_executors'
           AND a.attnum > 0 ORDER BY a.attnum",
    )
    .await;
    assert_eq!(roster.len(), 10, "stead_executors: {roster:?}");

    let mut constraints = texts(
        &pool,
        "dbos",
        "SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
         FROM pg_constraint WHERE connamespace = $1::regnamespace
           AND contype IN ('p', 'u', 'f', 'c', 'x', 't')
           AND conrelid::regclass::text NOT LIKE '%stead_executors'",
    )
    .await;
    constraints.sort();
    assert_eq!(constraints, expected::constraint_rows(), "constraints");

    let mut indexes = texts(
        &pool,
        "dbos",
        "SELECT i.indexname::text, i.indexdef, x.indisunique::text
         FROM pg_indexes i JOIN pg_index x ON x.indexrelid = format('%I.%I', i.schemaname, i.indexname)::regclass
         WHERE i.schemaname = $1 AND NOT x.indisprimary ORDER BY 1",
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

#[tokio::test]
async fn custom_schema_gets_the_whole_schema_and_working_functions() {
    let db = TestDb::new().await;
    let report = stead::migrate(&db.url, "tenant_x").await.unwrap();
    assert_eq!((report.schema.as_str(), report.applied), ("tenant_x", true));
    let pool = db.pool().await;
    assert_eq!(
        user_schemas(&pool).await,
        ["public", "tenant_x"],
        "nothing in dbos"
    );
    // Same objects as in a default-schema database, each referring to tenant_x.
    assert_same(
        &fresh_snapshot().await,
        &snapshot(&pool, "tenant_x").await,
        "tenant_x",
    );

    let id: String = sqlx::query_scalar(
        r#"SELECT tenant_x.enqueue_workflow('charge', 'payments',
               ARRAY['42'::json, '"eur"'::json], '{"retry": true}'::json)"#,
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        uuid::Uuid::parse_str(&id).is_ok(),
        "a fresh UUID, not {id:?}"
    );
    let row = sqlx::query("SELECT * FROM tenant_x.workflow_status WHERE workflow_uuid = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    let text = |col: &str| row.get::<Option<String>, _>(col);
    assert_eq!(text("name").as_deref(), Some("charge"));
    assert_eq!(text("queue_name").as_deref(), Some("payments"));
    assert_eq!(text("status").as_deref(), Some("ENQUEUED"));
    assert_eq!(text("serialization").as_deref(), Some("portable_json"));
    assert!(text("owner_xid").is_some_and(|o| uuid::Uuid::parse_str(&o).is_ok()));
    assert_eq!(row.get::<i32, _>("priority"), 0);
    assert_eq!(row.get::<Option<i64>, _>("recovery_attempts"), Some(0));
    let (created, updated): (i64, i64) = (row.get("created_at"), row.get("updated_at"));
    let db_now: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000)::bigint")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(created, updated);
    assert!(
        (db_now - created).abs() < 60_000,
        "created_at {created} is not epoch ms"
    );
    let inputs: String =
        sqlx::query_scalar("SELECT inputs FROM tenant_x.workflow_input WHERE workflow_uuid = $1")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&inputs).unwrap(),
        json!({"positionalArgs": [42, "eur"], "namedArgs": {"retry": true}})
    );

    sqlx::query(r#"SELECT tenant_x.send_message($1, '{"amount": 5}'::json, 'topup')"#)
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();
    let (topic, message, serialization): (String, String, String) = sqlx::query_as(
        "SELECT topic, message, serialization FROM tenant_x.notifications
         WHERE destination_uuid = $1",
    )
    .bind(&id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (topic.as_str(), serialization.as_str()),
        ("topup", "portable_json")
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&message).unwrap(),
        json!({"amount": 5})
    );

    let err = sqlx::query("SELECT tenant_x.send_message('no-such-workflow', '1'::json)")
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23503", "{err}");
    assert!(err.to_string().contains("no-such-workflow"), "{err}");
}

fn sqlstate(err: &sqlx::Error) -> String {
    err.as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned())
        .unwrap_or_else(|| panic!("not a database error: {err}"))
}

#[tokio::test]
async fn sql_functions_keep_dbos_semantics() {
    let db = TestDb::new().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    let pool = db.pool().await;
    let enqueue = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query_scalar::<_, String>(sql).fetch_one(&pool).await }
    };

    // An explicit id is returned as is, and enqueuing it again leaves one workflow.
    let first =
        enqueue("SELECT dbos.enqueue_workflow('w', 'q', workflow_id => 'wf-1', priority => 3)");
    assert_eq!(first.await.unwrap(), "wf-1");
    let again =
        enqueue("SELECT dbos.enqueue_workflow('w', 'q', workflow_id => 'wf-1', priority => 3)");
    assert_eq!(again.await.unwrap(), "wf-1");
    let (count, priority): (i64, i32) = sqlx::query_as(
        "SELECT count(*), max(priority) FROM dbos.workflow_status WHERE workflow_uuid = 'wf-1'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((count, priority), (1, 3));

    // A delay makes the workflow DELAYED; no arguments make an empty inputs envelope.
    let delayed = enqueue("SELECT dbos.enqueue_workflow('w', 'q', delay_until_epoch_ms => 5)")
        .await
        .unwrap();
    let (status, delay, inputs): (String, i64, String) = sqlx::query_as(
        "SELECT s.status, s.delay_until_epoch_ms, i.inputs FROM dbos.workflow_status s
         JOIN dbos.workflow_input i USING (workflow_uuid) WHERE workflow_uuid = $1",
    )
    .bind(&delayed)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), delay), ("DELAYED", 5));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&inputs).unwrap(),
        json!({"positionalArgs": [], "namedArgs": {}})
    );

    // A second workflow with the same deduplication id on the same queue is refused.
    enqueue("SELECT dbos.enqueue_workflow('w', 'q', deduplication_id => 'once')")
        .await
        .unwrap();
    let err = enqueue("SELECT dbos.enqueue_workflow('w', 'q', deduplication_id => 'once')")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "23505", "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("queue q") && shown.contains("once"),
        "{shown}"
    );
    enqueue("SELECT dbos.enqueue_workflow('w', 'other', deduplication_id => 'once')")
        .await
        .unwrap();

    // Bad arguments are refused with a message naming the argument.
    for (sql, names) in [
        ("SELECT dbos.enqueue_workflow('', 'q')", "workflow_name"),
        ("SELECT dbos.enqueue_workflow('w', NULL)", "queue_name"),
        (
            "SELECT dbos.enqueue_workflow('w', 'q', workflow_id => '')",
            "workflow_id",
        ),
        (
            "SELECT dbos.enqueue_workflow('w', 'q', named_args => '[1]')",
            "named_args",
        ),
        (
            "SELECT dbos.enqueue_workflow('w', 'q', delay_until_epoch_ms => -1)",
            "delay_until",
        ),
    ] {
        let err = enqueue(sql).await.unwrap_err();
        assert_eq!(sqlstate(&err), "22023", "{sql}: {err}");
        assert!(err.to_string().contains(names), "{sql}: {err}");
    }

    // send_message: NULL topic is stored as DBOS's stand-in; a message id is delivered once;
    // every insert is announced on the notifications channel as "<workflow>::<topic>".
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    listener.listen("dbos_notifications_channel").await.unwrap();
    for _ in 0..2 {
        sqlx::query("SELECT dbos.send_message('wf-1', '\"hi\"'::json, NULL, 'm-1')")
            .execute(&pool)
            .await
            .unwrap();
    }
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT message_uuid, topic FROM dbos.notifications")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(rows, [("m-1".to_owned(), "__null__topic__".to_owned())]);
    let note = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("no notification within 10 s")
        .unwrap();
    assert_eq!(note.payload(), "wf-1::__null__topic__");
}

#[tokio::test]
async fn a_database_behind_is_brought_back_to_the_full_schema() {
    let fresh = fresh_snapshot().await;
    let db = TestDb::new().await;
    let pool = db.pool().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE dbos.workflow_status DROP COLUMN creator_xid;
         DROP INDEX dbos.idx_workflow_status_deadline;
         UPDATE dbos.dbos_migrations SET version = 100;",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_ne!(
        snapshot(&pool, "dbos").await,
        fresh,
        "the damage shows in the snapshot"
    );

    let report = stead::migrate(&db.url, "dbos").await.unwrap();
    assert_eq!(
        (report.found_version, report.version, report.applied),
        (Some(100), 125, true)
    );
    assert_same(&fresh, &snapshot(&pool, "dbos").await, "after repairing");
    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);
}

// What older DBOS releases left behind (the script's "Objects older DBOS versions created"),
// plus a missing table and a missing primary key: all of it is replaced by the 3.4 layout.
#[tokio::test]
async fn leftovers_of_older_dbos_releases_are_replaced() {
    let fresh = fresh_snapshot().await;
    let db = TestDb::new().await;
    let pool = db.pool().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    sqlx::raw_sql(
        r#"DROP INDEX dbos.idx_workflow_status_forked_from;
         CREATE INDEX idx_workflow_status_forked_from ON dbos.workflow_status (forked_from);
         CREATE INDEX workflow_status_status_index ON dbos.workflow_status (status);
         ALTER TABLE dbos.workflow_status ADD CONSTRAINT uq_workflow_status_queue_name_dedup_id
             UNIQUE (queue_name, deduplication_id);
         ALTER TABLE dbos.operation_outputs ADD FOREIGN KEY (workflow_uuid)
             REFERENCES dbos.workflow_status (workflow_uuid);
         CREATE FUNCTION dbos.workflow_events_function() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RETURN NEW; END $$;
         CREATE TRIGGER dbos_workflow_events_trigger AFTER INSERT ON dbos.workflow_events
             FOR EACH ROW EXECUTE FUNCTION dbos.workflow_events_function();
         CREATE FUNCTION dbos.enqueue_workflow(workflow_name text, queue_name text,
             positional_args json[] DEFAULT ARRAY[]::json[]) RETURNS text LANGUAGE sql
             AS $$ SELECT 'old' $$;
         ALTER FUNCTION dbos.notifications_function() RESET search_path;
         ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger;
         ALTER TABLE dbos.workflow_output DROP CONSTRAINT workflow_output_pkey;
         DROP TABLE dbos.workflow_schedules;
         UPDATE dbos.dbos_migrations SET version = 47;"#,
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_ne!(snapshot(&pool, "dbos").await, fresh);

    let report = stead::migrate(&db.url, "dbos").await.unwrap();
    assert_eq!((report.found_version, report.applied), (Some(47), true));
    assert_same(
        &fresh,
        &snapshot(&pool, "dbos").await,
        "after replacing leftovers",
    );
}

#[tokio::test]
async fn a_database_ahead_is_left_alone() {
    let db = TestDb::new().await;
    let pool = db.pool().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    // A newer release's database: version 130, and (say) an index 3.4 has that it dropped.
    sqlx::raw_sql(
        "DROP INDEX dbos.idx_workflow_status_pending; UPDATE dbos.dbos_migrations SET version = 130;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before = snapshot(&pool, "dbos").await;

    let report = stead::migrate(&db.url, "dbos").await.unwrap();
    assert_eq!(
        (report.found_version, report.version, report.applied),
        (Some(130), 130, false)
    );
    assert_same(&before, &snapshot(&pool, "dbos").await, "a newer schema");
    assert_eq!(migration_rows(&pool, "dbos").await, vec![130]);
}

#[tokio::test]
async fn concurrent_migrators_apply_the_script_once() {
    let db = TestDb::new().await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { stead::migrate(&url, "dbos").await })
        })
        .collect();
    let mut applied = 0;
    for run in runs {
        let report = run.await.unwrap().unwrap();
        assert_eq!(report.version, 125);
        applied += usize::from(report.applied);
    }
    assert_eq!(
        applied, 1,
        "the lock lets exactly one migrator run the script"
    );
    let pool = db.pool().await;
    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);
    assert_same(
        &fresh_snapshot().await,
        &snapshot(&pool, "dbos").await,
        "after the race",
    );
}

#[tokio::test]
async fn a_dbos_migrated_database_is_accepted_as_is() {
    require_dbos!();
    let db = TestDb::new().await;
    dbos_migrate(&db.url);
    let pool = db.pool().await;
    let before = snapshot(&pool, "dbos").await;
    assert_eq!(migration_rows(&pool, "dbos").await, vec![125]);

    let report = stead::migrate(&db.url, "dbos").await.unwrap();
    assert_eq!(
        (report.found_version, report.version, report.applied),
        (Some(125), 125, false)
    );
    assert_same(
        &before,
        &snapshot(&pool, "dbos").await,
        "DBOS's schema after stead",
    );
}

// The compatibility guard: stead's schema is DBOS's, object for object, and DBOS takes a
// stead-migrated database as fully migrated.
#[tokio::test]
async fn stead_and_dbos_produce_the_same_schema() {
    require_dbos!();
    // A mixed-case name checks the quoting of the schema everywhere it is spliced in.
    for schema in ["dbos", "Tenant_X"] {
        let by_dbos = TestDb::new().await;
        dbos_migrate_schema(&by_dbos.url, schema);
        let by_stead = TestDb::new().await;
        stead::migrate(&by_stead.url, schema).await.unwrap();
        let (dbos_pool, stead_pool) = (by_dbos.pool().await, by_stead.pool().await);

        let ours = snapshot(&stead_pool, schema).await;
        assert!(
            ours.len() > 100,
            "{schema}: snapshot too small to mean anything"
        );
        // Function bodies are stead's own SQL; tests/integration/dbos_interop.rs compares what they do.
        assert_same(
            &without_bodies(&snapshot(&dbos_pool, schema).await),
            &without_bodies(&ours),
            schema,
        );
        assert_eq!(
            user_schemas(&dbos_pool).await,
            user_schemas(&stead_pool).await
        );
        assert_eq!(
            migration_rows(&dbos_pool, schema).await,
            migration_rows(&stead_pool, schema).await
        );

        dbos_migrate_schema(&by_stead.url, schema);
        assert_same(
            &ours,
            &snapshot(&stead_pool, schema).await,
            "stead's schema after DBOS",
        );
        assert_eq!(migration_rows(&stead_pool, schema).await, vec![125]);
    }
}

/// Changes the guard must notice, each with a word its differing lines contain.
const CHANGES: &[(&str, &str)] = &[
    ("DROP TABLE dbos.event_dispatch_kv", "event_dispatch_kv"),
    (
        "ALTER TABLE dbos.notifications ADD COLUMN extra text",
        "extra",
    ),
    (
        "ALTER TABLE dbos.queues ALTER COLUMN concurrency TYPE bigint",
        "concurrency bigint",
    ),
    (
        "ALTER TABLE dbos.workflow_status ALTER COLUMN priority SET DEFAULT 1",
        "default=1 ",
    ),
    (
        "ALTER TABLE dbos.workflow_status ALTER COLUMN name SET NOT NULL",
        "name text notnull=t ",
    ),
    (
        "DROP INDEX dbos.idx_workflow_status_pending;
         CREATE INDEX idx_workflow_status_pending ON dbos.workflow_status (created_at)
             WHERE status = 'ENQUEUED'",
        "idx_workflow_status_pending",
    ),
    (
        "DROP INDEX dbos.uq_workflow_status_dedup_id;
         CREATE INDEX uq_workflow_status_dedup_id ON dbos.workflow_status
             (queue_name, deduplication_id) WHERE deduplication_id IS NOT NULL",
        "uq_workflow_status_dedup_id",
    ),
    (
        "DROP INDEX dbos.idx_workflow_status_in_flight_v2;
         CREATE INDEX idx_workflow_status_in_flight_v2 ON dbos.workflow_status
             (queue_name, status, priority, created_at)
             WHERE status = ANY (ARRAY['ENQUEUED', 'PENDING'])",
        "idx_workflow_status_in_flight_v2",
    ),
    (
        "ALTER TABLE dbos.workflow_status ADD CONSTRAINT positive CHECK (priority >= 0)",
        "positive",
    ),
    (
        "ALTER TABLE dbos.streams DROP CONSTRAINT streams_workflow_uuid_fkey;
         ALTER TABLE dbos.streams ADD CONSTRAINT streams_workflow_uuid_fkey
             FOREIGN KEY (workflow_uuid) REFERENCES dbos.workflow_status (workflow_uuid)",
        "streams_workflow_uuid_fkey",
    ),
    (
        "CREATE OR REPLACE FUNCTION dbos.notifications_function() RETURNS trigger
             LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
        "notifications_function",
    ),
    (
        "ALTER FUNCTION dbos.send_message(text, json, text, text) SECURITY DEFINER",
        "send_message",
    ),
    (
        "DROP FUNCTION dbos.send_message(text, json, text, text);
         CREATE FUNCTION dbos.send_message(destination_id text, message json,
             topic text DEFAULT 'x', message_id text DEFAULT NULL) RETURNS void
             LANGUAGE sql AS $$ SELECT $$",
        "send_message",
    ),
    (
        "ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger",
        "dbos_notifications_trigger",
    ),
    ("COMMENT ON TABLE dbos.queues IS 'mine'", "mine"),
];

// The guard can fail: each kind of difference it promises to catch shows in the snapshot.
// Every change runs in a transaction that is rolled back, so one database serves them all.
#[tokio::test]
async fn the_schema_guard_notices_every_kind_of_change() {
    let db = TestDb::new().await;
    stead::migrate(&db.url, "dbos").await.unwrap();
    let pool = db.pool().await;
    let base = snapshot(&pool, "dbos").await;
    for (change, word) in CHANGES {
        let mut tx = pool.begin().await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(*change))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{change}: {e}"));
        let changed = snapshot_on(&mut tx, "dbos").await;
        tx.rollback().await.unwrap();
        let differing: Vec<&String> = changed
            .iter()
            .filter(|l| !base.contains(l))
            .chain(base.iter().filter(|l| !changed.contains(l)))
            .collect();
        assert!(
            differing.iter().any(|l| l.contains(word)),
            "{change}: not seen; differing lines: {differing:#?}"
        );
    }
    assert_same(&base, &snapshot(&pool, "dbos").await, "after the rollbacks");
}

// The same guard for the embedded backend: a SQLite file migrated by stead is DBOS 3.4's
// SQLite layout, and each side accepts the other's file as up to date.
#[tokio::test]
async fn stead_and_dbos_produce_the_same_sqlite_layout() {
    require_dbos!();
    let (by_dbos, by_stead) = (TestDb::sqlite().await, TestDb::sqlite().await);
    dbos_migrate(&by_dbos.url);
    let report = stead::migrate(&by_stead.url, "dbos").await.unwrap();
    assert_eq!((report.found_version, report.applied), (None, true));
    let ours = sqlite_snapshot(&by_stead.url).await;
    assert!(ours.len() > 100, "snapshot too small to mean anything");
    assert_same(&sqlite_snapshot(&by_dbos.url).await, &ours, "SQLite layout");

    // DBOS takes stead's file as migrated, and stead DBOS's.
    dbos_migrate(&by_stead.url);
    assert_same(
        &ours,
        &sqlite_snapshot(&by_stead.url).await,
        "stead's file after DBOS",
    );
    let report = stead::migrate(&by_dbos.url, "dbos").await.unwrap();
    assert_eq!(
        (report.found_version, report.version, report.applied),
        (Some(125), 125, false)
    );
}

#[tokio::test]
async fn a_dbos_migrated_sqlite_file_runs_stead_workflows_unchanged() {
    require_dbos!();
    async fn double(_ctx: stead::Context, n: i64) -> stead::Result<i64> {
        Ok(n * 2)
    }
    let db = TestDb::sqlite().await;
    dbos_migrate(&db.url);
    let before = sqlite_snapshot(&db.url).await;
    let rt = common::builder(&db)
        .workflow("double", double)
        .launch()
        .await
        .unwrap();
    let handle = rt
        .start("double", 21, stead::WorkflowOptions::with_id("d-1"))
        .await
        .unwrap();
    assert_eq!(common::within(handle.result::<i64>()).await.unwrap(), 42);
    rt.shutdown(std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_same(
        &before,
        &sqlite_snapshot(&db.url).await,
        "DBOS's file after stead",
    );
}

#[tokio::test]
async fn a_sqlite_file_part_way_through_dbos_history_is_refused_by_name() {
    let db = TestDb::sqlite().await;
    {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("{}?mode=rwc", db.url))
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE dbos_migrations (version INTEGER NOT NULL PRIMARY KEY); \
             INSERT INTO dbos_migrations VALUES (40);",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let err = stead::migrate(&db.url, "dbos").await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("40") && text.contains("dbos migrate"),
        "{text}"
    );
}

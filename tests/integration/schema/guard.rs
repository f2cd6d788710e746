//! The compatibility guard on Postgres: stead's schema is DBOS's, object for object, and the
//! guard notices every kind of change it promises to.

use super::*;

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
        // Function bodies are stead's own SQL; tests/integration/dbos_interop.rs compares what they
        // do.
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

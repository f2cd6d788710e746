//! Databases that are not at 3.4: behind, with older DBOS releases' leftovers, ahead, migrated
//! by several processes at once, or migrated by DBOS itself.

use super::*;

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

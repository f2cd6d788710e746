//! The guard for the embedded backend: a SQLite file migrated by stead is DBOS 3.4's layout, a
//! DBOS-migrated file runs stead's workflows, and a file part way through DBOS's history is
//! refused by name.

use super::*;

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

//! The application database's datasource table (`AppSql`), on both kinds of database: the
//! probe's pool stands in for the application's.

use sqlx::Pool;

use super::{store_tests, Fixture, Kind};
use crate::sysdb::{AppSql, RecordRow, Recorded, DATASOURCE_SCHEMA_VERSION};

store_tests!(datasource_records_once_reads_back_and_deletes);

async fn datasource_records_once_reads_back_and_deletes(kind: Kind) {
    let f = Fixture::new(kind).await;
    match (f.pg_pool(), f.sqlite_pool()) {
        (Some(pg), _) => exercise(pg).await,
        (_, Some(lite)) => exercise(lite).await,
        _ => unreachable!("a fixture has one pool"),
    }
}

async fn exercise<DB: AppSql>(pool: Pool<DB>) {
    let schema = "app_ds";
    assert_eq!(DB::schema_version(&pool, schema).await.unwrap(), 0);
    DB::migrate(&pool, schema).await.unwrap();
    DB::migrate(&pool, schema).await.unwrap(); // a no-op the second time
    assert_eq!(
        DB::schema_version(&pool, schema).await.unwrap(),
        DATASOURCE_SCHEMA_VERSION
    );
    let row = |step_id, output| RecordRow {
        workflow_id: "w",
        step_id,
        output: Some(output),
        error: None,
        serialization: "portable_json",
    };
    let mut tx = DB::begin(&pool, Default::default()).await.unwrap();
    assert!(DB::record(&mut tx, schema, row(1, "1")).await.unwrap());
    assert!(DB::record(&mut tx, schema, row(2, "2")).await.unwrap());
    // The same step again: not inserted, the first row stays.
    assert!(!DB::record(&mut tx, schema, row(1, "other")).await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(
        DB::recorded(&pool, schema, "w", 1).await.unwrap(),
        Some(Recorded {
            output: Some("1".into()),
            error: None,
            serialization: Some("portable_json".into()),
        })
    );
    assert_eq!(DB::recorded(&pool, schema, "w", 3).await.unwrap(), None);
    // A rolled-back record leaves nothing.
    let mut tx = DB::begin(&pool, Default::default()).await.unwrap();
    assert!(DB::record(&mut tx, schema, row(3, "3")).await.unwrap());
    tx.rollback().await.unwrap();
    assert_eq!(DB::recorded(&pool, schema, "w", 3).await.unwrap(), None);
    let mut tx = DB::begin(&pool, Default::default()).await.unwrap();
    assert_eq!(DB::delete(&mut tx, schema, "w", 2).await.unwrap(), 1);
    tx.commit().await.unwrap();
    assert!(DB::recorded(&pool, schema, "w", 1).await.unwrap().is_some());
    assert_eq!(DB::recorded(&pool, schema, "w", 2).await.unwrap(), None);
}

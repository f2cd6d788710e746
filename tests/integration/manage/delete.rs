//! Delete, alone or with children: every row of the workflow goes.

use super::*;

both_backends! {
async fn delete_alone_or_with_children_removes_every_row(db) {
    let rt = builder(&db).launch().await.unwrap();
    let pool = db.checks().await;
    for id in ["x", "y"] {
        rt.start("parent", 2u64, WorkflowOptions::with_id(id))
            .await
            .unwrap()
            .result::<u64>()
            .await
            .unwrap();
    }
    let client = client(&db).await;
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move { pool.count(sql).await.unwrap() }
    };
    client.delete("x").await.unwrap();
    assert_eq!(common::status_of(&pool, "x").await, None);
    assert_eq!(common::status_of(&pool, "x-1").await.as_deref(), Some("SUCCESS"));
    assert_eq!(
        count("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'x'").await,
        0
    );
    assert!(matches!(
        client.handle("x").status().await,
        Err(Error::NotFound(_))
    ));
    client.delete_with_children("y").await.unwrap();
    assert_eq!(common::status_of(&pool, "y").await, None);
    assert_eq!(common::status_of(&pool, "y-1").await, None);
    assert_eq!(
        count("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid IN ('y', 'y-1')")
            .await,
        0
    );
    assert!(matches!(client.delete("y").await, Err(Error::NotFound(_))));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

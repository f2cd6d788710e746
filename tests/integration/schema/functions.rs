//! The SQL functions stead installs, as DBOS defines them: whole and working in a custom schema,
//! and DBOS's semantics for enqueues, messages and their refusals.

use super::*;

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
    let note = tokio::time::timeout(crate::common::wait::SETUP, listener.recv())
        .await
        .expect("no notification within 10 s")
        .unwrap();
    assert_eq!(note.payload(), "wf-1::__null__topic__");
}

//! stead's SQL functions (`dbos.enqueue_workflow`, `dbos.send_message`) against DBOS Transact
//! 3.4's own (PyPI `dbos`, installed by `.ci/test-deps`; skipped without it): beyond their
//! signatures, which the schema snapshot compares, they are compared by what they do.

use std::time::Duration;

use serde_json::Value;

use crate::common::dbos_py::{dbos_cli_async, dbos_migrate};
use crate::common::TestDb;

/// Calls of DBOS's SQL functions, run on both databases; the last three must fail.
const FUNCTION_CALLS: &[&str] = &[
    r#"SELECT dbos.enqueue_workflow('charge', 'payments', ARRAY['42'::json, '"eur"'::json],
           '{"retry": true}'::json, class_name => 'Billing', config_name => 'cfg',
           workflow_id => 'wf-1', app_version => 'v1', timeout_ms => 5000,
           deadline_epoch_ms => 99, deduplication_id => 'd-1', priority => 3,
           queue_partition_key => 'p', authenticated_user => 'ada',
           authenticated_roles => '["admin"]', application_name => 'app')"#,
    "SELECT dbos.enqueue_workflow('charge', 'payments', workflow_id => 'wf-1')",
    "SELECT dbos.enqueue_workflow('bare', 'q', workflow_id => 'wf-2')",
    "SELECT dbos.enqueue_workflow('later', 'q', workflow_id => 'wf-3', delay_until_epoch_ms => 5)",
    r#"SELECT dbos.send_message('wf-1', '{"a": 1}'::json, 't', 'm-1')"#,
    r#"SELECT dbos.send_message('wf-1', '{"a": 2}'::json, 't', 'm-1')"#,
    "SELECT dbos.send_message('wf-2', '[2]'::json)",
    "SELECT dbos.enqueue_workflow('charge', 'payments', workflow_id => 'wf-4',
           deduplication_id => 'd-1')",
    "SELECT dbos.send_message('nobody', '1'::json)",
    "SELECT dbos.enqueue_workflow('charge', 'payments', named_args => '[1]'::json)",
];

/// What the function calls left behind, as JSON text, with times and generated ids masked.
const FUNCTION_EFFECTS: &str = r#"
SELECT jsonb_build_object(
  'workflows', (SELECT jsonb_agg(to_jsonb(w) - 'created_at' - 'updated_at' - 'owner_xid'
                   || jsonb_build_object('owned', w.owner_xid IS NOT NULL,
                        'inputs', i.inputs::jsonb,
                        'input_kept_from_creation', i.retention_timestamp = w.created_at)
                 ORDER BY w.workflow_uuid)
                FROM dbos.workflow_status w LEFT JOIN dbos.workflow_input i USING (workflow_uuid)),
  'messages', (SELECT jsonb_agg(to_jsonb(n) - 'created_at_epoch_ms' - 'message_uuid' - 'message'
                   || jsonb_build_object('message', n.message::jsonb,
                        'id', CASE WHEN n.message_uuid = 'm-1' THEN 'm-1' ELSE 'generated' END)
                 ORDER BY n.destination_uuid)
               FROM dbos.notifications n))::text"#;

/// Runs [`FUNCTION_CALLS`] on `pool`: the effects, each failure's SQLSTATE, and what was
/// announced on the notifications channel.
async fn function_effects(db: &TestDb) -> (Value, Vec<String>, Vec<String>) {
    let pool = db.pool().await;
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    listener.listen("dbos_notifications_channel").await.unwrap();
    let mut failures = Vec::new();
    for call in FUNCTION_CALLS {
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(*call))
            .execute(&pool)
            .await
        {
            let code = e.as_database_error().and_then(|d| d.code());
            failures.push(
                code.map(|c| c.into_owned())
                    .unwrap_or_else(|| e.to_string()),
            );
        }
    }
    let mut notes = Vec::new();
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await {
        notes.push(n.payload().to_owned());
    }
    let effects: String = sqlx::query_scalar(FUNCTION_EFFECTS)
        .fetch_one(&pool)
        .await
        .unwrap();
    (serde_json::from_str(&effects).unwrap(), failures, notes)
}

// The compatibility guard's other half: stead's SQL functions are its own code, so beyond
// their signatures (compared by the schema snapshot) they are compared by what they do.
#[tokio::test]
async fn stead_sql_functions_do_what_dbos_functions_do() {
    require_dbos!();
    let (by_dbos, by_stead) = (TestDb::new().await, TestDb::new().await);
    dbos_cli_async().await;
    dbos_migrate(&by_dbos.url);
    stead::migrate(&by_stead.url, "dbos").await.unwrap();
    let (dbos, stead) = (
        function_effects(&by_dbos).await,
        function_effects(&by_stead).await,
    );
    assert_eq!(dbos.0, stead.0, "rows written");
    assert_eq!(dbos.2, stead.2, "notifications announced");
    assert_eq!(dbos.2, ["wf-1::t", "wf-2::__null__topic__"]);
    assert_eq!(dbos.0["workflows"].as_array().map(Vec::len), Some(3));
    // Both refuse the same calls; stead's refusals of bad arguments carry a SQLSTATE of
    // their own (22023 rather than DBOS's generic P0001).
    assert_eq!(dbos.1, ["23505", "23503", "P0001"]);
    assert_eq!(stead.1, ["23505", "23503", "22023"]);
}

//! Workflow attributes (DBOS's `attributes` column): set at start and enqueue, read and filtered
//! through the client, replaced, merged and cleared, and the same rows read and written by
//! DBOS's Python client.

use std::time::Duration;

use serde_json::{json, Value};
use stead::{
    client::ListWorkflows, workflow::Attributes, Context, Error, Queue, Runtime, WorkflowOptions,
};

use crate::common;
use crate::common::dbos_py::{ok_answer as ok, py_client};
use crate::common::{client, TestDb};

const APP: &str = "attrs";
const QUEUE: &str = "attrs-q";

async fn double(_ctx: Context, n: u64) -> stead::Result<u64> {
    Ok(n * 2)
}

/// Starts `double` as its child, with no attributes of its own.
async fn parent(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.run_child("double", n, WorkflowOptions::default()).await
}

async fn launch(db: &TestDb) -> Runtime {
    common::builder(db)
        .app_name(APP)
        .queue(Queue::new(QUEUE).polling_interval(Duration::from_millis(100)))
        .workflow("double", double)
        .workflow("parent", parent)
        .launch()
        .await
        .unwrap()
}

fn attrs(value: Value) -> Attributes {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

async fn listed(client: &stead::Client, filter: Value) -> Vec<String> {
    let found = client
        .list_workflows(ListWorkflows::new().attributes(attrs(filter)))
        .await
        .unwrap();
    found.into_iter().map(|w| w.status.id).collect()
}

async fn attributes_of(client: &stead::Client, id: &str) -> Option<Value> {
    let found = client
        .list_workflows(ListWorkflows::new().ids([id]))
        .await
        .unwrap();
    found.into_iter().next().unwrap().status.attributes
}

both_backends! {
async fn set_at_start_and_enqueue_listed_filtered_and_changed(db) {
    let rt = launch(&db).await;
    let client = client(&db, APP).await;
    let started = WorkflowOptions::with_id("s1")
        .attribute("customer", "acme")
        .attribute("tier", 1);
    rt.start("parent", 2u64, started).await.unwrap().result::<u64>().await.unwrap();
    let queued = WorkflowOptions::with_id("e1")
        .attributes(attrs(json!({"customer": "globex", "tags": ["a", "b"]})));
    let handle = client.enqueue(QUEUE, "double", 3u64, queued).await.unwrap();
    assert_eq!(handle.result::<u64>().await.unwrap(), 6);

    // The handle's status carries them; a child does not inherit its parent's.
    let status = rt.client().handle("s1").status().await.unwrap();
    assert_eq!(status.attributes, Some(json!({"customer": "acme", "tier": 1})));
    assert_eq!(attributes_of(&client, "s1-1").await, None);

    assert_eq!(listed(&client, json!({"customer": "acme"})).await, vec!["s1"]);
    assert_eq!(listed(&client, json!({"customer": "globex"})).await, vec!["e1"]);
    assert_eq!(listed(&client, json!({"customer": "acme", "tier": 1})).await, vec!["s1"]);
    assert!(listed(&client, json!({"customer": "acme", "tier": 2})).await.is_empty());
    // An empty filter filters nothing.
    assert_eq!(listed(&client, json!({})).await.len(), 3);

    client
        .merge_workflow_attributes("s1", attrs(json!({"tier": 2, "note": null})))
        .await
        .unwrap();
    let merged = json!({"customer": "acme", "tier": 2, "note": null});
    assert_eq!(attributes_of(&client, "s1").await, Some(merged));
    client
        .update_workflow_attributes("s1", Some(attrs(json!({"only": true}))))
        .await
        .unwrap();
    assert_eq!(attributes_of(&client, "s1").await, Some(json!({"only": true})));
    client.update_workflow_attributes("s1", None).await.unwrap();
    assert_eq!(attributes_of(&client, "s1").await, None);

    let missing = client.update_workflow_attributes("nobody", None).await;
    assert!(matches!(missing, Err(Error::NotFound(id)) if id == "nobody"));
    let nul = WorkflowOptions::with_id("nul").attribute("k", "a\0b");
    let refused = client.enqueue(QUEUE, "double", 1u64, nul).await;
    assert!(matches!(refused, Err(Error::InvalidArgument(m)) if m.contains("NUL")));
    let filter = ListWorkflows::new().attributes(attrs(json!({"k": "a\0b"})));
    let refused = client.list_workflows(filter).await;
    assert!(matches!(refused, Err(Error::InvalidArgument(m)) if m.contains("NUL")));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// DBOS's client and stead read and write each other's attributes: a Python enqueue's
/// attributes are listed and filtered by stead, a stead start's are found by DBOS's
/// `list_workflows(attributes=...)`, and a merge from either side is seen by the other.
#[tokio::test]
async fn dbos_and_stead_read_and_write_each_others_attributes() {
    require_dbos!();
    let db = TestDb::new().await;
    let rt = launch(&db).await;
    let client = rt.client();

    let from_py = json!({"workflow": "double", "queue": QUEUE, "id": "py", "args": [4],
                         "attributes": {"origin": "python", "n": 4}, "wait": true});
    assert_eq!(
        ok(py_client(&db.url, APP, "enqueue", from_py).await),
        json!(8)
    );
    assert_eq!(
        listed(client, json!({"origin": "python"})).await,
        vec!["py"]
    );

    let options = WorkflowOptions::with_id("rs").attribute("origin", "rust");
    rt.start("double", 1u64, options)
        .await
        .unwrap()
        .result::<u64>()
        .await
        .unwrap();
    let filter = json!({"attributes": {"origin": "rust"}});
    assert_eq!(
        ok(py_client(&db.url, APP, "list", filter).await),
        json!(["rs"])
    );

    let merge = json!({"id": "rs", "attributes": {"by": "dbos"}, "merge": true});
    ok(py_client(&db.url, APP, "update_attributes", merge).await);
    let both = json!({"origin": "rust", "by": "dbos"});
    assert_eq!(attributes_of(client, "rs").await, Some(both));
    client
        .merge_workflow_attributes("py", attrs(json!({"by": "stead"})))
        .await
        .unwrap();
    let filter = json!({"attributes": {"by": "stead"}});
    assert_eq!(
        ok(py_client(&db.url, APP, "list", filter).await),
        json!(["py"])
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

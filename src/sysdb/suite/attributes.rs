//! Workflow attributes: written at start, read back with the status, filtered in a listing,
//! replaced, merged and cleared, and copied by a fork.

use serde_json::{json, Value};

use super::{store_tests, workflow, Fixture, Kind};
use crate::sysdb::{AttributesUpdate, Fork, ListQuery, NewWorkflow};

store_tests!(
    attributes_are_written_read_and_filtered,
    attributes_are_replaced_merged_and_cleared,
);

fn with_attributes(id: &str, attributes: Value) -> NewWorkflow {
    NewWorkflow {
        attributes: Some(attributes.to_string()),
        ..workflow(id)
    }
}

async fn listed(f: &Fixture, filter: Option<Value>) -> Vec<String> {
    let q = ListQuery {
        attributes: filter.map(|v| v.to_string()),
        ..ListQuery::default()
    };
    let rows = f.store.list_workflows(&q).await.unwrap();
    rows.into_iter().map(|r| r.status.id).collect()
}

async fn attributes_of(f: &Fixture, id: &str) -> Option<Value> {
    let q = ListQuery {
        ids: Some(vec![id.into()]),
        ..ListQuery::default()
    };
    let mut rows = f.store.list_workflows(&q).await.unwrap();
    rows.pop().and_then(|r| r.status.attributes)
}

async fn attributes_are_written_read_and_filtered(kind: Kind) {
    let f = Fixture::new(kind).await;
    let acme = json!({"customer": "acme", "region": "eu", "n": 3, "vip": true, "x": null});
    f.start(&with_attributes("a", acme.clone())).await;
    f.start(&with_attributes(
        "b",
        json!({"customer": "globex", "region": "eu"}),
    ))
    .await;
    f.start(&workflow("c")).await;
    assert_eq!(attributes_of(&f, "a").await, Some(acme));
    assert_eq!(attributes_of(&f, "c").await, None);
    // Through the status read too.
    let status = f.store.status("b").await.unwrap().unwrap();
    assert_eq!(
        status.status.attributes,
        Some(json!({"customer": "globex", "region": "eu"}))
    );

    assert_eq!(listed(&f, None).await, vec!["a", "b", "c"]);
    assert_eq!(
        listed(&f, Some(json!({"region": "eu"}))).await,
        vec!["a", "b"]
    );
    let one = json!({"region": "eu", "customer": "acme"});
    assert_eq!(listed(&f, Some(one)).await, vec!["a"]);
    // Every JSON scalar type compares as itself: a number is not its text, true is not 1.
    assert_eq!(
        listed(&f, Some(json!({"n": 3, "vip": true}))).await,
        vec!["a"]
    );
    assert!(listed(&f, Some(json!({"n": "3"}))).await.is_empty());
    assert!(listed(&f, Some(json!({"vip": 1}))).await.is_empty());
    // A stored null matches null; a missing key does not.
    assert_eq!(listed(&f, Some(json!({"x": null}))).await, vec!["a"]);
    assert!(listed(&f, Some(json!({"missing": "k"}))).await.is_empty());
}

async fn attributes_are_replaced_merged_and_cleared(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.start(&with_attributes(
        "a",
        json!({"keep": 1, "over": {"deep": 1, "other": 2}}),
    ))
    .await;
    let merge = AttributesUpdate::Merge(json!({"over": {"deep": 2}, "new": null}).to_string());
    assert!(f.store.update_attributes("a", &merge).await.unwrap());
    // Top-level keys only: a nested object is replaced whole, null is stored.
    let merged = json!({"keep": 1, "over": {"deep": 2}, "new": null});
    assert_eq!(attributes_of(&f, "a").await, Some(merged));

    let fork = Fork {
        id: "a".into(),
        new_id: "a2".into(),
        queue: "q".into(),
        app_version: None,
        from_step: 1,
    };
    assert!(f.store.fork(&fork).await.unwrap().made);
    assert_eq!(attributes_of(&f, "a2").await, attributes_of(&f, "a").await);

    let replace = AttributesUpdate::Replace(Some(json!({"only": "this"}).to_string()));
    assert!(f.store.update_attributes("a", &replace).await.unwrap());
    assert_eq!(attributes_of(&f, "a").await, Some(json!({"only": "this"})));
    let clear = AttributesUpdate::Replace(None);
    assert!(f.store.update_attributes("a", &clear).await.unwrap());
    assert_eq!(attributes_of(&f, "a").await, None);
    // Merging into nothing (or into a value that is not an object) starts from {}.
    let merge = AttributesUpdate::Merge(json!({"k": "v"}).to_string());
    assert!(f.store.update_attributes("a", &merge).await.unwrap());
    assert_eq!(attributes_of(&f, "a").await, Some(json!({"k": "v"})));

    assert!(!f.store.update_attributes("nobody", &merge).await.unwrap());
}

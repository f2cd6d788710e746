//! Batch pages: the keyset, each action's rule, dry runs, idempotence.

use super::{enqueued, owner_of, store_tests, workflow, Fixture, Kind};
use crate::base::queue::INTERNAL_QUEUE;
use crate::sysdb::batch::BatchRow;
use crate::sysdb::{BatchAction, BatchPage, FinishWrite, ListQuery, NewWorkflow};

store_tests!(
    pages_follow_the_keyset_and_a_dry_run_changes_nothing,
    cancel_and_resume_apply_their_rules_once,
    delete_and_move_apply_their_rules_once,
);

/// Every page of `action` over the workflows named `name`, `size` at a time: the rows, by page.
async fn pages(
    f: &Fixture,
    action: BatchAction,
    name: &str,
    size: i64,
    dry_run: bool,
) -> Vec<Vec<BatchRow>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = BatchPage {
            filter: ListQuery {
                name: Some(name.into()),
                ..ListQuery::default()
            },
            action: action.clone(),
            after,
            size,
            dry_run,
        };
        let rows = f.store.batch_page(&page).await.unwrap();
        after = rows.last().map(|r| (r.created_at, r.id.clone()));
        let last = rows.len() < size as usize;
        out.push(rows);
        if last {
            return out;
        }
    }
}

fn changed(pages: &[Vec<BatchRow>]) -> Vec<&str> {
    let rows = pages.iter().flatten();
    rows.filter(|r| r.changed).map(|r| r.id.as_str()).collect()
}

fn named(id: &str, name: &str) -> NewWorkflow {
    NewWorkflow {
        name: name.into(),
        ..enqueued(id, "q")
    }
}

/// `a`: running; `b`: enqueued; `c`: cancelled; `d`: succeeded; `e`: delayed; all named `n`.
async fn seed(f: &Fixture) {
    f.start(&NewWorkflow {
        owner: Some(owner_of("a")),
        ..named("a", "n")
    })
    .await;
    f.start(&named("b", "n")).await;
    f.start(&named("c", "n")).await;
    f.store.cancel("c", false).await.unwrap();
    f.start(&NewWorkflow {
        owner: Some(owner_of("d")),
        ..named("d", "n")
    })
    .await;
    let finish = FinishWrite {
        workflow_id: "d".into(),
        owner: owner_of("d"),
        status: "SUCCESS",
        output: None,
        error: None,
        step: None,
    };
    f.session().await.finish(&[&finish]).await.unwrap();
    f.start(&NewWorkflow {
        delay_until: Some(crate::base::clock::now_ms() + 60_000),
        ..named("e", "n")
    })
    .await;
    f.start(&workflow("other")).await;
}

async fn status(f: &Fixture, id: &str) -> Option<String> {
    f.column(id, "status").await
}

async fn pages_follow_the_keyset_and_a_dry_run_changes_nothing(kind: Kind) {
    let f = Fixture::new(kind).await;
    seed(&f).await;
    let dry = pages(&f, BatchAction::Cancel, "n", 2, true).await;
    let seen: Vec<Vec<&str>> = dry
        .iter()
        .map(|p| p.iter().map(|r| r.id.as_str()).collect())
        .collect();
    assert_eq!(seen, [vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
    assert_eq!(changed(&dry), ["a", "b", "e"], "would cancel");
    for (id, want) in [("a", "PENDING"), ("b", "ENQUEUED"), ("e", "DELAYED")] {
        assert_eq!(status(&f, id).await.as_deref(), Some(want), "{id}");
    }
    // A move's dry run names the waiting and parked rows not yet on the version.
    let dry = pages(&f, BatchAction::Move("v1".into()), "n", 10, true).await;
    assert!(changed(&dry).is_empty(), "all are on v1 already");
    let dry = pages(&f, BatchAction::Move("v2".into()), "n", 10, true).await;
    assert_eq!(changed(&dry), ["b", "c", "e"]);
    assert_eq!(
        f.column("b", "application_version").await.as_deref(),
        Some("v1")
    );
}

async fn cancel_and_resume_apply_their_rules_once(kind: Kind) {
    let f = Fixture::new(kind).await;
    seed(&f).await;
    let done = pages(&f, BatchAction::Cancel, "n", 2, false).await;
    assert_eq!(changed(&done), ["a", "b", "e"]);
    for id in ["a", "b", "c", "e"] {
        assert_eq!(status(&f, id).await.as_deref(), Some("CANCELLED"), "{id}");
    }
    assert_eq!(status(&f, "d").await.as_deref(), Some("SUCCESS"));
    assert_eq!(status(&f, "other").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(f.column("a", "owner_xid").await, None);
    assert_eq!(f.column("b", "queue_name").await, None);
    // Again: nothing left to cancel.
    let again = pages(&f, BatchAction::Cancel, "n", 2, false).await;
    assert!(changed(&again).is_empty());

    let resume = BatchAction::Resume(INTERNAL_QUEUE.into());
    let done = pages(&f, resume.clone(), "n", 3, false).await;
    assert_eq!(changed(&done), ["a", "b", "c", "e"]);
    let rows: Vec<&BatchRow> = done.iter().flatten().filter(|r| r.changed).collect();
    assert!(rows
        .iter()
        .all(|r| r.queue.as_deref() == Some(INTERNAL_QUEUE)));
    for id in ["a", "b", "c", "e"] {
        assert_eq!(status(&f, id).await.as_deref(), Some("ENQUEUED"), "{id}");
        assert_eq!(
            f.column(id, "queue_name").await.as_deref(),
            Some(INTERNAL_QUEUE)
        );
    }
    // Resumed work is not resumed again (a second run would take over its executions).
    assert!(changed(&pages(&f, resume, "n", 3, false).await).is_empty());
}

async fn delete_and_move_apply_their_rules_once(kind: Kind) {
    let f = Fixture::new(kind).await;
    seed(&f).await;
    f.store.cancel("b", false).await.unwrap();
    let to_v2 = BatchAction::Move("v2".into());
    let done = pages(&f, to_v2.clone(), "n", 2, false).await;
    assert_eq!(changed(&done), ["b", "c", "e"]);
    let version = |id| f.column(id, "application_version");
    for (id, want) in [
        ("a", "v1"),
        ("b", "v2"),
        ("c", "v2"),
        ("d", "v1"),
        ("e", "v2"),
    ] {
        assert_eq!(version(id).await.as_deref(), Some(want), "{id}");
    }
    assert_eq!(status(&f, "e").await.as_deref(), Some("DELAYED"), "kept");
    assert!(changed(&pages(&f, to_v2, "n", 2, false).await).is_empty());

    let done = pages(&f, BatchAction::Delete, "n", 2, false).await;
    assert_eq!(changed(&done), ["a", "b", "c", "d", "e"]);
    for id in ["a", "b", "c", "d", "e"] {
        assert_eq!(status(&f, id).await, None, "{id}");
        assert_eq!(f.rows_of("workflow_input", id).await, 0);
    }
    assert_eq!(status(&f, "other").await.as_deref(), Some("ENQUEUED"));
    let again = pages(&f, BatchAction::Delete, "n", 2, false).await;
    assert_eq!(again, [Vec::<BatchRow>::new()]);
}

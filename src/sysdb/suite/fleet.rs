//! The fleet: liveness locks, the roster, adoption and stranded work. Postgres has a fleet;
//! SQLite's one executor has none (its file lock is its liveness), so there the roster stays
//! empty and nothing is adopted or stranded.

use std::time::Duration;

use super::{store_tests, workflow, Fixture, Kind};
use crate::base::queue::INTERNAL_QUEUE;
use crate::sysdb::dispatch::Executor;
use crate::sysdb::{Adoption, Member, NewWorkflow, Store};

store_tests!(a_dead_executors_work_is_adopted_once_and_a_retired_versions_is_stranded);

fn me() -> Executor<'static> {
    Executor {
        executor_id: "e1",
        app_version: "v1",
        app_name: None,
    }
}

/// A roster row for `id` of `version` with no lease, so it is quiet half a second after its
/// last ping.
fn member(id: &str, version: &str) -> Member {
    Member {
        executor_id: id.into(),
        host: "h".into(),
        pid: 1,
        app_name: None,
        app_version: version.into(),
        lease_ms: 0,
    }
}

fn pending(id: &str, executor: &str, version: &str) -> NewWorkflow {
    NewWorkflow {
        owner: Some(format!("owner-{id}")),
        executor_id: executor.into(),
        app_version: Some(version.into()),
        ..workflow(id)
    }
}

async fn live(store: &dyn Store, id: &str) -> Option<bool> {
    let all = store.list_executors(None).await.unwrap();
    all.iter().find(|e| e.executor_id == id).map(|e| e.live)
}

async fn a_dead_executors_work_is_adopted_once_and_a_retired_versions_is_stranded(kind: Kind) {
    let f = Fixture::new(kind).await;
    let names = ["wf".to_string()];
    let adoption = |dead| Adoption {
        me: me(),
        dead,
        names: &names,
    };
    let mut lease = f.store.hold("dead", 10_000).await.unwrap().expect("free");
    lease.register(&member("dead", "v1")).await.unwrap();
    lease.ping("dead").await.unwrap();
    f.start(&pending("w", "dead", "v1")).await;
    let unregistered = NewWorkflow {
        name: "unregistered".into(),
        ..pending("other-name", "dead", "v1")
    };
    f.start(&unregistered).await;
    if f.is_sqlite() {
        assert!(f.store.list_executors(None).await.unwrap().is_empty());
        assert!(f.store.adoptable(&me()).await.unwrap().is_empty());
        assert!(f.store.stranded(None).await.unwrap().is_empty());
        assert_eq!(f.store.move_stranded(&["w".into()], "v2").await.unwrap(), 0);
        return;
    }
    // A held id cannot be taken twice, and its holder is listed live with its work.
    assert!(f.store.hold("dead", 10_000).await.unwrap().is_none());
    let listed = f.store.list_executors(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].live && listed[0].pending == 2 && listed[0].app_version == "v1");
    assert_eq!(f.store.live_executors(None).await.unwrap(), 1);
    assert_eq!(
        f.store.live_executors(Some("another app")).await.unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        f.store.adoptable(&me()).await.unwrap().is_empty(),
        "it lives"
    );
    assert_eq!(f.store.adopt(&adoption("dead")).await.unwrap(), None);

    // Its session ends: it is dead, and quiet half a second after its last ping.
    drop(lease);
    for _ in 0..50 {
        if live(&*f.store, "dead").await == Some(false) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(f.store.adoptable(&me()).await.unwrap(), vec!["dead"]);
    let adopted = f.store.adopt(&adoption("dead")).await.unwrap().unwrap();
    assert_eq!(adopted.workflows, 1, "only names this executor registered");
    assert_eq!(adopted.queues, vec![INTERNAL_QUEUE.to_string()]);
    assert_eq!(f.column("w", "status").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(f.column("w", "owner_xid").await, None);
    assert_eq!(
        f.column("other-name", "status").await.as_deref(),
        Some("PENDING")
    );
    // A second adopter finds nothing left; a relaunch under the id is refused nothing.
    let again = f.store.adopt(&adoption("dead")).await.unwrap().unwrap();
    assert_eq!(again.workflows, 0);
    let relaunch = f.store.hold("dead", 10_000).await.unwrap();
    assert!(
        relaunch.is_some(),
        "the adopter's lock lasted one transaction"
    );
    drop(relaunch);

    // An executor of a version nobody serves any more: its work is stranded until moved
    // (while "dead"'s unregistered workflow of v1 is not: a live executor serves v1).
    let mut e1 = f.store.hold("e1", 10_000).await.unwrap().unwrap();
    e1.register(&member("e1", "v1")).await.unwrap();
    let mut old = f.store.hold("old", 10_000).await.unwrap().unwrap();
    old.register(&member("old", "v0")).await.unwrap();
    f.start(&pending("s", "old", "v0")).await;
    assert!(f.store.stranded(None).await.unwrap().is_empty(), "it lives");
    assert_eq!(f.store.live_executors(None).await.unwrap(), 2);
    drop(old);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stranded = f.store.stranded(None).await.unwrap();
    assert_eq!(stranded, vec!["s".to_string()]);
    assert_eq!(f.store.move_stranded(&stranded, "v1").await.unwrap(), 1);
    assert_eq!(f.column("s", "status").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(
        f.column("s", "application_version").await.as_deref(),
        Some("v1")
    );
    assert!(f.store.stranded(None).await.unwrap().is_empty());
    drop(e1);
}

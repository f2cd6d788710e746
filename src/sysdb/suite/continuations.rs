//! Continue-as-new: one transaction ends a run with the marker, creates its next run and links
//! them; a retry is recognised; a cancelled, taken or clashing run writes nothing.

use super::{owner_of, store_tests, workflow, Fixture, Kind};
use crate::base::clock::now_ms;
use crate::base::continuation::marker;
use crate::sysdb::{next_created_at, ContinueOutcome, ContinueWrite, NewWorkflow};

store_tests!(
    a_run_continues_once_into_a_linked_run,
    a_run_that_cannot_continue_writes_nothing,
    a_schema_without_the_link_table_reads_without_links,
);

fn write(id: &str, owner: &str, next_owner: &str) -> ContinueWrite {
    ContinueWrite {
        workflow_id: id.into(),
        owner: owner.into(),
        inputs: r#"{"positionalArgs":[2],"namedArgs":{}}"#.into(),
        next_owner: next_owner.into(),
        executor_id: "e1".into(),
        created_at: next_created_at(),
        now: now_ms(),
    }
}

fn continued(outcome: ContinueOutcome) -> crate::sysdb::Continued {
    match outcome {
        ContinueOutcome::Continued(c) => c,
        other => panic!("not continued: {other:?}"),
    }
}

async fn a_run_continues_once_into_a_linked_run(kind: Kind) {
    let f = Fixture::new(kind).await;
    let a = NewWorkflow {
        owner: Some(owner_of("a")),
        timeout_ms: Some(5_000),
        attributes: Some(r#"{"tenant":"t1"}"#.into()),
        ..workflow("a")
    };
    f.start(&a).await;
    let w = write("a", &owner_of("a"), "n1");
    let next = continued(f.store.continue_as_new(&w).await.unwrap());
    assert_eq!(
        (next.next_id.as_str(), next.queue.as_deref()),
        ("a-can-1", None)
    );
    assert!(
        next.deadline.is_some_and(|d| d >= w.now + 5_000),
        "a direct run's own deadline"
    );
    assert_eq!(f.column("a", "status").await.as_deref(), Some("SUCCESS"));
    assert_eq!(f.column("a", "output").await, Some(marker("a-can-1")));
    assert_eq!(f.column("a", "owner_xid").await, None);
    assert_eq!(
        f.column("a-can-1", "status").await.as_deref(),
        Some("PENDING")
    );
    assert_eq!(
        f.column("a-can-1", "owner_xid").await.as_deref(),
        Some("n1")
    );
    assert_eq!(f.column("a-can-1", "name").await.as_deref(), Some("wf"));
    assert_eq!(
        f.column("a-can-1", "inputs").await.as_deref(),
        Some(w.inputs.as_str())
    );
    assert_eq!(
        f.column("a-can-1", "application_version").await.as_deref(),
        Some("v1")
    );
    assert!(f
        .column("a-can-1", "attributes")
        .await
        .is_some_and(|a| a.contains("t1")));
    // The reply lost, the same write again: recognised, nothing new.
    let again = continued(f.store.continue_as_new(&w).await.unwrap());
    assert_eq!(again, next);
    // The chain goes on from its root.
    let next2 = continued(
        f.store
            .continue_as_new(&write("a-can-1", "n1", "n2"))
            .await
            .unwrap(),
    );
    assert_eq!(next2.next_id, "a-can-2");
    let links = "SELECT count(*) FROM dbos.stead_continuations WHERE root_id = 'a'";
    assert_eq!(f.int(links).await, Some(2));
    let row = f.store.status("a-can-1").await.unwrap().unwrap();
    assert_eq!(row.status.continued_from.as_deref(), Some("a"));
    assert_eq!(row.status.continued_as.as_deref(), Some("a-can-2"));
    // A run taken from a queue continues on it, enqueued for any executor.
    let q = NewWorkflow {
        owner: Some(owner_of("q")),
        queue: Some("jobs".into()),
        ..workflow("q")
    };
    f.start(&q).await;
    let next = continued(
        f.store
            .continue_as_new(&write("q", &owner_of("q"), "n3"))
            .await
            .unwrap(),
    );
    assert_eq!(next.queue.as_deref(), Some("jobs"));
    assert_eq!(
        f.column("q-can-1", "status").await.as_deref(),
        Some("ENQUEUED")
    );
    assert_eq!(f.column("q-can-1", "owner_xid").await, None);
}

async fn a_run_that_cannot_continue_writes_nothing(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("b").await;
    let taken = f
        .store
        .continue_as_new(&write("b", "someone-else", "n"))
        .await
        .unwrap();
    assert_eq!(taken, ContinueOutcome::NotOwner);
    f.running("b-can-1").await;
    let clash = f
        .store
        .continue_as_new(&write("b", &owner_of("b"), "n"))
        .await
        .unwrap();
    assert_eq!(clash, ContinueOutcome::Exists("b-can-1".into()));
    assert_eq!(f.column("b", "status").await.as_deref(), Some("PENDING"));
    f.running("c").await;
    f.store.cancel("c", false).await.unwrap();
    let cancelled = f
        .store
        .continue_as_new(&write("c", &owner_of("c"), "n"))
        .await
        .unwrap();
    assert_eq!(cancelled, ContinueOutcome::Cancelled);
    assert_eq!(f.column("c-can-1", "status").await, None);
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.stead_continuations").await,
        Some(0)
    );
}

/// A schema only DBOS migrated (no `stead_continuations`), read by a client (which never
/// migrates): its status and listings read as before, without links.
async fn a_schema_without_the_link_table_reads_without_links(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("d").await;
    let drop = "DROP TABLE dbos.stead_continuations";
    match (f.pg_pool(), f.sqlite_pool()) {
        (Some(pg), _) => drop_table(&pg, drop).await,
        (_, Some(lite)) => drop_table(&lite, &drop.replace("dbos.", "")).await,
        _ => unreachable!(),
    }
    let client = f.reconnect().await;
    assert_eq!(client.schema_version().await.unwrap(), Some(125));
    let row = client.status("d").await.unwrap().unwrap();
    assert_eq!(
        (row.status.continued_from, row.status.continued_as),
        (None, None)
    );
    let listed = client.list_workflows(&Default::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
}

async fn drop_table<'a, E>(pool: E, sql: &str)
where
    E: sqlx::Executor<'a>,
{
    pool.execute(sqlx::AssertSqlSafe(sql.to_owned()))
        .await
        .unwrap();
}

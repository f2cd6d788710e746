//! Definitions and housekeeping: queues, schedules, application versions, the schema,
//! debouncing, garbage collection, and the store's own lifecycle.

use std::time::Duration;

use super::{claim_of, enqueued, owner_of, store_tests, Fixture, Kind};
use crate::base::clock::now_ms;
use crate::base::overlap::Overlap;
use crate::base::queue::Queue;
use crate::sysdb::{
    Bounce, Bounced, FinishWrite, Firings, NewWorkflow, QueueDeletion, ScheduleRow,
};

store_tests!(
    queues_are_written_listed_replaced_and_deleted,
    schedules_are_written_paused_fired_and_deleted,
    schedule_policies_are_stored_and_applied_by_the_firing,
    versions_register_once_and_promote,
    migrate_brings_an_empty_database_to_the_dbos_layout_once,
    debounce_creates_extends_and_releases_its_key,
    garbage_collection_deletes_only_finished_workflows,
    sessions_and_the_executor_lock,
);

async fn queues_are_written_listed_replaced_and_deleted(kind: Kind) {
    let f = Fixture::new(kind).await;
    let q = Queue::new("orders")
        .concurrency(5)
        .worker_concurrency(2)
        .rate_limit(10, Duration::from_secs(2))
        .priority_enabled(true);
    assert_eq!(
        f.store.put_queue(&q, Some("shop"), false).await.unwrap(),
        Some(true)
    );
    let shared = Queue::new("mail");
    assert_eq!(
        f.store.put_queue(&shared, None, false).await.unwrap(),
        Some(true)
    );
    let theirs = Queue::new("billing");
    f.store
        .put_queue(&theirs, Some("other"), false)
        .await
        .unwrap();
    let listed = f.store.list_queues(Some("shop")).await.unwrap();
    assert_eq!(listed, vec![shared.clone(), q.clone()]);
    let every = f.store.list_all_queues().await.unwrap();
    assert_eq!(
        every,
        vec![
            (Some("other".into()), theirs.clone()),
            (None, shared.clone()),
            (Some("shop".into()), q.clone()),
        ]
    );
    // Left alone unless replacing.
    let changed = Queue::new("orders").concurrency(1);
    assert_eq!(
        f.store
            .put_queue(&changed, Some("shop"), false)
            .await
            .unwrap(),
        None
    );
    assert_eq!(f.store.list_queues(Some("shop")).await.unwrap()[1], q);
    assert_eq!(
        f.store
            .put_queue(&changed, Some("shop"), true)
            .await
            .unwrap(),
        Some(false)
    );
    assert_eq!(f.store.list_queues(Some("shop")).await.unwrap()[1], changed);
    // A workflow waiting on the queue keeps it: nothing else would ever run it.
    f.start(&enqueued("waits", "orders")).await;
    assert_eq!(
        f.store.delete_queue("orders").await.unwrap(),
        QueueDeletion::Waiting(1)
    );
    assert_eq!(f.store.list_queues(Some("shop")).await.unwrap()[1], changed);
    f.store.cancel("waits", false).await.unwrap();
    assert_eq!(
        f.store.delete_queue("orders").await.unwrap(),
        QueueDeletion::Deleted
    );
    assert_eq!(
        f.store.delete_queue("orders").await.unwrap(),
        QueueDeletion::Missing
    );
    assert_eq!(
        f.store.list_queues(Some("shop")).await.unwrap(),
        vec![shared]
    );
}

fn schedule(name: &str) -> ScheduleRow {
    ScheduleRow {
        id: format!("id-{name}"),
        name: name.into(),
        workflow: "report".into(),
        class_name: None,
        cron: "0 * * * *".into(),
        status: "ACTIVE".into(),
        context: "null".into(),
        last_fired_at: None,
        automatic_backfill: false,
        timezone: Some("Europe/Paris".into()),
        queue: None,
        app_name: Some("shop".into()),
        overlap: Default::default(),
        jitter_ms: 0,
    }
}

async fn schedules_are_written_paused_fired_and_deleted(kind: Kind) {
    let f = Fixture::new(kind).await;
    let s = schedule("hourly");
    assert_eq!(f.store.put_schedule(&s, false).await.unwrap(), Some(true));
    assert_eq!(f.store.put_schedule(&s, false).await.unwrap(), None);
    // A replacement keeps the id and status.
    let edited = ScheduleRow {
        id: "another id".into(),
        cron: "*/5 * * * *".into(),
        status: "PAUSED".into(),
        ..schedule("hourly")
    };
    assert_eq!(
        f.store.put_schedule(&edited, true).await.unwrap(),
        Some(false)
    );
    let got = f.store.get_schedule("hourly").await.unwrap().unwrap();
    assert_eq!(
        (got.id.as_str(), got.cron.as_str()),
        ("id-hourly", "*/5 * * * *")
    );
    assert_eq!(got.status, "ACTIVE");
    assert!(f
        .store
        .set_schedule_status("hourly", "PAUSED")
        .await
        .unwrap());
    assert!(!f
        .store
        .set_schedule_status("nothing", "PAUSED")
        .await
        .unwrap());
    let mut other_app = schedule("theirs");
    other_app.app_name = Some("other".into());
    f.store.put_schedule(&other_app, false).await.unwrap();
    let listed = f.store.list_schedules(Some("shop")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, "PAUSED");

    let firings = Firings {
        schedule: "hourly".into(),
        workflow: "report".into(),
        class_name: None,
        queue: "q".into(),
        app_version: Some("v1".into()),
        app_name: Some("shop".into()),
        runs: vec![
            ("sched-hourly-1".into(), "[1]".into(), None),
            ("sched-hourly-2".into(), "[2]".into(), None),
        ],
        overlap: Default::default(),
        last_fired_at: Some("2026-01-01T10:00:00+00:00".into()),
    };
    assert_eq!(f.store.fire_schedule(&firings).await.unwrap().created, 2);
    assert_eq!(
        f.store.fire_schedule(&firings).await.unwrap().created,
        0,
        "a firing is enqueued once"
    );
    assert_eq!(
        f.column("sched-hourly-2", "schedule_name").await.as_deref(),
        Some("hourly")
    );
    let first: i64 = f
        .column("sched-hourly-1", "created_at")
        .await
        .unwrap()
        .parse()
        .unwrap();
    let second: i64 = f
        .column("sched-hourly-2", "created_at")
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(first < second, "a backfill keeps its order");
    let shop = crate::sysdb::ClaimRequest {
        app_name: Some("shop".into()),
        ..claim_of(Queue::new("q"), 10)
    };
    let out = f.claim(&shop).await;
    assert_eq!(super::ids(&out), vec!["sched-hourly-1", "sched-hourly-2"]);
    assert_eq!(out.claimed[0].inputs.as_deref(), Some("[1]"));
    let fired = f.store.get_schedule("hourly").await.unwrap().unwrap();
    assert_eq!(fired.last_fired_at, firings.last_fired_at);
    assert!(f.store.delete_schedule("hourly").await.unwrap());
    assert!(!f.store.delete_schedule("hourly").await.unwrap());
    assert!(f.store.get_schedule("hourly").await.unwrap().is_none());
    assert_eq!(
        f.column("sched-hourly-1", "status").await.as_deref(),
        Some("PENDING")
    );
}

async fn schedule_policies_are_stored_and_applied_by_the_firing(kind: Kind) {
    let f = Fixture::new(kind).await;
    let s = ScheduleRow {
        overlap: Overlap::Skip,
        jitter_ms: 5000,
        ..schedule("p")
    };
    f.store.put_schedule(&s, false).await.unwrap();
    let got = f.store.get_schedule("p").await.unwrap().unwrap();
    assert_eq!((got.overlap, got.jitter_ms), (Overlap::Skip, 5000));
    // A definition left alone keeps its policy; a replacement writes its own.
    let plain = schedule("p");
    assert_eq!(f.store.put_schedule(&plain, false).await.unwrap(), None);
    assert_eq!(
        f.store.get_schedule("p").await.unwrap().unwrap().overlap,
        Overlap::Skip
    );
    f.store.put_schedule(&plain, true).await.unwrap();
    let got = f.store.list_schedules(Some("shop")).await.unwrap();
    assert_eq!((got[0].overlap, got[0].jitter_ms), (Overlap::AllowAll, 0));
    let fire = |runs: &[&str], due: Option<i64>| Firings {
        schedule: "p".into(),
        workflow: "report".into(),
        class_name: None,
        queue: "q".into(),
        app_version: None,
        app_name: Some("shop".into()),
        runs: runs
            .iter()
            .map(|id| ((*id).to_owned(), "[]".to_owned(), due))
            .collect(),
        overlap: Overlap::CancelOther,
        last_fired_at: None,
    };
    let first = f.store.fire_schedule(&fire(&["p-1"], None)).await.unwrap();
    assert_eq!((first.created, first.others.len()), (1, 0));
    // The latest new run is enqueued; the unfinished one is named for cancelling.
    let second = f
        .store
        .fire_schedule(&fire(&["p-2", "p-3"], Some(now_ms() + 60_000)))
        .await
        .unwrap();
    assert_eq!((second.created, second.others), (1, vec!["p-1".to_owned()]));
    assert_eq!(f.column("p-2", "status").await, None);
    assert_eq!(f.column("p-3", "status").await.as_deref(), Some("DELAYED"));
    let again = f.store.fire_schedule(&fire(&["p-3"], None)).await.unwrap();
    assert_eq!(again, Default::default(), "a re-fire cancels nothing");
    let skip = Firings {
        overlap: Overlap::Skip,
        ..fire(&["p-4"], None)
    };
    let skipped = f.store.fire_schedule(&skip).await.unwrap();
    assert_eq!((skipped.created, skipped.held), (0, 1), "p-3 waits");
    // Deleting the schedule deletes its policy.
    f.store.put_schedule(&s, true).await.unwrap();
    assert!(f.store.delete_schedule("p").await.unwrap());
    f.store.put_schedule(&plain, false).await.unwrap();
    assert_eq!(
        f.store.get_schedule("p").await.unwrap().unwrap().overlap,
        Overlap::AllowAll
    );
}

async fn versions_register_once_and_promote(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.store.register_version("v1", Some("shop")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    f.store.register_version("v2", Some("shop")).await.unwrap();
    f.store.register_version("v1", Some("shop")).await.unwrap();
    f.store.register_version("v9", None).await.unwrap();
    let names =
        |v: Vec<crate::sysdb::AppVersion>| v.into_iter().map(|v| v.name).collect::<Vec<_>>();
    let listed = f.store.list_versions(Some("shop")).await.unwrap();
    assert_eq!(listed[0].app_name.as_deref(), Some("shop"));
    assert_eq!(names(listed), vec!["v2", "v1"]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(f.store.promote_version("v1", Some("shop")).await.unwrap());
    assert_eq!(
        names(f.store.list_versions(Some("shop")).await.unwrap()),
        vec!["v1", "v2"]
    );
    assert!(!f.store.promote_version("v3", Some("shop")).await.unwrap());
    assert_eq!(
        names(f.store.list_versions(None).await.unwrap()),
        vec!["v9"]
    );
}

async fn migrate_brings_an_empty_database_to_the_dbos_layout_once(kind: Kind) {
    let f = Fixture::empty(kind).await;
    assert_eq!(f.store.schema_version().await.unwrap(), None);
    let first = f.store.migrate().await.unwrap();
    assert!(first.applied);
    assert_eq!((first.found_version, first.version), (None, 125));
    assert_eq!(f.store.schema_version().await.unwrap(), Some(125));
    let again = f.store.migrate().await.unwrap();
    assert!(!again.applied);
    assert_eq!(again.found_version, Some(125));
    // The layout works: a row goes in.
    assert_eq!(
        f.start(&enqueued("a", "q")).await,
        crate::sysdb::StartOutcome::Created
    );
}

fn bounce(id: &str, run_at: i64, deadline: Option<i64>, inputs: &str) -> Bounce {
    Bounce {
        id: id.into(),
        workflow: "wf".into(),
        queue: "q".into(),
        dedup_id: "wf-key".into(),
        run_at,
        deadline,
        inputs: inputs.into(),
        timeout_ms: None,
        app_version: Some("v1".into()),
        app_name: None,
        now: now_ms(),
    }
}

async fn debounce_creates_extends_and_releases_its_key(kind: Kind) {
    let f = Fixture::new(kind).await;
    let now = now_ms();
    let deadline = now + 10_000;
    let first = f
        .store
        .bounce(&bounce("d1", now + 1000, Some(deadline), "[1]"))
        .await
        .unwrap();
    assert_eq!(first, Bounced::Created("d1".into()));
    assert_eq!(f.column("d1", "status").await.as_deref(), Some("DELAYED"));
    // A later call pushes it back (capped at the deadline) and replaces the input.
    let second = f
        .store
        .bounce(&bounce("d2", now + 60_000, None, "[2]"))
        .await
        .unwrap();
    assert_eq!(second, Bounced::Extended("d1".into()));
    assert_eq!(
        f.column("d1", "delay_until_epoch_ms").await,
        Some(deadline.to_string())
    );
    assert_eq!(
        f.text("SELECT inputs FROM dbos.workflow_input WHERE workflow_uuid = 'd1'")
            .await
            .as_deref(),
        Some("[2]")
    );
    assert_eq!(f.column("d2", "status").await, None);
    // A key held by a workflow that is not debounced is a conflict.
    let holder = NewWorkflow {
        dedup_id: Some("other-key".into()),
        ..enqueued("plain", "q")
    };
    f.start(&holder).await;
    let conflict = Bounce {
        dedup_id: "other-key".into(),
        ..bounce("d3", now, None, "[3]")
    };
    assert!(matches!(
        f.store.bounce(&conflict).await.unwrap(),
        Bounced::Conflict { ref holder, debounced: false, .. } if holder == "plain"
    ));
    // An id that exists is reported.
    let reused = Bounce {
        dedup_id: "fresh-key".into(),
        ..bounce("plain", now, None, "[4]")
    };
    assert!(matches!(
        f.store.bounce(&reused).await.unwrap(),
        Bounced::Existing { name: Some(_) }
    ));
    // Once the run leaves DELAYED (the claim promotes it), the key is free again.
    f.store.set_delay("d1", now_ms() - 1).await.unwrap();
    assert_eq!(f.claim(&claim_of(Queue::new("q"), 0)).await.promoted, 1);
    assert_eq!(f.column("d1", "deduplication_id").await, None);
    let next = f
        .store
        .bounce(&bounce("d5", now + 1000, None, "[5]"))
        .await
        .unwrap();
    assert_eq!(next, Bounced::Created("d5".into()));
}

async fn garbage_collection_deletes_only_finished_workflows(kind: Kind) {
    let f = Fixture::new(kind).await;
    let hour = 3_600_000;
    let old = now_ms() - 48 * hour;
    for (id, created) in [("old", old), ("older", old - 1), ("new", now_ms())] {
        let w = NewWorkflow {
            owner: Some(owner_of(id)),
            created_at: created,
            ..super::workflow(id)
        };
        f.start(&w).await;
        f.step(id, 1, "1").await;
        let done = FinishWrite {
            workflow_id: id.into(),
            owner: owner_of(id),
            status: "SUCCESS",
            output: Some("1".into()),
            error: None,
            step: None,
        };
        f.session().await.finish(&[&done]).await.unwrap();
    }
    let running = NewWorkflow {
        created_at: old - 2,
        ..super::workflow("running")
    };
    f.start(&running).await;
    assert_eq!(f.store.garbage_collect(None, None).await.unwrap(), 0);
    assert_eq!(
        f.store
            .garbage_collect(Some(now_ms() - hour), None)
            .await
            .unwrap(),
        2
    );
    assert_eq!(f.column("old", "status").await, None);
    assert_eq!(f.rows_of("operation_outputs", "old").await, 0);
    assert_eq!(f.rows_of("workflow_output", "old").await, 0);
    assert_eq!(
        f.column("running", "status").await.as_deref(),
        Some("ENQUEUED")
    );
    assert_eq!(f.column("new", "status").await.as_deref(), Some("SUCCESS"));
    // Keeping the newest none deletes every finished one left.
    assert_eq!(f.store.garbage_collect(None, Some(0)).await.unwrap(), 1);
    assert_eq!(
        f.column("running", "status").await.as_deref(),
        Some("ENQUEUED")
    );
}

async fn sessions_and_the_executor_lock(kind: Kind) {
    let f = Fixture::new(kind).await;
    assert_eq!(f.store.is_embedded(), f.is_sqlite());
    // Two sessions at once (two lanes) both write.
    let (mut one, mut two) = (f.session().await, f.session().await);
    let (a, b) = (enqueued("a", "q"), enqueued("b", "q"));
    let (a, b) = ([&a], [&b]);
    let (ra, rb) = tokio::join!(one.start(&a), two.start(&b));
    assert!(ra.is_ok() && rb.is_ok());
    // An embedded database serves one executor; Postgres serves a fleet.
    f.store.lock_for_executor().unwrap();
    let other = f.reconnect().await;
    assert_eq!(other.lock_for_executor().is_err(), f.is_sqlite());
    other.close().await;
    f.store.close_now();
    assert!(f.store.ping().await.is_err(), "closed stores refuse calls");
}

//! The claim rules of `sysdb::claim`, and dispatch outside claims: recovery, take-backs and
//! restart counts.

use std::time::Duration;

use super::{claim_of, enqueued, ids, owner_of, store_tests, workflow, Fixture, Kind};
use crate::base::clock::now_ms;
use crate::base::queue::{Queue, INTERNAL_QUEUE};
use crate::sysdb::{Executor, NewWorkflow};

store_tests!(
    claims_take_priority_then_fifo_and_report_what_waits,
    claims_stop_at_free_slots_and_global_concurrency,
    claims_stop_at_the_rate_limit_and_say_when_it_frees,
    claims_promote_due_delayed_rows_and_report_the_next,
    claims_report_when_taken_rows_were_ready,
    a_survey_counts_what_waits_and_finds_rows_below_a_floor,
    claims_respect_versions_and_application_names,
    claims_respect_partition_limits,
    claims_set_a_deadline_from_the_timeout,
    a_claim_from_a_floor_passes_over_what_lies_below_it,
    recover_requeues_this_executors_pending_workflows,
    redispatch_takes_back_what_no_actor_runs,
    bump_attempts_counts_only_for_the_owner,
    adopt_inputs_rewrites_a_foreign_rows_inputs_for_its_owner_only,
);

fn with_priority(id: &str, priority: i32) -> NewWorkflow {
    NewWorkflow {
        priority,
        ..enqueued(id, "q")
    }
}

async fn claims_take_priority_then_fifo_and_report_what_waits(kind: Kind) {
    let f = Fixture::new(kind).await;
    for (id, priority) in [("a", 5), ("b", 1), ("c", 5), ("d", 1)] {
        f.start(&with_priority(id, priority)).await;
    }
    let out = f.claim(&claim_of(Queue::new("q"), 3)).await;
    assert_eq!(ids(&out), vec!["b", "d", "a"]);
    assert_eq!((out.allowed, out.seen), (3, 4));
    assert!(!out.rate_limited);
    let b = &out.claimed[0];
    assert_eq!(b.name, "wf");
    assert_eq!(b.recovery_attempts, 1);
    assert_eq!(
        b.inputs.as_deref(),
        Some(r#"{"positionalArgs":[1],"namedArgs":{}}"#)
    );
    assert!(!b.has_steps);
    assert_eq!(f.column("b", "status").await.as_deref(), Some("PENDING"));
    assert_eq!(f.column("b", "owner_xid").await, Some(b.owner.clone()));
    assert_eq!(f.column("b", "executor_id").await.as_deref(), Some("e1"));
    assert!(f.column("b", "started_at_epoch_ms").await.is_some());
    // A row is taken once: the next claim gets the rest.
    let rest = f.claim(&claim_of(Queue::new("q"), 3)).await;
    assert_eq!(ids(&rest), vec!["c"]);
    assert_eq!(rest.seen, 1);
    let none = f.claim(&claim_of(Queue::new("q"), 3)).await;
    assert!(none.claimed.is_empty());
    assert_eq!((none.seen, none.next_due), (0, None));
}

async fn a_claim_from_a_floor_passes_over_what_lies_below_it(kind: Kind) {
    let f = Fixture::new(kind).await;
    for (id, priority) in [("old", 5), ("mid", 5), ("new", 5), ("urgent", 1)] {
        f.start(&with_priority(id, priority)).await;
    }
    let created = |id: &'static str| {
        let f = &f;
        async move {
            let at = f.column(id, "created_at").await.unwrap_or_default();
            at.parse::<i64>().unwrap()
        }
    };
    let floored = crate::sysdb::ClaimRequest {
        floor: Some((5, created("mid").await)),
        ..claim_of(Queue::new("q"), 10)
    };
    let out = f.claim(&floored).await;
    if f.is_sqlite() {
        // One writer and no row versions to pass: SQLite reads the whole queue.
        assert_eq!(ids(&out), vec!["urgent", "old", "mid", "new"]);
        assert_eq!(out.head, None);
        return;
    }
    // A more urgent row is taken below the floor; a row of the floor's priority is not.
    assert_eq!(ids(&out), vec!["urgent", "mid", "new"]);
    assert_eq!(out.seen, 3);
    assert_eq!(out.head, Some((1, created("urgent").await)));
    assert_eq!(f.column("old", "status").await.as_deref(), Some("ENQUEUED"));
    // A claim without a floor takes what lay below it.
    let rest = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!(ids(&rest), vec!["old"]);
    assert_eq!(rest.head, Some((5, created("old").await)));
}

async fn claims_stop_at_free_slots_and_global_concurrency(kind: Kind) {
    let f = Fixture::new(kind).await;
    for id in ["a", "b", "c", "d"] {
        f.start(&enqueued(id, "q")).await;
    }
    // The caller's slots (worker concurrency) bound the claim.
    let out = f.claim(&claim_of(Queue::new("q"), 1)).await;
    assert_eq!(ids(&out), vec!["a"]);
    assert_eq!(out.seen, 2, "counted up to one more than it could take");
    // Global concurrency counts every executor's running rows: one runs, so one more.
    let limited = Queue::new("q").concurrency(2);
    let out = f.claim(&claim_of(limited.clone(), 10)).await;
    assert_eq!((ids(&out), out.allowed), (vec!["b"], 1));
    let out = f.claim(&claim_of(limited, 10)).await;
    assert_eq!((out.claimed.len(), out.allowed), (0, 0));
    assert!(!out.rate_limited);
}

async fn claims_stop_at_the_rate_limit_and_say_when_it_frees(kind: Kind) {
    let f = Fixture::new(kind).await;
    for id in ["a", "b", "c"] {
        f.start(&enqueued(id, "q")).await;
    }
    let queue = Queue::new("q").rate_limit(2, Duration::from_secs(60));
    let before = now_ms();
    let out = f.claim(&claim_of(queue.clone(), 10)).await;
    assert_eq!(ids(&out), vec!["a", "b"]);
    assert!(out.rate_limited);
    assert_eq!(
        f.column("a", "rate_limited")
            .await
            .map(|v| v == "1" || v == "true"),
        Some(true)
    );
    let out = f.claim(&claim_of(queue, 10)).await;
    assert!(out.claimed.is_empty());
    assert_eq!(out.allowed, 0);
    assert!(out.rate_limited);
    let frees = out.rate_free_at.expect("when the window frees a start");
    assert!(
        frees >= before + 60_000 && frees <= now_ms() + 60_000,
        "{frees}"
    );
}

async fn claims_promote_due_delayed_rows_and_report_the_next(kind: Kind) {
    let f = Fixture::new(kind).await;
    let later = now_ms() + 60_000;
    let due = NewWorkflow {
        delay_until: Some(now_ms() - 1),
        ..enqueued("due", "q")
    };
    let waiting = NewWorkflow {
        delay_until: Some(later),
        ..enqueued("waiting", "q")
    };
    f.start(&due).await;
    f.start(&waiting).await;
    let out = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!(out.promoted, 1);
    assert!(out.claimed.is_empty(), "promoted rows go to the next claim");
    assert_eq!(out.next_due, Some(later));
    assert_eq!(f.column("due", "status").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(
        f.column("waiting", "status").await.as_deref(),
        Some("DELAYED")
    );
    let next = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!((ids(&next), next.promoted), (vec!["due"], 0));
}

/// What the start delay histogram reads: a row is ready when enqueued, or when due if delayed.
async fn claims_report_when_taken_rows_were_ready(kind: Kind) {
    let f = Fixture::new(kind).await;
    let t = now_ms() - 60_000;
    f.start(&NewWorkflow {
        created_at: t,
        ..enqueued("now", "q")
    })
    .await;
    let out = f.claim(&claim_of(Queue::new("q"), 1)).await;
    assert_eq!(out.claimed[0].ready_at, t);
    // A debounced row's `created_at` is its first call's; it was ready when it came due.
    let due = NewWorkflow {
        created_at: t,
        delay_until: Some(t + 50_000),
        ..enqueued("due", "q")
    };
    f.start(&due).await;
    assert_eq!(f.claim(&claim_of(Queue::new("q"), 10)).await.promoted, 1);
    let out = f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!(ids(&out), vec!["due"]);
    assert_eq!(out.claimed[0].ready_at, t + 50_000);
}

/// What a queue actor's survey reads (`sysdb::claim`, "Surveys"): the depth, the oldest row by
/// age whatever its priority (the lag gauge), and whether a row of the floor's priority waits
/// below the floor.
async fn a_survey_counts_what_waits_and_finds_rows_below_a_floor(kind: Kind) {
    let f = Fixture::new(kind).await;
    let none = f.store.waiting("q", None).await.unwrap();
    assert_eq!(none, crate::sysdb::Waiting::default());
    let t = now_ms() - 60_000;
    let row = |id: &str, priority, created_at| NewWorkflow {
        priority,
        created_at,
        ..enqueued(id, "q")
    };
    f.start(&row("old", 5, t)).await;
    f.start(&row("urgent", 1, t + 10_000)).await;
    f.start(&row("next", 1, t + 20_000)).await;
    f.start(&enqueued("elsewhere", "other")).await;
    let w = f.store.waiting("q", None).await.unwrap();
    assert_eq!((w.enqueued, w.oldest, w.below_floor), (3, Some(t), false));
    // Below a floor only at the floor's own priority: more urgent rows are always claimed.
    let store = &f.store;
    let below = |floor| async move { store.waiting("q", Some(floor)).await.unwrap().below_floor };
    assert!(below((5, t + 1)).await);
    assert!(!below((5, t)).await, "a row at the floor is above it");
    assert!(!below((9, t + 30_000)).await);
    assert!(below((1, t + 15_000)).await);
    f.claim(&claim_of(Queue::new("q"), 10)).await;
    assert_eq!(
        f.store.waiting("q", None).await.unwrap(),
        crate::sysdb::Waiting::default()
    );
}

async fn claims_respect_versions_and_application_names(kind: Kind) {
    let f = Fixture::new(kind).await;
    let row = |id: &str, version: Option<&str>, app: Option<&str>| NewWorkflow {
        app_version: version.map(Into::into),
        app_name: app.map(Into::into),
        ..enqueued(id, "q")
    };
    f.start(&row("mine", Some("v1"), None)).await;
    f.start(&row("theirs", Some("v0"), None)).await;
    f.start(&row("anyone", None, None)).await;
    f.start(&row("other-app", Some("v1"), Some("billing")))
        .await;
    // No newer version registered: v1 may run unversioned work.
    f.store.register_version("v1", None).await.unwrap();
    let out = f.claim(&claim_of(Queue::new("q"), 10)).await;
    let mut got = ids(&out);
    got.sort();
    assert_eq!(got, vec!["anyone", "mine"]);
    // Once a newer version exists, unversioned work is the newer version's.
    f.start(&row("later", None, None)).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    f.store.register_version("v2", None).await.unwrap();
    assert!(f
        .claim(&claim_of(Queue::new("q"), 10))
        .await
        .claimed
        .is_empty());
    let v2 = crate::sysdb::ClaimRequest {
        app_version: "v2".into(),
        ..claim_of(Queue::new("q"), 10)
    };
    assert_eq!(ids(&f.claim(&v2).await), vec!["later"]);
    assert_eq!(
        f.column("later", "application_version").await.as_deref(),
        Some("v2")
    );
    // Another application's work is not claimed.
    assert_eq!(
        f.column("other-app", "status").await.as_deref(),
        Some("ENQUEUED")
    );
}

async fn claims_respect_partition_limits(kind: Kind) {
    let f = Fixture::new(kind).await;
    for (id, key) in [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("b2", "b"),
        ("c1", "c"),
    ] {
        let w = NewWorkflow {
            partition_key: Some(key.into()),
            ..enqueued(id, "p")
        };
        f.start(&w).await;
    }
    let queue = Queue {
        partitioned: true,
        partition_concurrency: Some(1),
        ..Queue::new("p")
    };
    let out = f.claim(&claim_of(queue.clone(), 10)).await;
    assert_eq!(ids(&out), vec!["a1", "b1", "c1"]);
    // Each partition runs one: nothing more until one finishes.
    assert!(f.claim(&claim_of(queue, 10)).await.claimed.is_empty());
    // Worker concurrency per partition counts this executor's rows only.
    let mine = Queue {
        partitioned: true,
        partition_worker_concurrency: Some(2),
        ..Queue::new("p")
    };
    assert_eq!(ids(&f.claim(&claim_of(mine, 10)).await), vec!["a2", "b2"]);
}

async fn claims_set_a_deadline_from_the_timeout(kind: Kind) {
    let f = Fixture::new(kind).await;
    let timed = NewWorkflow {
        timeout_ms: Some(10_000),
        ..enqueued("t", "q")
    };
    f.start(&timed).await;
    let request = claim_of(Queue::new("q"), 1);
    let out = f.claim(&request).await;
    assert_eq!(out.claimed[0].deadline, Some(request.now + 10_000));
}

fn me() -> Executor<'static> {
    Executor {
        executor_id: "e1",
        app_version: "v1",
        app_name: None,
    }
}

async fn recover_requeues_this_executors_pending_workflows(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("direct").await;
    f.start(&enqueued("queued", "q")).await;
    f.claim(&claim_of(Queue::new("q"), 1)).await;
    let elsewhere = NewWorkflow {
        owner: Some("x".into()),
        executor_id: "e2".into(),
        ..workflow("elsewhere")
    };
    f.start(&elsewhere).await;
    assert_eq!(f.store.recover(&me(), false).await.unwrap(), 2);
    assert_eq!(
        f.column("direct", "status").await.as_deref(),
        Some("ENQUEUED")
    );
    assert_eq!(
        f.column("direct", "queue_name").await.as_deref(),
        Some(INTERNAL_QUEUE)
    );
    assert_eq!(f.column("direct", "owner_xid").await, None);
    assert_eq!(f.column("queued", "queue_name").await.as_deref(), Some("q"));
    assert_eq!(
        f.column("elsewhere", "status").await.as_deref(),
        Some("PENDING")
    );
    // An embedded database's relaunch recovers every executor id's work.
    assert_eq!(f.store.recover(&me(), true).await.unwrap(), 1);
    assert_eq!(
        f.column("elsewhere", "status").await.as_deref(),
        Some("ENQUEUED")
    );
}

async fn redispatch_takes_back_what_no_actor_runs(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("direct").await;
    f.start(&with_priority("late", 2)).await;
    f.start(&with_priority("early", 1)).await;
    f.claim(&claim_of(Queue::new("q"), 10)).await;
    let decided = now_ms() + 1;
    let taken = f
        .store
        .redispatch(&me(), "q", false, &["late".to_owned()], decided)
        .await
        .unwrap();
    assert_eq!(
        taken.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        vec!["early"]
    );
    assert_eq!(taken[0].recovery_attempts, 2);
    assert_eq!(
        f.column("early", "owner_xid").await,
        Some(taken[0].owner.clone())
    );
    // Direct starts belong to the internal queue's take-back only.
    assert!(f
        .store
        .redispatch(&me(), INTERNAL_QUEUE, false, &[], decided)
        .await
        .unwrap()
        .is_empty());
    // A row written after the take-back was decided is a run its snapshot could not know.
    assert!(f
        .store
        .redispatch(&me(), INTERNAL_QUEUE, true, &[], decided - 60_000)
        .await
        .unwrap()
        .is_empty());
    let direct = f
        .store
        .redispatch(&me(), INTERNAL_QUEUE, true, &[], decided)
        .await
        .unwrap();
    assert_eq!(direct.len(), 1);
    assert_eq!(direct[0].id, "direct");
    assert_ne!(direct[0].owner, owner_of("direct"));
}

async fn bump_attempts_counts_only_for_the_owner(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    assert_eq!(
        f.store.bump_attempts("a", &owner_of("a")).await.unwrap(),
        Some(2)
    );
    assert_eq!(
        f.store.bump_attempts("a", "someone else").await.unwrap(),
        None
    );
    assert_eq!(f.store.bump_attempts("missing", "x").await.unwrap(), None);
    assert_eq!(
        f.column("a", "recovery_attempts").await.as_deref(),
        Some("2")
    );
}

/// A workflow DBOS enqueued in its own format, run here: its inputs become the portable
/// envelope where they are stored, and its row `portable_json`; only by its owner.
async fn adopt_inputs_rewrites_a_foreign_rows_inputs_for_its_owner_only(kind: Kind) {
    // It shapes a foreign row itself, in the home: one bucket.
    let f = Fixture::new(kind.one_bucket()).await;
    let envelope = r#"{"positionalArgs":[1,"a"],"namedArgs":{}}"#;
    // Inputs in the status row.
    f.running("a").await;
    f.exec(
        "UPDATE dbos.workflow_status SET serialization = 'py_pickle', inputs = 'gAJOLg==' \
         WHERE workflow_uuid = 'a'",
    )
    .await;
    assert!(!f
        .store
        .adopt_inputs("a", "someone else", Some(envelope))
        .await
        .unwrap());
    assert_eq!(
        f.column("a", "serialization").await.as_deref(),
        Some("py_pickle")
    );
    assert!(f
        .store
        .adopt_inputs("a", &owner_of("a"), Some(envelope))
        .await
        .unwrap());
    assert_eq!(
        f.column("a", "serialization").await.as_deref(),
        Some("portable_json")
    );
    assert_eq!(f.column("a", "inputs").await.as_deref(), Some(envelope));
    // Inputs in a `workflow_input` row, as DBOS 3.4 and DBOS TypeScript write them.
    f.running("b").await;
    f.exec(
        "UPDATE dbos.workflow_status SET serialization = 'js_superjson', inputs = NULL \
         WHERE workflow_uuid = 'b'",
    )
    .await;
    f.exec(
        "INSERT INTO dbos.workflow_input (workflow_uuid, inputs) \
         VALUES ('b', '{\"json\":[1,\"a\"],\"__dbos_serializer\":\"superjson\"}')",
    )
    .await;
    assert!(f
        .store
        .adopt_inputs("b", &owner_of("b"), Some(envelope))
        .await
        .unwrap());
    assert_eq!(
        f.column("b", "serialization").await.as_deref(),
        Some("portable_json")
    );
    assert_eq!(
        f.column("b", "inputs").await,
        None,
        "the status row gains no copy"
    );
    let stored = f
        .text("SELECT inputs FROM dbos.workflow_input WHERE workflow_uuid = 'b'")
        .await;
    assert_eq!(stored.as_deref(), Some(envelope));
    let status = f.store.status("b").await.unwrap().unwrap();
    assert_eq!(status.serialization.as_deref(), Some("portable_json"));
    assert!(!f
        .store
        .adopt_inputs("missing", "x", Some(envelope))
        .await
        .unwrap());
    // Inputs stead could not read stay as they were; the row is portable (its error will be).
    f.running("c").await;
    let pickled = "gASVBQAAAAAAAACMAXiULg==";
    f.exec(&format!(
        "UPDATE dbos.workflow_status SET serialization = 'py_pickle', inputs = '{pickled}' \
         WHERE workflow_uuid = 'c'"
    ))
    .await;
    assert!(f
        .store
        .adopt_inputs("c", &owner_of("c"), None)
        .await
        .unwrap());
    assert_eq!(
        f.column("c", "serialization").await.as_deref(),
        Some("portable_json")
    );
    assert_eq!(f.column("c", "inputs").await.as_deref(), Some(pickled));
}

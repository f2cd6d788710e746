//! Cancellation and management: list, steps, resume, fork, delete, set_delay.

use super::{enqueued, owner_of, step_write, store_tests, workflow, Fixture, Kind};
use crate::base::clock::now_ms;
use crate::base::queue::INTERNAL_QUEUE;
use crate::sysdb::{
    Fork, HeldRun, ListQuery, NewWorkflow, Op, OpStep, StatusCount, StepOutcome, StepQuery,
    StepWrite,
};

store_tests!(
    cancel_stops_a_workflow_and_when_asked_its_descendants,
    lost_runs_are_those_whose_row_moved_on,
    list_filters_orders_and_pages,
    count_groups_the_listed_workflows_by_status,
    list_steps_shows_every_recorded_call,
    list_steps_pages_with_or_without_outputs,
    resume_requeues_unless_finished,
    fork_copies_the_history_before_the_step,
    delete_removes_every_row_of_the_tree,
    set_delay_moves_only_a_delayed_workflow,
);

fn child_of(id: &str, parent: &str) -> NewWorkflow {
    NewWorkflow {
        parent: Some(parent.into()),
        ..enqueued(id, "q")
    }
}

async fn cancel_stops_a_workflow_and_when_asked_its_descendants(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("p").await;
    f.start(&child_of("c", "p")).await;
    f.start(&child_of("g", "c")).await;
    let mut got = f.store.cancel("p", false).await.unwrap();
    assert!(got.exists);
    assert_eq!(got.ids, vec!["p"]);
    assert_eq!(f.column("p", "status").await.as_deref(), Some("CANCELLED"));
    assert_eq!(f.column("p", "owner_xid").await, None);
    // DBOS's cancelled row: no start time (it leaves rate-limit windows), a completion time.
    assert_eq!(f.column("p", "started_at_epoch_ms").await, None);
    assert!(f.column("p", "completed_at").await.is_some());
    assert_eq!(f.column("c", "status").await.as_deref(), Some("ENQUEUED"));
    // A cascade reaches every descendant; the parent, already cancelled, is cancelled again
    // (a new completion time), as DBOS leaves only succeeded and failed rows alone.
    got = f.store.cancel("p", true).await.unwrap();
    got.ids.sort();
    assert_eq!(got.ids, vec!["c", "g", "p"]);
    assert_eq!(f.column("g", "status").await.as_deref(), Some("CANCELLED"));
    assert_eq!(f.column("g", "queue_name").await, None);
    let missing = f.store.cancel("nobody", true).await.unwrap();
    assert!(!missing.exists && missing.ids.is_empty());
}

async fn lost_runs_are_those_whose_row_moved_on(kind: Kind) {
    let f = Fixture::new(kind).await;
    for id in ["kept", "cancelled", "taken"] {
        f.running(id).await;
    }
    f.store.cancel("cancelled", false).await.unwrap();
    let held = |id: &str, owner: String| HeldRun {
        id: id.into(),
        owner,
    };
    let runs = [
        held("kept", owner_of("kept")),
        held("cancelled", owner_of("cancelled")),
        held("taken", "an older owner".into()),
        held("not-written-yet", "o".into()),
    ];
    let mut lost = f.store.lost_runs(&runs).await.unwrap();
    lost.sort_by(|a, b| a.id.cmp(&b.id));
    let lost: Vec<(&str, &str, &str)> = lost
        .iter()
        .map(|l| (l.id.as_str(), l.owner.as_str(), l.status.as_str()))
        .collect();
    assert_eq!(
        lost,
        [
            ("cancelled", "owner-cancelled", "CANCELLED"),
            ("taken", "an older owner", "PENDING")
        ]
    );
    assert!(f.store.lost_runs(&[]).await.unwrap().is_empty());
}

async fn list_filters_orders_and_pages(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    let b = NewWorkflow {
        name: "other".into(),
        ..child_of("b", "a")
    };
    f.start(&b).await;
    let c = NewWorkflow {
        app_version: Some("v2".into()),
        executor_id: "e2".into(),
        owner: Some("x".into()),
        ..workflow("c")
    };
    f.start(&c).await;
    let list = |q: ListQuery| {
        let store = f.store.clone();
        async move {
            let rows = store.list_workflows(&q).await.unwrap();
            rows.into_iter().map(|r| r.status.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(list(ListQuery::default()).await, vec!["a", "b", "c"]);
    let newest = ListQuery {
        newest_first: true,
        limit: Some(2),
        ..ListQuery::default()
    };
    assert_eq!(list(newest).await, vec!["c", "b"]);
    let page = ListQuery {
        limit: Some(1),
        offset: 1,
        ..ListQuery::default()
    };
    assert_eq!(list(page).await, vec!["b"]);
    let filters = [
        ListQuery {
            ids: Some(vec!["a".into(), "c".into()]),
            ..ListQuery::default()
        },
        ListQuery {
            statuses: Some(vec!["ENQUEUED".into()]),
            ..ListQuery::default()
        },
        ListQuery {
            name: Some("other".into()),
            ..ListQuery::default()
        },
        ListQuery {
            queue: Some("q".into()),
            ..ListQuery::default()
        },
        ListQuery {
            app_version: Some("v2".into()),
            ..ListQuery::default()
        },
        ListQuery {
            parent: Some("a".into()),
            ..ListQuery::default()
        },
        ListQuery {
            executor: Some("e2".into()),
            ..ListQuery::default()
        },
        ListQuery {
            queued_only: true,
            ..ListQuery::default()
        },
    ];
    let expected: [&[&str]; 8] = [
        &["a", "c"],
        &["b"],
        &["b"],
        &["b"],
        &["c"],
        &["b"],
        &["c"],
        &["b"],
    ];
    for (q, want) in filters.into_iter().zip(expected) {
        let described = format!("{q:?}");
        assert_eq!(list(q).await, want, "{described}");
    }
    let created_b: i64 = f.column("b", "created_at").await.unwrap().parse().unwrap();
    let window = ListQuery {
        created_from: Some(created_b),
        created_until: Some(created_b + 1),
        ..ListQuery::default()
    };
    assert_eq!(list(window).await, vec!["b"]);
    // Payloads only when asked.
    let bare = f.store.list_workflows(&ListQuery::default()).await.unwrap();
    assert_eq!(bare[0].inputs, None);
    let full = ListQuery {
        payloads: true,
        ..ListQuery::default()
    };
    let full = f.store.list_workflows(&full).await.unwrap();
    assert!(full[0]
        .inputs
        .as_deref()
        .unwrap()
        .contains("positionalArgs"));
    assert_eq!(full[0].serialization.as_deref(), Some("portable_json"));
    assert_eq!(full[1].status.parent_workflow_id.as_deref(), Some("a"));
}

async fn count_groups_the_listed_workflows_by_status(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    f.start(&child_of("b", "a")).await;
    f.start(&enqueued("c", "other")).await;
    let count = |q: ListQuery| {
        let store = f.store.clone();
        async move {
            let mut counts = store.count_workflows(&q).await.unwrap();
            counts.sort_by(|x, y| x.status.cmp(&y.status));
            counts
        }
    };
    let of = |status: &str, count: i64| StatusCount {
        status: status.into(),
        count,
    };
    assert_eq!(
        count(ListQuery::default()).await,
        vec![of("ENQUEUED", 2), of("PENDING", 1)]
    );
    // The listing's filters apply; its paging does not.
    let on_q = ListQuery {
        queue: Some("q".into()),
        limit: Some(1),
        offset: 5,
        ..ListQuery::default()
    };
    assert_eq!(count(on_q).await, vec![of("ENQUEUED", 1)]);
    let pending = ListQuery {
        statuses: Some(vec!["PENDING".into()]),
        ..ListQuery::default()
    };
    assert_eq!(count(pending).await, vec![of("PENDING", 1)]);
    let nobody = ListQuery {
        app_name: Some("none".into()),
        ..ListQuery::default()
    };
    assert_eq!(count(nobody).await, vec![]);
}

async fn list_steps_shows_every_recorded_call(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    assert_eq!(f.step("a", 2, "\"two\"").await, StepOutcome::Recorded);
    assert_eq!(f.step("a", 1, "\"one\"").await, StepOutcome::Recorded);
    let steps = f.store.list_steps("a", &StepQuery::ALL).await.unwrap();
    let got: Vec<(i32, &str)> = steps
        .iter()
        .map(|s| (s.function_id, s.output.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(got, vec![(1, "\"one\""), (2, "\"two\"")]);
    assert_eq!(steps[0].name, "step");
    assert!(steps[0].started_at.is_some() && steps[0].completed_at.is_some());
    assert_eq!(steps[0].output_bytes, Some(5));
    let nobody = f.store.list_steps("nobody", &StepQuery::ALL).await;
    assert!(nobody.unwrap().is_empty());
}

async fn list_steps_pages_with_or_without_outputs(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    // A large output, a failed call and small ones (multi-byte text is counted in bytes).
    let large = format!("\"{}\"", "x".repeat(300_000));
    let failed = StepWrite {
        output: None,
        error: Some("{\"message\":\"no\"}".into()),
        ..step_write("a", 3, "")
    };
    let mut session = f.session().await;
    let writes = [
        step_write("a", 1, "\"é\""),
        step_write("a", 2, &large),
        failed,
        step_write("a", 4, "4"),
        step_write("a", 5, "5"),
    ];
    let outcomes = session.checkpoint(&writes.iter().collect::<Vec<_>>()).await;
    assert!(outcomes
        .unwrap()
        .iter()
        .all(|o| *o == StepOutcome::Recorded));

    // Pages of two, each above the last one's final id, cover every call once, in order.
    let mut seen = Vec::new();
    let mut after = i32::MIN;
    loop {
        let q = StepQuery {
            outputs: false,
            after,
            limit: Some(2),
        };
        let page = f.store.list_steps("a", &q).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = last.function_id;
        seen.extend(page);
    }
    let ids: Vec<i32> = seen.iter().map(|s| s.function_id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert!(seen.iter().all(|s| s.output.is_none() && s.error.is_none()));
    let sizes: Vec<_> = seen
        .iter()
        .map(|s| (s.output_bytes, s.error_bytes))
        .collect();
    assert_eq!(
        sizes,
        [
            (Some(4), None),
            (Some(300_002), None),
            (None, Some(16)),
            (Some(1), None),
            (Some(1), None),
        ]
    );

    // One call with its output: the page of one above the id before it.
    let one = StepQuery {
        outputs: true,
        after: 1,
        limit: Some(1),
    };
    let got = f.store.list_steps("a", &one).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].function_id, got[0].output.as_deref()),
        (2, Some(large.as_str()))
    );
    let one = StepQuery { after: 2, ..one };
    let got = f.store.list_steps("a", &one).await.unwrap();
    assert_eq!(got[0].error.as_deref(), Some("{\"message\":\"no\"}"));
}

async fn resume_requeues_unless_finished(kind: Kind) {
    let f = Fixture::new(kind).await;
    let timed = NewWorkflow {
        owner: Some(owner_of("a")),
        deadline: Some(now_ms() + 1000),
        ..workflow("a")
    };
    f.start(&timed).await;
    let resumed = f.store.resume("a", INTERNAL_QUEUE).await.unwrap();
    assert!(resumed.exists && resumed.requeued);
    assert_eq!(resumed.previous_owner, Some(owner_of("a")));
    assert_eq!(f.column("a", "status").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(
        f.column("a", "queue_name").await.as_deref(),
        Some(INTERNAL_QUEUE)
    );
    assert_eq!(
        f.column("a", "recovery_attempts").await.as_deref(),
        Some("0")
    );
    assert_eq!(f.column("a", "workflow_deadline_epoch_ms").await, None);
    assert_eq!(f.column("a", "owner_xid").await, None);
    // A finished workflow is left as it is.
    f.running("done").await;
    let finish = crate::sysdb::FinishWrite {
        workflow_id: "done".into(),
        owner: owner_of("done"),
        status: "SUCCESS",
        output: None,
        error: None,
        step: None,
    };
    f.session().await.finish(&[&finish]).await.unwrap();
    let done = f.store.resume("done", INTERNAL_QUEUE).await.unwrap();
    assert!(done.exists && !done.requeued);
    assert_eq!(f.column("done", "status").await.as_deref(), Some("SUCCESS"));
    assert!(
        !f.store
            .resume("nobody", INTERNAL_QUEUE)
            .await
            .unwrap()
            .exists
    );
}

async fn fork_copies_the_history_before_the_step(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("o").await;
    f.step("o", 1, "\"one\"").await;
    let op = |fid, op: fn(OpStep) -> Op| {
        op(OpStep {
            workflow_id: "o".into(),
            owner: owner_of("o"),
            function_id: fid,
            started_at: now_ms(),
            app_name: None,
        })
    };
    let event = op(2, |step| Op::SetEvent {
        step,
        key: "k".into(),
        value: "\"v2\"".into(),
    });
    let stream = op(3, |step| Op::WriteStream {
        step,
        key: "s".into(),
        value: "0".into(),
        close: false,
    });
    let late_event = op(4, |step| Op::SetEvent {
        step,
        key: "k".into(),
        value: "\"v4\"".into(),
    });
    f.session()
        .await
        .ops(&[&event, &stream, &late_event])
        .await
        .unwrap();
    let fork = Fork {
        id: "o".into(),
        new_id: "copy".into(),
        queue: "q".into(),
        app_version: Some("v9".into()),
        from_step: 4,
    };
    let forked = f.store.fork(&fork).await.unwrap();
    assert!(forked.exists && forked.made);
    assert_eq!(
        f.column("copy", "status").await.as_deref(),
        Some("ENQUEUED")
    );
    assert_eq!(f.column("copy", "queue_name").await.as_deref(), Some("q"));
    assert_eq!(f.column("copy", "forked_from").await.as_deref(), Some("o"));
    assert_eq!(
        f.column("copy", "application_version").await.as_deref(),
        Some("v9")
    );
    assert!(f.column("copy", "inputs").await.is_some());
    assert_eq!(
        f.column("copy", "inputs").await,
        f.column("o", "inputs").await
    );
    assert_eq!(f.rows_of("operation_outputs", "copy").await, 3);
    assert_eq!(f.rows_of("streams", "copy").await, 1);
    let event = f.store.get_event("copy", "k").await.unwrap();
    assert_eq!(event.map(|(v, _)| v).as_deref(), Some("\"v2\""));
    assert_eq!(
        f.column("o", "was_forked_from")
            .await
            .map(|v| v == "1" || v == "true"),
        Some(true)
    );
    // The same fork again makes nothing; a missing original is reported.
    assert!(!f.store.fork(&fork).await.unwrap().made);
    let nothing = Fork {
        id: "nobody".into(),
        new_id: "copy2".into(),
        ..fork
    };
    assert!(!f.store.fork(&nothing).await.unwrap().exists);
}

async fn delete_removes_every_row_of_the_tree(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("p").await;
    f.step("p", 1, "1").await;
    f.start(&child_of("c", "p")).await;
    let alone = f.store.delete_workflow("p", false).await.unwrap();
    assert_eq!(alone, vec!["p"]);
    assert_eq!(f.column("p", "status").await, None);
    assert_eq!(f.rows_of("operation_outputs", "p").await, 0);
    assert_eq!(f.rows_of("workflow_input", "p").await, 0);
    assert_eq!(f.column("c", "status").await.as_deref(), Some("ENQUEUED"));
    f.running("p2").await;
    f.start(&child_of("c2", "p2")).await;
    let mut tree = f.store.delete_workflow("p2", true).await.unwrap();
    tree.sort();
    assert_eq!(tree, vec!["c2", "p2"]);
    assert!(f
        .store
        .delete_workflow("nobody", true)
        .await
        .unwrap()
        .is_empty());
}

async fn set_delay_moves_only_a_delayed_workflow(kind: Kind) {
    let f = Fixture::new(kind).await;
    let delayed = NewWorkflow {
        delay_until: Some(now_ms() + 60_000),
        ..enqueued("d", "q")
    };
    f.start(&delayed).await;
    let until = now_ms() + 5;
    let found = f.store.set_delay("d", until).await.unwrap().unwrap();
    assert_eq!(found.status.as_deref(), Some("DELAYED"));
    assert_eq!(found.queue.as_deref(), Some("q"));
    assert_eq!(
        f.column("d", "delay_until_epoch_ms").await,
        Some(until.to_string())
    );
    f.start(&enqueued("e", "q")).await;
    let other = f.store.set_delay("e", until).await.unwrap().unwrap();
    assert_eq!(other.status.as_deref(), Some("ENQUEUED"));
    assert_eq!(f.column("e", "delay_until_epoch_ms").await, None);
    assert!(f.store.set_delay("nobody", until).await.unwrap().is_none());
}

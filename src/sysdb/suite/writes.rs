//! The lanes' writes: starts, checkpoints, finishes, step loads and ops (and a send from
//! outside a workflow, the ops' pool twin).

use super::{enqueued, owner_of, step_write, store_tests, workflow, Fixture, Kind};
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::{
    FinishOutcome, FinishWrite, NewWorkflow, Op, OpOutcome, OpStep, OutgoingMessage, StartOutcome,
    StepOutcome,
};

store_tests!(
    start_creates_owns_and_reports_existing_rows,
    start_reports_a_held_deduplication_id,
    start_answers_a_batch_that_repeats_a_key,
    checkpoint_records_once_and_only_for_the_owner,
    finish_records_the_outcome_once_and_only_for_the_owner,
    finish_replaces_the_outcome_a_payload_row_holds,
    finish_writes_a_held_back_step_with_the_outcome_or_neither,
    ops_commit_their_effect_with_their_record,
    recv_takes_the_oldest_message_or_gives_up,
    send_from_outside_is_idempotent_and_needs_a_destination,
);

async fn start_creates_owns_and_reports_existing_rows(kind: Kind) {
    let f = Fixture::new(kind).await;
    let direct = NewWorkflow {
        owner: Some("o1".into()),
        timeout_ms: Some(60_000),
        deadline: Some(now_ms() + 60_000),
        ..workflow("a")
    };
    assert_eq!(f.start(&direct).await, StartOutcome::Created);
    assert_eq!(f.column("a", "status").await.as_deref(), Some("PENDING"));
    assert_eq!(f.column("a", "owner_xid").await.as_deref(), Some("o1"));
    assert_eq!(f.column("a", "executor_id").await.as_deref(), Some("e1"));
    assert_eq!(
        f.column("a", "recovery_attempts").await.as_deref(),
        Some("1")
    );
    assert_eq!(
        f.column("a", "serialization").await.as_deref(),
        Some("portable_json")
    );
    assert!(f.column("a", "workflow_deadline_epoch_ms").await.is_some());
    // Inputs are in the status row (`sysdb::start`): no payload row.
    assert!(f.column("a", "inputs").await.is_some());
    assert_eq!(f.rows_of("workflow_input", "a").await, 0);
    // The same request again (a retry after a lost answer) is still ours.
    assert_eq!(f.start(&direct).await, StartOutcome::Created);
    // Another owner finds the row.
    let other = NewWorkflow {
        owner: Some("o2".into()),
        name: "other".into(),
        ..workflow("a")
    };
    assert_eq!(
        f.start(&other).await,
        StartOutcome::Existing {
            name: "wf".into(),
            status: "PENDING".into()
        }
    );
    // Enqueues wait, and are owned by nobody.
    assert_eq!(f.start(&enqueued("b", "q")).await, StartOutcome::Created);
    assert_eq!(f.column("b", "status").await.as_deref(), Some("ENQUEUED"));
    assert_eq!(f.column("b", "owner_xid").await, None);
    assert_eq!(
        f.column("b", "recovery_attempts").await.as_deref(),
        Some("0")
    );
    let delayed = NewWorkflow {
        delay_until: Some(now_ms() + 60_000),
        ..enqueued("c", "q")
    };
    assert_eq!(f.start(&delayed).await, StartOutcome::Created);
    assert_eq!(f.column("c", "status").await.as_deref(), Some("DELAYED"));
}

async fn start_reports_a_held_deduplication_id(kind: Kind) {
    let f = Fixture::new(kind).await;
    let first = NewWorkflow {
        dedup_id: Some("k".into()),
        ..enqueued("a", "q")
    };
    assert_eq!(f.start(&first).await, StartOutcome::Created);
    let second = NewWorkflow {
        dedup_id: Some("k".into()),
        ..enqueued("b", "q")
    };
    assert_eq!(
        f.start(&second).await,
        StartOutcome::Duplicate { holder: "a".into() }
    );
    assert_eq!(f.column("b", "status").await, None);
    // The key is per queue.
    let elsewhere = NewWorkflow {
        dedup_id: Some("k".into()),
        ..enqueued("c", "other")
    };
    assert_eq!(f.start(&elsewhere).await, StartOutcome::Created);
}

async fn start_answers_a_batch_that_repeats_a_key(kind: Kind) {
    let f = Fixture::new(kind).await;
    let a = enqueued("a", "q");
    let again = NewWorkflow {
        name: "second".into(),
        ..enqueued("a", "q")
    };
    let keyed = |id: &str| NewWorkflow {
        dedup_id: Some("k".into()),
        ..enqueued(id, "q")
    };
    let (b, c) = (keyed("b"), keyed("c"));
    let mut session = f.session().await;
    let out = session.start(&[&a, &again, &b, &c]).await.unwrap();
    assert_eq!(
        out,
        vec![
            StartOutcome::Created,
            StartOutcome::Existing {
                name: "wf".into(),
                status: "ENQUEUED".into()
            },
            StartOutcome::Created,
            StartOutcome::Duplicate { holder: "b".into() },
        ]
    );
    assert_eq!(f.column("a", "name").await.as_deref(), Some("wf"));
}

async fn checkpoint_records_once_and_only_for_the_owner(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    f.running("b").await;
    let mut session = f.session().await;
    let (a1, b1) = (step_write("a", 1, "\"one\""), step_write("b", 1, "\"uno\""));
    assert_eq!(
        session.checkpoint(&[&a1, &b1]).await.unwrap(),
        vec![StepOutcome::Recorded, StepOutcome::Recorded]
    );
    assert_eq!(
        f.text("SELECT output FROM dbos.operation_outputs WHERE workflow_uuid = 'a'")
            .await
            .as_deref(),
        Some("\"one\"")
    );
    // Recorded before: the first value stands.
    let retry = step_write("a", 1, "\"other\"");
    assert_eq!(
        session.checkpoint(&[&retry]).await.unwrap(),
        vec![StepOutcome::AlreadyRecorded {
            output: Some("\"one\"".into()),
            error: None,
            serialization: Some("portable_json".into()),
        }]
    );
    // Another owner writes nothing.
    let stranger = crate::sysdb::StepWrite {
        owner: "someone else".into(),
        ..step_write("a", 2, "\"x\"")
    };
    assert_eq!(
        session.checkpoint(&[&stranger]).await.unwrap(),
        vec![StepOutcome::NotOwner]
    );
    // Even for a step already recorded: a stale run never takes another run's record as its
    // own (and so never goes on to its next step).
    let stale = crate::sysdb::StepWrite {
        owner: "someone else".into(),
        ..step_write("a", 1, "\"one\"")
    };
    assert_eq!(
        session.checkpoint(&[&stale]).await.unwrap(),
        vec![StepOutcome::NotOwner]
    );
    f.store.cancel("b", false).await.unwrap();
    let late = step_write("b", 2, "\"late\"");
    assert_eq!(
        session.checkpoint(&[&late]).await.unwrap(),
        vec![StepOutcome::Cancelled]
    );
    assert_eq!(f.rows_of("operation_outputs", "a").await, 1);
    assert_eq!(f.rows_of("operation_outputs", "b").await, 1);
}

fn finish_of(id: &str, status: &'static str) -> FinishWrite {
    FinishWrite {
        workflow_id: id.into(),
        owner: owner_of(id),
        status,
        output: Some("\"done\"".into()),
        error: None,
        step: None,
    }
}

async fn finish_writes_a_held_back_step_with_the_outcome_or_neither(kind: Kind) {
    let f = Fixture::new(kind).await;
    for id in ["a", "b", "c", "d"] {
        f.running(id).await;
    }
    let with_step = |id: &str, output: &str| FinishWrite {
        step: Some(step_write(id, 1, output)),
        ..finish_of(id, "SUCCESS")
    };
    // b's step was recorded by another attempt, with another outcome.
    assert_eq!(f.step("b", 1, "\"first\"").await, StepOutcome::Recorded);
    let (a, b, d) = (
        with_step("a", "1"),
        with_step("b", "2"),
        finish_of("d", "SUCCESS"),
    );
    let stranger = FinishWrite {
        owner: "someone else".into(),
        step: Some(crate::sysdb::StepWrite {
            owner: "someone else".into(),
            ..step_write("c", 1, "3")
        }),
        ..finish_of("c", "SUCCESS")
    };
    let mut session = f.session().await;
    assert_eq!(
        session.finish(&[&a, &b, &stranger, &d]).await.unwrap(),
        vec![
            FinishOutcome::Finished,
            FinishOutcome::StepConflict,
            FinishOutcome::NotOwner,
            FinishOutcome::Finished
        ]
    );
    assert_eq!(f.column("a", "status").await.as_deref(), Some("SUCCESS"));
    let step_output = |id: &str| {
        format!("SELECT output FROM dbos.operation_outputs WHERE workflow_uuid = '{id}'")
    };
    assert_eq!(f.text(&step_output("a")).await.as_deref(), Some("1"));
    assert_eq!(f.column("b", "status").await.as_deref(), Some("PENDING"));
    assert_eq!(
        f.text(&step_output("b")).await.as_deref(),
        Some("\"first\"")
    );
    assert_eq!(f.column("c", "status").await.as_deref(), Some("PENDING"));
    assert_eq!(f.rows_of("operation_outputs", "c").await, 0);
    assert_eq!(f.column("d", "status").await.as_deref(), Some("SUCCESS"));
    // The same write again (a retry after a lost answer) finds its own outcome.
    assert_eq!(
        session.finish(&[&a]).await.unwrap(),
        vec![FinishOutcome::Finished]
    );
}

/// A payload row an earlier run left (DBOS finished it, then it was resumed) is where DBOS looks
/// first: the new outcome replaces it there too.
async fn finish_replaces_the_outcome_a_payload_row_holds(kind: Kind) {
    // It writes the payload row itself, in the home: one bucket.
    let f = Fixture::new(kind.one_bucket()).await;
    f.running("e").await;
    let stale = "INSERT INTO dbos.workflow_output (workflow_uuid, error) \
                 VALUES ('e', '{\"name\":\"E\",\"message\":\"old\"}') RETURNING workflow_uuid";
    assert_eq!(f.text(stale).await.as_deref(), Some("e"));
    let mut session = f.session().await;
    let done = finish_of("e", "SUCCESS");
    assert_eq!(
        session.finish(&[&done]).await.unwrap(),
        vec![FinishOutcome::Finished]
    );
    let payload = "SELECT COALESCE(output, 'none') || '/' || COALESCE(error, 'none') \
                   FROM dbos.workflow_output WHERE workflow_uuid = 'e'";
    assert_eq!(f.text(payload).await.as_deref(), Some("\"done\"/none"));
    let status = f.store.status("e").await.unwrap().unwrap();
    assert_eq!(
        (status.output.as_deref(), status.error),
        (Some("\"done\""), None)
    );
}

async fn finish_records_the_outcome_once_and_only_for_the_owner(kind: Kind) {
    let f = Fixture::new(kind).await;
    for id in ["b", "c"] {
        f.running(id).await;
    }
    for id in ["a", "d"] {
        let on_queue = NewWorkflow {
            owner: Some(super::owner_of(id)),
            ..enqueued(id, "q")
        };
        assert_eq!(f.start(&on_queue).await, StartOutcome::Created);
    }
    f.store.cancel("c", false).await.unwrap();
    let stranger = FinishWrite {
        owner: "someone else".into(),
        ..finish_of("b", "SUCCESS")
    };
    let (a, c) = (finish_of("a", "SUCCESS"), finish_of("c", "ERROR"));
    let parked = finish_of("d", "MAX_RECOVERY_ATTEMPTS_EXCEEDED");
    let mut session = f.session().await;
    assert_eq!(
        session.finish(&[&a, &stranger, &c, &parked]).await.unwrap(),
        vec![
            FinishOutcome::Finished,
            FinishOutcome::NotOwner,
            FinishOutcome::Cancelled,
            FinishOutcome::Finished
        ]
    );
    assert_eq!(f.column("a", "status").await.as_deref(), Some("SUCCESS"));
    assert_eq!(f.column("a", "owner_xid").await, None);
    assert!(f.column("a", "completed_at").await.is_some());
    // The outcome is in the status row (`sysdb::finish`, "Where the outcome goes").
    assert_eq!(f.column("a", "output").await.as_deref(), Some("\"done\""));
    assert_eq!(f.rows_of("workflow_output", "a").await, 0);
    assert_eq!(f.column("b", "status").await.as_deref(), Some("PENDING"));
    assert_eq!(f.column("c", "status").await.as_deref(), Some("CANCELLED"));
    assert_eq!(
        f.column("d", "status").await.as_deref(),
        Some("MAX_RECOVERY_ATTEMPTS_EXCEEDED")
    );
    assert_eq!(f.rows_of("workflow_output", "d").await, 0);
    // As DBOS: an outcome keeps the queue and start time; a parked run leaves both.
    assert_eq!(f.column("a", "queue_name").await.as_deref(), Some("q"));
    assert!(f.column("a", "started_at_epoch_ms").await.is_some());
    assert_eq!(f.column("d", "queue_name").await, None);
    assert_eq!(f.column("d", "started_at_epoch_ms").await, None);
    // A retry of a write that landed is finished, not refused.
    assert_eq!(
        session.finish(&[&a]).await.unwrap(),
        vec![FinishOutcome::Finished]
    );
}

pub(super) fn op_step(id: &str, function_id: u32) -> OpStep {
    OpStep {
        workflow_id: id.into(),
        owner: owner_of(id),
        function_id,
        started_at: now_ms(),
        app_name: None,
    }
}

async fn ops_commit_their_effect_with_their_record(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    f.running("dest").await;
    let send = Op::Send {
        step: op_step("a", 1),
        destination: "dest".into(),
        topic: "t".into(),
        message: "\"hi\"".into(),
    };
    let event = Op::SetEvent {
        step: op_step("a", 2),
        key: "k".into(),
        value: "\"v\"".into(),
    };
    let write = |fid, value: &str, close| Op::WriteStream {
        step: op_step("a", fid),
        key: "s".into(),
        value: value.into(),
        close,
    };
    let (w0, w1, closed) = (
        write(3, "0", false),
        write(4, "1", false),
        write(5, "end", true),
    );
    let mut session = f.session().await;
    let outs = session
        .ops(&[&send, &event, &w0, &w1, &closed])
        .await
        .unwrap();
    assert!(
        outs.iter().all(|o| matches!(o, OpOutcome::Done { .. })),
        "{outs:?}"
    );
    let names = f
        .text(
            "SELECT function_name FROM dbos.operation_outputs \
             WHERE workflow_uuid = 'a' AND function_id = 5",
        )
        .await;
    assert_eq!(names.as_deref(), Some("DBOS.closeStream"));
    assert_eq!(
        f.text("SELECT message_uuid FROM dbos.notifications WHERE destination_uuid = 'dest'")
            .await
            .as_deref(),
        Some("a-1")
    );
    let event_value = f.store.get_event("a", "k").await.unwrap();
    assert_eq!(event_value.map(|(v, _)| v).as_deref(), Some("\"v\""));
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.workflow_events_history WHERE workflow_uuid = 'a'")
            .await,
        Some(1)
    );
    let stream = f.store.read_stream("a", "s", 0, 10).await.unwrap();
    let values: Vec<(i32, &str)> = stream
        .iter()
        .map(|r| (r.offset, r.value.as_str()))
        .collect();
    assert_eq!(values, vec![(0, "0"), (1, "1"), (2, "end")]);
    assert_eq!(f.store.read_stream("a", "s", 1, 1).await.unwrap().len(), 1);

    // A replay writes no second message; the recorded call stands.
    assert!(matches!(
        session.ops(&[&send]).await.unwrap()[0],
        OpOutcome::AlreadyRecorded { .. }
    ));
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.notifications").await,
        Some(1)
    );
    // Not ours, or cancelled: nothing is written.
    let stranger = Op::SetEvent {
        step: OpStep {
            owner: "someone else".into(),
            ..op_step("a", 6)
        },
        key: "k".into(),
        value: "\"no\"".into(),
    };
    assert_eq!(
        session.ops(&[&stranger]).await.unwrap()[0],
        OpOutcome::NotOwner
    );
    f.store.cancel("a", false).await.unwrap();
    assert_eq!(
        session.ops(&[&write(7, "x", false)]).await.unwrap()[0],
        OpOutcome::Cancelled
    );
    assert_eq!(f.store.read_stream("a", "s", 0, 10).await.unwrap().len(), 3);
}

async fn recv_takes_the_oldest_message_or_gives_up(kind: Kind) {
    // It writes a foreign message itself, in the home: one bucket.
    let f = Fixture::new(kind.one_bucket()).await;
    f.running("r").await;
    f.store
        .send_bulk(&[outgoing("m1", "r", "\"first\"")])
        .await
        .unwrap();
    f.store
        .send_bulk(&[outgoing("m2", "r", "\"second\"")])
        .await
        .unwrap();
    let recv = |fid, give_up| Op::Recv {
        step: op_step("r", fid),
        topic: "t".into(),
        give_up,
    };
    let mut session = f.session().await;
    let got = |out: &OpOutcome| match out {
        OpOutcome::Done { output, .. } => output.clone(),
        other => panic!("not done: {other:?}"),
    };
    let first = session.ops(&[&recv(1, false)]).await.unwrap();
    assert_eq!(got(&first[0]).as_deref(), Some("\"first\""));
    let second = session.ops(&[&recv(2, false)]).await.unwrap();
    assert_eq!(got(&second[0]).as_deref(), Some("\"second\""));
    // Nothing left: wait (nothing written), or give up (null recorded).
    assert_eq!(
        session.ops(&[&recv(3, false)]).await.unwrap()[0],
        OpOutcome::Nothing
    );
    assert_eq!(f.rows_of("operation_outputs", "r").await, 2);
    let gave_up = session.ops(&[&recv(3, true)]).await.unwrap();
    assert_eq!(got(&gave_up[0]).as_deref(), Some("null"));
    // A replay of a receive returns what it took.
    assert_eq!(
        session.ops(&[&recv(1, false)]).await.unwrap()[0],
        OpOutcome::AlreadyRecorded {
            output: Some("\"first\"".into()),
            error: None,
            serialization: Some("portable_json".into()),
        }
    );
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.notifications WHERE consumed")
            .await,
        Some(2)
    );
    // A message another SDK sent in its own format is recorded in that format, and a replay
    // says which.
    f.exec(
        "INSERT INTO dbos.notifications (message_uuid, destination_uuid, topic, message, \
         serialization) VALUES ('m3', 'r', 't', 'gAJOLg==', 'py_pickle')",
    )
    .await;
    let pickled = session.ops(&[&recv(4, false)]).await.unwrap();
    assert_eq!(
        pickled[0],
        OpOutcome::Done {
            output: Some("gAJOLg==".into()),
            serialization: Some("py_pickle".into()),
        }
    );
    assert_eq!(
        session.ops(&[&recv(4, false)]).await.unwrap()[0],
        OpOutcome::AlreadyRecorded {
            output: Some("gAJOLg==".into()),
            error: None,
            serialization: Some("py_pickle".into()),
        }
    );
}

pub(super) fn outgoing(id: &str, destination: &str, message: &str) -> OutgoingMessage {
    OutgoingMessage {
        id: id.into(),
        destination: destination.into(),
        topic: "t".into(),
        message: message.into(),
        created_at: crate::sysdb::next_created_at(),
    }
}

async fn send_from_outside_is_idempotent_and_needs_a_destination(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.start(&enqueued("dest", "q")).await;
    let (first, again) = (outgoing("m", "dest", "1"), outgoing("m", "dest", "2"));
    f.store
        .send_bulk(&[first, outgoing("n", "dest", "3")])
        .await
        .unwrap();
    f.store.send_bulk(&[again]).await.unwrap();
    assert_eq!(
        f.text("SELECT message FROM dbos.notifications WHERE message_uuid = 'm'")
            .await
            .as_deref(),
        Some("1")
    );
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.notifications").await,
        Some(2)
    );
    // One missing destination fails the whole batch.
    let batch = [outgoing("m2", "dest", "1"), outgoing("m3", "nobody", "1")];
    let missing = f.store.send_bulk(&batch).await.unwrap_err();
    assert!(
        matches!(missing, DbError::MissingReference { .. }),
        "{missing:?}"
    );
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.notifications").await,
        Some(2)
    );
}

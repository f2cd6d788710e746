//! Updates' storage: a request peeked without being consumed, accepted (consumed, recorded and
//! answered in one write) or rejected (consumed and answered, nothing recorded); a
//! signal-with-start's message written with its start.

use super::writes::{op_step, outgoing};
use super::{enqueued, store_tests, Fixture, Kind};
use crate::sysdb::{NewWorkflow, Op, OpOutcome, OpStep, PeekedMessage, StartOutcome};

store_tests!(
    an_update_request_is_peeked_then_accepted_or_rejected,
    only_the_owner_answers_an_update,
    a_start_carries_its_message_unless_the_id_is_another_workflows,
);

async fn a_start_carries_its_message_unless_the_id_is_another_workflows(kind: Kind) {
    let f = Fixture::new(kind).await;
    let with = |id: &str, name: &str, message: &str| NewWorkflow {
        name: name.into(),
        message: Some(Box::new(outgoing(message, id, "\"hi\""))),
        ..enqueued(id, "q")
    };
    // Created: the row and its message, together; in a batch with a plain start.
    let mut session = f.session().await;
    let plain = enqueued("plain", "q");
    let first = with("s", "wf", "m1");
    let out = session.start(&[&plain, &first]).await.unwrap();
    assert_eq!(out, [StartOutcome::Created, StartOutcome::Created]);
    let peeked = f.store.peek_message("s", "t").await.unwrap();
    assert_eq!(peeked.map(|m| m.id).as_deref(), Some("m1"));
    // Existing and the same workflow: the message still arrives; a resend adds nothing.
    assert!(matches!(
        f.start(&with("s", "wf", "m2")).await,
        StartOutcome::Existing { .. }
    ));
    assert!(matches!(
        f.start(&with("s", "wf", "m2")).await,
        StartOutcome::Existing { .. }
    ));
    // The id belongs to another workflow: nothing is sent.
    assert!(matches!(
        f.start(&with("s", "other", "m3")).await,
        StartOutcome::Existing { .. }
    ));
    let sent = "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = 's'";
    assert_eq!(f.int(sent).await, Some(2), "m1 and m2, once each");
}

async fn an_update_request_is_peeked_then_accepted_or_rejected(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("w").await;
    assert_eq!(f.store.peek_message("w", "t").await.unwrap(), None);
    let first = outgoing("m1", "w", "\"one\"");
    f.store.send_bulk(&[first]).await.unwrap();
    f.store
        .send_bulk(&[outgoing("m2", "w", "\"two\"")])
        .await
        .unwrap();
    let peeked = f.store.peek_message("w", "t").await.unwrap();
    let expected = PeekedMessage {
        id: "m1".into(),
        message: "\"one\"".into(),
        serialization: Some("portable_json".into()),
    };
    assert_eq!(peeked, Some(expected.clone()));
    assert_eq!(
        f.store.peek_message("w", "t").await.unwrap(),
        Some(expected)
    );

    let mut session = f.session().await;
    let reject = Op::RejectUpdate {
        step: op_step("w", 1),
        message_id: "m1".into(),
        key: "answer-1".into(),
        value: "\"no\"".into(),
    };
    let done = session.ops(&[&reject]).await.unwrap();
    assert!(matches!(done[0], OpOutcome::Done { .. }), "{done:?}");
    // Again (a retried flush): nothing more, and still done.
    let again = session.ops(&[&reject]).await.unwrap();
    assert!(matches!(again[0], OpOutcome::Done { .. }), "{again:?}");
    assert_eq!(f.rows_of("operation_outputs", "w").await, 0);
    assert_eq!(f.rows_of("workflow_events_history", "w").await, 0);
    let refusal = f.store.get_event("w", "answer-1").await.unwrap();
    assert_eq!(refusal.map(|(v, _)| v).as_deref(), Some("\"no\""));
    let next = f.store.peek_message("w", "t").await.unwrap();
    assert_eq!(next.map(|m| m.id).as_deref(), Some("m2"));

    let accept = Op::AcceptUpdate {
        step: op_step("w", 1),
        message_id: "m2".into(),
        output: "{\"recorded\":2}".into(),
        key: "answer-2".into(),
        value: "\"yes\"".into(),
    };
    let done = session.ops(&[&accept]).await.unwrap();
    assert!(matches!(done[0], OpOutcome::Done { .. }), "{done:?}");
    assert_eq!(f.store.peek_message("w", "t").await.unwrap(), None);
    let names = f
        .text(
            "SELECT function_name || ' ' || output FROM dbos.operation_outputs \
             WHERE workflow_uuid = 'w' AND function_id = 1",
        )
        .await;
    assert_eq!(names.as_deref(), Some("stead.update {\"recorded\":2}"));
    let answer = f.store.get_event("w", "answer-2").await.unwrap();
    assert_eq!(answer.map(|(v, _)| v).as_deref(), Some("\"yes\""));
    assert_eq!(f.rows_of("workflow_events_history", "w").await, 1);
    assert_eq!(
        f.int("SELECT count(*) FROM dbos.notifications WHERE consumed_by_function_id = 1")
            .await,
        Some(1)
    );
    // A replay's accept finds the recorded call and changes nothing.
    assert_eq!(
        session.ops(&[&accept]).await.unwrap()[0],
        OpOutcome::AlreadyRecorded {
            output: Some("{\"recorded\":2}".into()),
            error: None,
            serialization: Some("portable_json".into()),
        }
    );
}

async fn only_the_owner_answers_an_update(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("w").await;
    f.store.send_bulk(&[outgoing("m", "w", "1")]).await.unwrap();
    let stranger = || OpStep {
        owner: "someone else".into(),
        ..op_step("w", 1)
    };
    let reject = Op::RejectUpdate {
        step: stranger(),
        message_id: "m".into(),
        key: "a".into(),
        value: "0".into(),
    };
    let accept = Op::AcceptUpdate {
        step: stranger(),
        message_id: "m".into(),
        output: "1".into(),
        key: "a".into(),
        value: "1".into(),
    };
    let mut session = f.session().await;
    let outs = session.ops(&[&reject, &accept]).await.unwrap();
    assert_eq!(outs, [OpOutcome::NotOwner, OpOutcome::NotOwner]);
    assert_eq!(f.store.get_event("w", "a").await.unwrap(), None);
    assert!(f.store.peek_message("w", "t").await.unwrap().is_some());
    f.store.cancel("w", false).await.unwrap();
    let reject = Op::RejectUpdate {
        step: op_step("w", 1),
        message_id: "m".into(),
        key: "a".into(),
        value: "0".into(),
    };
    assert_eq!(
        session.ops(&[&reject]).await.unwrap()[0],
        OpOutcome::Cancelled
    );
}

//! Messages: `recv` with a message sent before, during and never; exactly-once consumption across
//! a crash; topics kept apart; sends from outside and inside a workflow; a recv woken by a local
//! send (both backends) and by NOTIFY (Postgres).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stead::{Context, Error, Runtime, WorkflowOptions};

use crate::common;

/// Receives on `topic` with a timeout (ms) and returns what came.
async fn receiver(
    ctx: Context,
    (topic, ms): (Option<String>, u64),
) -> stead::Result<Option<String>> {
    ctx.recv(topic.as_deref(), Duration::from_millis(ms)).await
}

/// Sends `message` to `to` on topic "t" from inside a workflow.
async fn sender(ctx: Context, (to, message): (String, String)) -> stead::Result<()> {
    ctx.send(&to, &message, Some("t")).await
}

async fn launch(db: &common::TestDb) -> Runtime {
    common::builder(db)
        .workflow("receiver", receiver)
        .workflow("sender", sender)
        .launch()
        .await
        .unwrap()
}

both_backends! {
async fn recv_gets_a_message_sent_before_during_or_none(db) {
    let rt = launch(&db).await;

    // Before: the message waits in the table for the workflow to ask.
    let before = rt
        .start(
            "receiver",
            (Some("t"), 10_000u64),
            WorkflowOptions::with_id("before"),
        )
        .await
        .unwrap();
    let early = rt.client().send("before", &"early bird", Some("t")).await;
    early.unwrap();
    assert_eq!(
        common::within(before.result::<Option<String>>())
            .await
            .unwrap(),
        Some("early bird".into())
    );

    // During: the workflow is already waiting.
    let during = rt
        .start(
            "receiver",
            (Some("t"), 10_000u64),
            WorkflowOptions::with_id("during"),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    rt.client().send("during", &"right on time", Some("t"))
        .await
        .unwrap();
    assert_eq!(
        common::within(during.result::<Option<String>>())
            .await
            .unwrap(),
        Some("right on time".into())
    );

    // Never: the timeout gives None, and that None is recorded.
    let began = Instant::now();
    let never = rt
        .start(
            "receiver",
            (Some("t"), 300u64),
            WorkflowOptions::with_id("never"),
        )
        .await
        .unwrap();
    assert_eq!(
        common::within(never.result::<Option<String>>())
            .await
            .unwrap(),
        None
    );
    assert!(began.elapsed() >= Duration::from_millis(300));

    let pool = db.checks().await;
    let calls = common::scalar(
        &pool,
        "SELECT string_agg(function_name || '=' || output, ',' ORDER BY function_id) \
         FROM dbos.operation_outputs WHERE workflow_uuid = 'never'",
    )
    .await
    .unwrap();
    assert!(
        calls.starts_with("DBOS.recv=null,DBOS.sleep="),
        "the timeout is durable: {calls}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn topics_are_kept_apart_and_messages_come_in_order(db) {

    async fn two(ctx: Context, _: ()) -> stead::Result<Vec<Option<String>>> {
        let a1 = ctx.recv(Some("a"), Duration::from_secs(10)).await?;
        let b = ctx.recv(Some("b"), Duration::from_secs(10)).await?;
        let a2 = ctx.recv(Some("a"), Duration::from_secs(10)).await?;
        let none = ctx.recv::<String>(None, Duration::from_millis(100)).await?;
        Ok(vec![a1, b, a2, none])
    }
    let rt = common::builder(&db)
        .workflow("two", two)
        .launch()
        .await
        .unwrap();
    // Sent before the workflow exists would fail: create it first.
    let h = rt
        .start("two", (), WorkflowOptions::with_id("two"))
        .await
        .unwrap();
    rt.client().send("two", &"a-first", Some("a")).await.unwrap();
    rt.client().send("two", &"b-only", Some("b")).await.unwrap();
    rt.client().send("two", &"a-second", Some("a")).await.unwrap();
    let got: Vec<Option<String>> = common::within(h.result()).await.unwrap();
    assert_eq!(
        got,
        vec![
            Some("a-first".into()),
            Some("b-only".into()),
            Some("a-second".into()),
            None
        ]
    );
    let missing = rt.client().send("nobody", &1, None).await.unwrap_err();
    assert!(
        matches!(missing, Error::NotFound(ref id) if id == "nobody"),
        "{missing}"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_send_from_inside_a_workflow_is_delivered_once_even_when_replayed(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    async fn sends_then_crashes(ctx: Context, to: String) -> stead::Result<()> {
        ctx.send(&to, &"hello", Some("t")).await?;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash after sending");
        }
        Ok(())
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("receiver", receiver)
        .workflow("crashy_sender", sends_then_crashes)
        .launch()
        .await
        .unwrap();
    let inbox = rt
        .start(
            "receiver",
            (Some("t"), 10_000u64),
            WorkflowOptions::with_id("inbox"),
        )
        .await
        .unwrap();
    let s = rt
        .start("crashy_sender", "inbox", WorkflowOptions::with_id("s"))
        .await
        .unwrap();
    common::within(s.result::<()>()).await.unwrap();
    assert_eq!(
        common::within(inbox.result::<Option<String>>())
            .await
            .unwrap(),
        Some("hello".into())
    );
    let pool = db.checks().await;
    let sent = common::scalar(&pool, "SELECT CAST(count(*) AS TEXT) FROM dbos.notifications").await;
    assert_eq!(
        sent.as_deref(),
        Some("1"),
        "the replayed send did not send again"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_send_to_a_missing_workflow_fails_the_sender_and_writes_nothing(db) {
    let rt = launch(&db).await;
    let h = rt
        .start(
            "sender",
            ("nobody", "lost"),
            WorkflowOptions::with_id("lonely"),
        )
        .await
        .unwrap();
    let err = common::within(h.result::<()>()).await.unwrap_err();
    assert!(err.to_string().contains("nobody"), "{err}");
    let pool = db.checks().await;
    let written = common::scalar(
        &pool,
        "SELECT CAST((SELECT count(*) FROM dbos.notifications) AS TEXT) || ':' || \
             CAST((SELECT count(*) FROM dbos.operation_outputs \
                   WHERE function_name = 'DBOS.send') AS TEXT)",
    )
    .await;
    assert_eq!(written.as_deref(), Some("0:0"), "no message, no recorded send");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_message_is_consumed_exactly_once_across_a_crash_after_receiving_it(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    async fn receives_then_crashes(ctx: Context, _: ()) -> stead::Result<Vec<Option<String>>> {
        let first = ctx.recv(Some("t"), Duration::from_secs(10)).await?;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash between the receive and the next step");
        }
        let second = ctx.recv(Some("t"), Duration::from_secs(10)).await?;
        Ok(vec![first, second])
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("r", receives_then_crashes)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("r", (), WorkflowOptions::with_id("once"))
        .await
        .unwrap();
    rt.client().send("once", &"m1", Some("t")).await.unwrap();
    rt.client().send("once", &"m2", Some("t")).await.unwrap();
    let got: Vec<Option<String>> = common::within(h.result()).await.unwrap();
    assert_eq!(got, vec![Some("m1".into()), Some("m2".into())]);
    let pool = db.checks().await;
    let consumed = common::scalar(
        &pool,
        "SELECT string_agg(message || ':' || CASE WHEN consumed THEN 'yes' ELSE 'no' END || ':' \
             || COALESCE(CAST(consumed_by_function_id AS TEXT), '-'), ',' \
             ORDER BY created_at_epoch_ms) FROM dbos.notifications",
    )
    .await;
    assert_eq!(
        consumed.as_deref(),
        Some(r#""m1":yes:1,"m2":yes:3"#)
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_waiting_recv_is_woken_by_a_send_from_this_process_within_250_ms(db) {
    // No NOTIFY needed: the send wakes this process's waiters itself.
    assert_recv_woken_fast(&db, Via::ThisProcess, 10).await;
}
}

/// Who sends the messages a wake-up test waits for.
enum Via {
    /// `Runtime::send` in the waiting process.
    ThisProcess,
    /// Another writer: DBOS's SQL function (Postgres).
    SqlFunction,
}

/// Parks `n` workflows in a recv one after another, sends each a message `via`, and asserts the
/// median wake-up takes under 250 ms: a second after parking, the recv's next poll is at least
/// 550 ms away (50 ms doubling; 2 s doubling where sends are heard), so a poll could not do it.
async fn assert_recv_woken_fast(db: &common::TestDb, via: Via, n: i64) {
    async fn ping(ctx: Context, _: ()) -> stead::Result<Option<i64>> {
        ctx.recv(Some("ping"), Duration::from_secs(30)).await
    }
    let rt = common::builder(db)
        .workflow("ping", ping)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let mut latencies = Vec::new();
    for i in 0..n {
        let id = format!("ping-{i}");
        let h = rt
            .start("ping", (), WorkflowOptions::with_id(&id))
            .await
            .unwrap();
        parked_in_recv(&pool, &id).await;
        let sent = Instant::now();
        match via {
            Via::ThisProcess => rt.client().send(&id, &i, Some("ping")).await.unwrap(),
            Via::SqlFunction => {
                sqlx::query("SELECT dbos.send_message($1, $2::json, 'ping')")
                    .bind(&id)
                    .bind(i.to_string())
                    .execute(&db.pool().await)
                    .await
                    .unwrap();
            }
        }
        let got: Option<i64> = common::within(h.result()).await.unwrap();
        latencies.push(sent.elapsed());
        assert_eq!(got, Some(i));
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    eprintln!(
        "recv wake-up: median {median:?}, max {:?}",
        latencies.last()
    );
    // Behaviour: woken by the send. A median of n rounds; under load each of the few statements
    // between send and result costs tens of ms more, not the 550 ms a poll would need.
    assert!(
        median < Duration::from_millis(250),
        "median wake-up {median:?} ({latencies:?})"
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Waits until workflow `id` is parked in its recv (the timeout's sleep row is written), then a
/// second longer so its poll interval has grown (its next poll is 550 ms or more away).
async fn parked_in_recv(pool: &impl common::CheckPool, id: &str) {
    common::wait_count(
        pool,
        &format!("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{id}' AND function_name = 'DBOS.sleep'"),
        1,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Postgres only: another writer's send reaches this process through LISTEN/NOTIFY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_recv_is_woken_by_notify_within_250_ms() {
    let db = common::TestDb::new().await;
    assert_recv_woken_fast(&db, Via::SqlFunction, 20).await;
}

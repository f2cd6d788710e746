//! Limits on what a run records: a value over the runtime's size limit (input, step output,
//! message, event, stream value) is refused with `Error::ValueTooLarge` before anything of it
//! is written; a run's history stops at its limit of calls or bytes with `Error::HistoryLimit`
//! (a workflow's own limit beating the runtime's), counting the calls a recovered run replays.

use std::time::Duration;

use stead::workflow::WorkflowConfig;
use stead::{Context, Error, HistoryLimit, HistoryLimits, WorkflowOptions};

use crate::common::marks::Marks;
use crate::common::{self, CheckPool};

async fn count(pool: &impl CheckPool, sql: &str) -> i64 {
    pool.count(sql).await.unwrap()
}

/// The value limit of these tests' runtimes.
const LIMIT: usize = 1_000;

fn big() -> String {
    "x".repeat(2 * LIMIT)
}

/// Makes one oversized call of `kind` first thing, and reports its error (a value too large is
/// the answer; anything else fails the workflow).
async fn oversize(ctx: Context, kind: String) -> stead::Result<String> {
    let me = ctx.workflow_id().to_owned();
    let refused = match kind.as_str() {
        "step" => ctx.step("big", || async { Ok(big()) }).await.map(|_| ()),
        "send" => ctx.send(&me, &big(), Some("t")).await,
        "event" => ctx.set_event("k", &big()).await,
        "stream" => ctx.write_stream("s", &big()).await,
        other => panic!("no such kind {other}"),
    };
    match refused {
        Err(e @ Error::ValueTooLarge { .. }) => Ok(e.to_string()),
        other => Err(Error::InvalidArgument(format!("not refused: {other:?}"))),
    }
}

async fn takes(_: Context, input: String) -> stead::Result<usize> {
    Ok(input.len())
}

both_backends! {
/// Each kind of value over the limit is refused by name and size, and nothing of it is in the
/// database: no step row, message, event or stream value, and no workflow for a large input.
async fn a_value_over_the_limit_is_refused_before_anything_is_written(db) {
    let rt = common::builder(&db)
        .max_value_bytes(LIMIT)
        .workflow("oversize", oversize)
        .workflow("takes", takes)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let count = |sql: String| {
        let pool = pool.clone();
        async move { count(&pool, &sql).await }
    };
    // The JSON of the value: the string and its two quotes.
    let size = format!("is {} bytes, over the limit of {LIMIT} bytes", 2 * LIMIT + 2);
    for (kind, call) in [
        ("step", "the output of step \"big\" (call #1)"),
        ("send", "the message sent to"),
        ("event", "the value of event \"k\" (DBOS.setEvent, call #1)"),
        ("stream", "the value written to stream \"s\" (DBOS.writeStream, call #1)"),
    ] {
        let id = format!("big-{kind}");
        let h = rt
            .start("oversize", kind.to_string(), WorkflowOptions::with_id(&id))
            .await
            .unwrap();
        let said: String = h.result().await.unwrap();
        assert!(said.contains(call) && said.contains(&size), "{kind}: {said}");
        for table in ["operation_outputs", "workflow_events", "workflow_events_history", "streams"] {
            let sql = format!("SELECT count(*) FROM dbos.{table} WHERE workflow_uuid = '{id}'");
            assert_eq!(count(sql).await, 0, "{kind}: nothing in {table}");
        }
        let sql = format!("SELECT count(*) FROM dbos.notifications WHERE destination_uuid = '{id}'");
        assert_eq!(count(sql).await, 0, "{kind}: no message");
    }
    // An input over the limit: no workflow at all.
    let refused = rt
        .start("takes", big(), WorkflowOptions::with_id("big-input"))
        .await
        .unwrap_err();
    match &refused {
        Error::ValueTooLarge { call, bytes, limit } => {
            assert!(call.contains("the input of workflow \"takes\""), "{call}");
            assert!(*bytes > 2 * LIMIT && *limit == LIMIT, "{refused}");
        }
        other => panic!("not refused by size: {other:?}"),
    }
    let sql = "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = 'big-input'";
    assert_eq!(count(sql.into()).await, 0, "no row for a refused input");
    // Just under the limit is fine.
    let fits = "y".repeat(LIMIT / 2);
    let h = rt.start("takes", fits, WorkflowOptions::default()).await.unwrap();
    assert_eq!(h.result::<usize>().await.unwrap(), LIMIT / 2);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Runs `n` steps of `bytes` each; stops at the first refusal and answers how many it ran and
/// the refusal.
async fn steps(ctx: Context, (n, bytes): (u32, usize)) -> stead::Result<(u32, String)> {
    for i in 0..n {
        match ctx.step("s", || async move { Ok("b".repeat(bytes)) }).await {
            Ok(_) => {}
            Err(e @ Error::HistoryLimit { .. }) => {
                let again = ctx.step("after", || async { Ok(1) }).await;
                assert!(
                    matches!(again, Err(Error::HistoryLimit { .. })),
                    "stays refused"
                );
                return Ok((i, serde_json::to_string(&refusal(&e)).unwrap()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((n, String::new()))
}

fn refusal(e: &Error) -> (HistoryLimit, u64, u64) {
    match e {
        Error::HistoryLimit {
            limit, used, max, ..
        } => (*limit, *used, *max),
        _ => unreachable!(),
    }
}

both_backends! {
/// At the limit of calls (the runtime's, or a workflow's own, which wins) or of bytes, the next
/// durable call fails typed, and the history holds exactly what fits.
async fn a_history_stops_at_its_limit_and_a_workflows_own_limit_wins(db) {
    let rt = common::builder(&db)
        .history_limits(HistoryLimits::default().calls(10).bytes(1 << 20))
        .workflow("steps", steps)
        .workflow_with(
            "few",
            WorkflowConfig::default().history_limits(HistoryLimits::default().calls(4)),
            steps,
        )
        .workflow_with(
            "heavy",
            WorkflowConfig::default().history_limits(HistoryLimits::default().bytes(1_000)),
            steps,
        )
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let rows = |id: &str| {
        let (pool, sql) = (pool.clone(), format!(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{id}'"
        ));
        async move { count(&pool, &sql).await }
    };
    let run = |name: &'static str, id: &'static str, bytes: usize| {
        let rt = &rt;
        async move {
            rt.start(name, (20u32, bytes), WorkflowOptions::with_id(id))
                .await
                .unwrap()
                .result::<(u32, String)>()
                .await
                .unwrap()
        }
    };
    let (ran, why) = run("steps", "cap-runtime", 8).await;
    assert_eq!((ran, why.as_str()), (10, r#"["calls",10,10]"#));
    assert_eq!(rows("cap-runtime").await, 10, "nothing past the limit");
    let (ran, why) = run("few", "cap-own", 8).await;
    assert_eq!((ran, why.as_str()), (4, r#"["calls",4,4]"#), "the workflow's limit wins");
    assert_eq!(rows("cap-own").await, 4);
    // 300 bytes of output per step (the JSON string's quotes included): the fourth passes 1,000.
    let (ran, why) = run("heavy", "cap-bytes", 298).await;
    assert_eq!((ran, why.as_str()), (4, r#"["bytes",1200,1000]"#));
    assert_eq!(rows("cap-bytes").await, 4);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// The workflows whose second launch has begun (both backends run in this process).
static SECOND_LAUNCH: Marks = Marks::new();

/// Six steps, a gate that hangs on the first launch, then steps until refused.
async fn gated(ctx: Context, _: ()) -> stead::Result<u32> {
    for _ in 0..6 {
        ctx.step("s", || async { Ok(1) }).await?;
    }
    SECOND_LAUNCH.gate(&ctx).await?;
    let mut more = 0;
    loop {
        match ctx.step("s", || async { Ok(1) }).await {
            Ok(_) => more += 1,
            Err(Error::HistoryLimit { used, .. }) => return Ok(more * 100 + used as u32),
            Err(e) => return Err(e),
        }
    }
}

both_backends! {
/// A recovered run counts the calls it replays: its history stops at the same limit.
async fn a_recovered_run_counts_its_replayed_calls(db) {
    let limits = HistoryLimits::default().calls(10);
    let launch = || common::builder(&db).history_limits(limits).workflow("gated", gated).launch();
    let rt = launch().await.unwrap();
    let pool = db.checks().await;
    let id = format!("gated-{:?}", db.backend);
    rt.start("gated", (), WorkflowOptions::with_id(&id)).await.unwrap();
    let recorded = format!("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{id}'");
    common::wait_count(&pool, &recorded, 6).await;
    rt.shutdown(Duration::from_millis(200)).await.unwrap();
    SECOND_LAUNCH.mark(&id);
    let rt = launch().await.unwrap();
    let h = rt.client().handle(&id);
    // Six replayed, the gate, three more: ten in all, the eleventh refused.
    assert_eq!(h.result::<u32>().await.unwrap(), 3 * 100 + 10);
    assert_eq!(count(&pool, &recorded).await, 10);
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! Child workflows: recorded so a recovered parent does not start a second child; their results
//! are durable calls; `select2` between a child and a sleep records the winner and replays it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stead::{durable::Selected, Context, WorkflowOptions};

use crate::common;

static CHILD_GATE: AtomicBool = AtomicBool::new(false);

async fn gated_child(ctx: Context, n: u32) -> stead::Result<u32> {
    while !CHILD_GATE.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ctx.step("double", || async move { Ok(n * 2) }).await
}

async fn parent(ctx: Context, n: u32) -> stead::Result<u32> {
    let child = ctx
        .start_child("gated_child", n, WorkflowOptions::default())
        .await?;
    child.result::<u32>().await
}

both_backends! {
async fn a_recovered_parent_gets_its_first_child_instead_of_a_second(db) {
    let _turn = one_backend_at_a_time!();
    CHILD_GATE.store(false, Ordering::SeqCst);
    let launch = || {
        common::builder(&db)
            .workflow("parent", parent)
            .workflow("gated_child", gated_child)
            .launch()
    };
    let rt = launch().await.unwrap();
    let pool = db.checks().await;
    rt.start("parent", 21, WorkflowOptions::with_id("mom"))
        .await
        .unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'mom' AND child_workflow_id = 'mom-1'",
        1,
    )
    .await;
    drop(rt); // a crash: parent and child stay PENDING

    CHILD_GATE.store(true, Ordering::SeqCst);
    let rt = launch().await.unwrap();
    assert_eq!(
        common::within(rt.client().handle("mom").result::<u32>())
            .await
            .unwrap(),
        42
    );
    let children = common::scalar(
        &pool,
        "SELECT string_agg(workflow_uuid || ':' || status, ',' ORDER BY workflow_uuid) \
         FROM dbos.workflow_status WHERE parent_workflow_id = 'mom'",
    )
    .await;
    assert_eq!(children.as_deref(), Some("mom-1:SUCCESS"));
    let calls = common::scalar(
        &pool,
        "SELECT string_agg(CAST(function_id AS TEXT) || ':' || function_name || ':' \
             || COALESCE(child_workflow_id, '-'), ',' ORDER BY function_id) \
         FROM dbos.operation_outputs WHERE workflow_uuid = 'mom'",
    )
    .await;
    assert_eq!(
        calls.as_deref(),
        Some("1:gated_child:mom-1,2:DBOS.getResult:mom-1")
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn run_child_waits_for_the_result_and_a_failure_comes_back_as_one(db) {
    async fn failing(_ctx: Context, _: ()) -> Result<u32, std::io::Error> {
        Err(std::io::Error::other("no luck"))
    }
    async fn caller(ctx: Context, _: ()) -> stead::Result<String> {
        let ok: u32 = ctx
            .run_child("doubler", 5u32, WorkflowOptions::with_id("named-child"))
            .await?;
        let failed = ctx
            .run_child::<_, _, u32>("failing", (), WorkflowOptions::default())
            .await;
        Ok(format!("{ok} / {}", failed.unwrap_err()))
    }
    async fn doubler(_ctx: Context, n: u32) -> stead::Result<u32> {
        Ok(n * 2)
    }
    let rt = common::builder(&db)
        .workflow("caller", caller)
        .workflow("doubler", doubler)
        .workflow("failing", failing)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("caller", (), WorkflowOptions::with_id("c"))
        .await
        .unwrap();
    let out: String = common::within(h.result()).await.unwrap();
    assert_eq!(out, "10 / workflow c-3 failed: Error: no luck");
    let child = rt.client().handle("named-child").status().await.unwrap();
    assert_eq!(child.parent_workflow_id.as_deref(), Some("c"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn select_between_a_child_and_a_sleep_records_the_winner_and_replays_it(db) {
    static CRASHED: AtomicBool = AtomicBool::new(false);
    async fn slow(ctx: Context, _: ()) -> stead::Result<&'static str> {
        ctx.sleep(Duration::from_secs(3)).await?;
        Ok("slow child done")
    }
    async fn impatient(ctx: Context, _: ()) -> stead::Result<String> {
        let child = ctx
            .start_child("slow", (), WorkflowOptions::default())
            .await?;
        let winner = ctx
            .select2(
                child.result::<String>(),
                ctx.sleep(Duration::from_millis(200)),
            )
            .await?;
        if !CRASHED.swap(true, Ordering::SeqCst) {
            panic!("crash after the select");
        }
        Ok(match winner {
            Selected::First(child) => format!("child: {child}"),
            Selected::Second(()) => "timed out".into(),
        })
    }
    let _turn = one_backend_at_a_time!();
    CRASHED.store(false, Ordering::SeqCst);
    let rt = common::builder(&db)
        .workflow("slow", slow)
        .workflow("impatient", impatient)
        .launch()
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start("impatient", (), WorkflowOptions::with_id("imp"))
        .await
        .unwrap();
    assert_eq!(
        common::within(h.result::<String>()).await.unwrap(),
        "timed out"
    );
    // Behaviour: the recorded branch, not the child's 10 s wait: 2 s is room for a loaded replay.
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "the replay took the recorded branch instead of waiting for the child ({:?})",
        began.elapsed()
    );
    assert_eq!(h.status().await.unwrap().recovery_attempts, 2);
    let pool = db.checks().await;
    let select = common::scalar(
        &pool,
        "SELECT output FROM dbos.operation_outputs WHERE workflow_uuid = 'imp' AND function_name = 'stead.select'",
    )
    .await;
    assert_eq!(select.as_deref(), Some(r#"{"index":1,"value":null}"#));
    rt.shutdown(Duration::from_millis(100)).await.unwrap();
}

async fn select_all_returns_the_first_of_several_and_join_waits_for_all(db) {
    async fn racer(ctx: Context, _: ()) -> stead::Result<(usize, u32, Vec<u32>)> {
        let receives = vec![
            ctx.recv::<u32>(Some("a"), Duration::from_secs(10)),
            ctx.recv::<u32>(Some("b"), Duration::from_secs(10)),
        ];
        let (index, first) = ctx
            .select_all(
                receives
                    .into_iter()
                    .map(|r| async move { Ok(r.await?.unwrap_or(0)) }),
            )
            .await?;
        let all = futures::future::try_join_all(vec![
            ctx.recv::<u32>(Some("c"), Duration::from_secs(10)),
            ctx.recv::<u32>(Some("d"), Duration::from_secs(10)),
        ])
        .await?;
        Ok((
            index,
            first,
            all.into_iter().map(|v| v.unwrap_or(0)).collect(),
        ))
    }
    let rt = common::builder(&db)
        .workflow("racer", racer)
        .launch()
        .await
        .unwrap();
    let h = rt
        .start("racer", (), WorkflowOptions::with_id("race"))
        .await
        .unwrap();
    rt.client().send("race", &7u32, Some("b")).await.unwrap();
    rt.client().send("race", &4u32, Some("d")).await.unwrap();
    rt.client().send("race", &3u32, Some("c")).await.unwrap();
    let (index, first, all): (usize, u32, Vec<u32>) = common::within(h.result()).await.unwrap();
    assert_eq!((index, first, all), (1, 7, vec![3, 4]));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

//! Replay verification (`stead::testing::verify`): recorded histories replayed against new
//! code report each divergence (call number, recorded name, new name), none on unchanged code,
//! run no step body and write nothing.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use stead::testing::{verify, Divergence, Verdict};
use stead::{client::ListWorkflows, Context, WorkflowOptions};

use crate::common;

static BODIES: AtomicU32 = AtomicU32::new(0);
/// Every test here counts step bodies in `BODIES`, so they take turns (across tests and
/// backends).
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn counted(value: u32) -> Result<u32, stead::BoxError> {
    BODIES.fetch_add(1, Ordering::SeqCst);
    Ok(value)
}

/// Two steps around a durable sleep, the second named `charge`, then a message it may wait for.
async fn order_charging(ctx: Context, wait: bool, charge: &str) -> stead::Result<u32> {
    let a = ctx.step("reserve", || counted(1)).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    let b = ctx.step(charge, || counted(2)).await?;
    if wait {
        ctx.recv::<u32>(Some("go"), Duration::from_secs(3600))
            .await?;
    }
    Ok(a + b)
}

/// The deployed code.
async fn order_v1(ctx: Context, wait: bool) -> stead::Result<u32> {
    order_charging(ctx, wait, "charge").await
}

/// The new code renames the second step.
async fn order_renamed(ctx: Context, wait: bool) -> stead::Result<u32> {
    order_charging(ctx, wait, "charge-card").await
}

/// The new code drops the second step.
async fn order_shortened(ctx: Context, _wait: bool) -> stead::Result<u32> {
    let a = ctx.step("reserve", || counted(1)).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    Ok(a)
}

/// The new code's first step returns another type than the one recorded.
async fn order_retyped(ctx: Context, _wait: bool) -> stead::Result<u32> {
    let a: String = ctx
        .step("reserve", || async { Ok("one".to_string()) })
        .await?;
    Ok(a.len() as u32)
}

/// A build whose body panics before its first call.
async fn order_panics(_: Context, _wait: bool) -> stead::Result<u32> {
    panic!("bad build")
}

async fn writes(pool: &impl common::CheckPool) -> String {
    common::scalar(
        pool,
        "SELECT CAST((SELECT count(*) FROM dbos.operation_outputs) AS TEXT) || '/' || \
         CAST((SELECT count(*) FROM dbos.workflow_status) AS TEXT) || '/' || \
         CAST((SELECT max(updated_at) FROM dbos.workflow_status) AS TEXT) || '/' || \
         CAST((SELECT sum(CASE WHEN status = 'PENDING' THEN 1 ELSE 0 END) \
               FROM dbos.workflow_status) AS TEXT)",
    )
    .await
    .expect("one row of counts")
}

/// A runtime running `code` as workflow `order`.
async fn launch<F>(db: &common::TestDb, code: F) -> stead::Runtime
where
    F: stead::workflow::WorkflowFn<bool, u32>,
{
    common::builder(db)
        .workflow("order", code)
        .launch()
        .await
        .unwrap()
}

/// Runs `order` under `id` to its end.
async fn finish(rt: &stead::Runtime, id: &str) {
    let h = rt
        .start("order", false, WorkflowOptions::with_id(id))
        .await
        .unwrap();
    common::within(h.result::<u32>()).await.unwrap();
}

fn by_id(mut verdicts: Vec<Verdict>) -> Vec<Verdict> {
    verdicts.sort_by(|a, b| a.workflow_id.cmp(&b.workflow_id));
    verdicts
}

both_backends! {
async fn verification_reports_a_renamed_step_and_passes_unchanged_code(db) {
    let _turn = TURN.lock().await;
    let rt = launch(&db, order_v1).await;
    finish(&rt, "o-1").await;
    finish(&rt, "o-2").await;
    // One still running: its history ends at the message it waits for (call #4; its timeout's
    // sleep, #5, is recorded).
    rt.start("order", true, WorkflowOptions::with_id("o-3")).await.unwrap();
    let pool = db.checks().await;
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = 'o-3'",
        4,
    )
    .await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let before = writes(&pool).await;
    BODIES.store(0, Ordering::SeqCst);

    // Unchanged code: every recorded call matches, none runs.
    let all = ListWorkflows::new().name("order");
    let same = by_id(
        verify(common::builder(&db).workflow("order", order_v1), all.clone())
            .await
            .unwrap(),
    );
    assert_eq!(same.len(), 3);
    for v in &same {
        assert!(v.is_compatible(), "{v:?}");
        let recorded = if v.workflow_id == "o-3" { 4 } else { 3 };
        assert_eq!(v.recorded_calls, recorded, "{v:?}");
        assert_eq!(v.matched_calls, 3, "{v:?}");
    }

    // A renamed step: the divergence names the call, the recorded name and the new one.
    let renamed = by_id(
        verify(common::builder(&db).workflow("order", order_renamed), all.clone())
            .await
            .unwrap(),
    );
    let expected = vec![Divergence {
        function_id: 3,
        recorded: "charge".into(),
        called: Some("charge-card".into()),
    }];
    for v in &renamed {
        assert_eq!(v.divergences, expected, "{v:?}");
        assert_eq!(v.matched_calls, 2, "{v:?}");
        assert!(!v.is_compatible());
    }
    assert_eq!(
        renamed[0].divergences[0].to_string(),
        "call #3 was recorded as \"charge\" but the code now calls \"charge-card\""
    );

    // A dropped step: the code returns before a recorded call.
    let one = ListWorkflows::new().ids(["o-1"]);
    let shortened = verify(common::builder(&db).workflow("order", order_shortened), one)
        .await
        .unwrap();
    assert_eq!(shortened.len(), 1);
    assert_eq!(
        shortened[0].divergences,
        vec![Divergence {
            function_id: 3,
            recorded: "charge".into(),
            called: None,
        }]
    );

    // The newest N, and a build that does not register the workflow.
    let newest = ListWorkflows::new().newest_first().limit(1);
    let unknown = verify(common::builder(&db).workflow("other", order_v1), newest)
        .await
        .unwrap();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].workflow_id, "o-3");
    assert!(unknown[0].skipped.as_deref().unwrap_or("").contains("\"order\""), "{unknown:?}");

    // A recorded output that no longer decodes: the replay's error is reported.
    let retyped = verify(
        common::builder(&db).workflow("order", order_retyped),
        ListWorkflows::new().ids(["o-1"]),
    )
    .await
    .unwrap();
    let failed = retyped[0].failed.as_ref().expect("the replay failed");
    assert_eq!(failed.name, "DecodeError", "{retyped:?}");
    assert!(!retyped[0].is_compatible());

    // A body that panics is reported, not passed on.
    let panics = verify(
        common::builder(&db).workflow("order", order_panics),
        ListWorkflows::new().ids(["o-2"]),
    )
    .await
    .unwrap();
    assert!(panics[0].skipped.as_deref().unwrap_or("").contains("bad build"), "{panics:?}");

    assert_eq!(BODIES.load(Ordering::SeqCst), 0, "no step body ran");
    assert_eq!(writes(&pool).await, before, "nothing was written");
}
}

/// The patched code: new runs take the new charge, pre-patch histories the old one.
async fn order_patched(ctx: Context, _wait: bool) -> stead::Result<u32> {
    let a = ctx.step("reserve", || counted(1)).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    let b = if ctx.patch("card").await? {
        ctx.step("charge-card", || counted(2)).await?
    } else {
        ctx.step("charge", || counted(2)).await?
    };
    Ok(a + b)
}

/// After every pre-patch run finished: the patch is deprecated, only the new path remains.
async fn order_deprecated(ctx: Context, _wait: bool) -> stead::Result<u32> {
    let a = ctx.step("reserve", || counted(1)).await?;
    ctx.sleep(Duration::from_millis(5)).await?;
    ctx.deprecate_patch("card")?;
    let b = ctx.step("charge-card", || counted(2)).await?;
    Ok(a + b)
}

both_backends! {
async fn a_patch_makes_renamed_code_verify_against_old_and_new_histories(db) {
    let _turn = TURN.lock().await;
    let rt = launch(&db, order_v1).await;
    finish(&rt, "old").await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    let rt = launch(&db, order_patched).await;
    finish(&rt, "new").await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
    BODIES.store(0, Ordering::SeqCst);

    // The patched code replays both histories: the old one without the marker, the new one
    // with it (the marker counts as a matched call, not a leftover).
    let all = ListWorkflows::new().name("order");
    let patched = by_id(
        verify(common::builder(&db).workflow("order", order_patched), all.clone())
            .await
            .unwrap(),
    );
    let calls: Vec<_> = patched
        .iter()
        .map(|v| (v.workflow_id.as_str(), v.is_compatible(), v.matched_calls))
        .collect();
    assert_eq!(calls, vec![("new", true, 4), ("old", true, 3)], "{patched:?}");

    // Deprecated: the new history still replays; the old one now diverges at its charge.
    let deprecated = by_id(
        verify(common::builder(&db).workflow("order", order_deprecated), all)
            .await
            .unwrap(),
    );
    assert!(deprecated[0].is_compatible(), "{deprecated:?}");
    assert_eq!(
        deprecated[1].divergences,
        vec![Divergence {
            function_id: 3,
            recorded: "charge".into(),
            called: Some("charge-card".into()),
        }]
    );
    assert_eq!(BODIES.load(Ordering::SeqCst), 0, "no step body ran");
}
}

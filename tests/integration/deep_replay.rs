//! Replay of a history several pages long: a run recovered after 2,600 recorded calls replays
//! every one of them from its record (no step body runs again, every output is the recorded
//! one), across pages cut by row count and by output bytes, with concurrent calls straddling
//! pages and patches probed past the first page.

use std::time::Duration;

use stead::{Context, WorkflowOptions};

use crate::common;
use crate::common::marks::Marks;

/// Steps before the gate.
const STEPS: u32 = 2_600;

/// The workflows whose second launch has begun (both backends run in this process).
static SECOND_LAUNCH: Marks = Marks::new();

/// What step `i` returns on its first run: every 250th before 1,000 and from 2,250 a 1 MB
/// output (its page is cut by bytes), the rest short (between, a page of short outputs is
/// followed by a longer one, cut in its turn by the output at 2,250).
fn first_output(i: u32) -> String {
    if i.is_multiple_of(250) && !(1_000..2_250).contains(&i) {
        format!("{i}:{}", "x".repeat(1 << 20))
    } else {
        format!("{i}")
    }
}

/// One counted step; a run of its body on the second launch returns another value.
async fn step(ctx: &Context, i: u32) -> stead::Result<bool> {
    let id = ctx.workflow_id().to_owned();
    let out: String = ctx
        .step("s", move || async move {
            common::count_body(&id, i);
            let again = if SECOND_LAUNCH.has(&id) { "-again" } else { "" };
            Ok(format!("{}{again}", first_output(i)))
        })
        .await?;
    Ok(out == first_output(i))
}

/// Runs `STEPS` steps (a pair at once every 97th), a patch at 1,200 and a deprecated patch
/// at 1,700, then a gate that hangs on the first launch; answers how many outputs were the
/// first run's.
async fn deep(ctx: Context, _: ()) -> stead::Result<u32> {
    let mut matched = 0;
    let mut i = 1;
    while i <= STEPS {
        if i == 1_200 {
            assert!(ctx.patch("late").await?, "a new run records the marker");
        }
        if i == 1_700 {
            ctx.deprecate_patch("gone")?;
        }
        if i.is_multiple_of(97) && i < STEPS {
            let (a, b) = futures::join!(step(&ctx, i), step(&ctx, i + 1));
            matched += u32::from(a?) + u32::from(b?);
            i += 2;
        } else {
            matched += u32::from(step(&ctx, i).await?);
            i += 1;
        }
    }
    SECOND_LAUNCH.gate(&ctx).await?;
    Ok(matched)
}

both_backends! {
async fn a_history_of_many_pages_replays_every_call_from_its_record(db) {
    let id = format!("deep-{:?}", db.backend);
    let rt = common::builder(&db).workflow("deep", deep).launch().await.unwrap();
    rt.start("deep", (), WorkflowOptions::with_id(&id)).await.unwrap();
    let pool = db.checks().await;
    // Every step and the patch marker recorded: the run waits at the gate.
    common::wait_count(
        &pool,
        &format!("SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = '{id}'"),
        i64::from(STEPS) + 1,
    )
    .await;
    rt.shutdown(Duration::from_millis(200)).await.unwrap();

    SECOND_LAUNCH.mark(&id);
    let rt = common::builder(&db).workflow("deep", deep).launch().await.unwrap();
    let matched = common::within(rt.client().handle(id.clone()).result::<u32>())
        .await
        .unwrap();
    assert_eq!(matched, STEPS, "every output replayed is the recorded one");
    let rerun: Vec<u32> = (1..=STEPS).filter(|&i| common::body_run(&id, i) != 1).collect();
    assert!(rerun.is_empty(), "step bodies run again on replay: {rerun:?}");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

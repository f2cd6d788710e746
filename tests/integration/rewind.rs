//! Rewind (`Client::rewind`: a finished workflow runs again from a step under its own id) and
//! the reject policy (`WorkflowOptions::reject_existing`).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use stead::{Context, Error, WorkflowOptions};

use crate::common;

static RUNS: OnceLock<Mutex<HashMap<String, Vec<u32>>>> = OnceLock::new();

fn runs(id: &str) -> Vec<u32> {
    RUNS.get_or_init(Default::default)
        .lock()
        .unwrap()
        .get(id)
        .cloned()
        .unwrap_or_default()
}

/// Five counted steps; returns the sum of their outputs.
async fn five(ctx: Context, _: ()) -> stead::Result<u32> {
    let mut sum = 0;
    for i in 1..=5u32 {
        let id = ctx.workflow_id().to_owned();
        sum += ctx
            .step(&format!("s{i}"), || async move {
                RUNS.get_or_init(Default::default)
                    .lock()
                    .unwrap()
                    .entry(id)
                    .or_default()
                    .push(i);
                Ok(i)
            })
            .await?;
    }
    Ok(sum)
}

async fn parked(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.sleep(Duration::from_secs(60)).await
}

both_backends! {
async fn a_rewind_from_step_three_reruns_three_to_five_under_the_same_id(db) {
    let rt = common::builder(&db)
        .workflow("five", five)
        .workflow("parked", parked)
        .launch()
        .await
        .unwrap();
    let id = format!("{:?}-rw", db.backend);
    let h = rt.start("five", (), WorkflowOptions::with_id(&id)).await.unwrap();
    assert_eq!(common::within(h.result::<u32>()).await.unwrap(), 15);
    assert_eq!(runs(&id), [1, 2, 3, 4, 5]);

    let again = rt.client().rewind(&id, 3).await.unwrap();
    assert_eq!(again.id(), id);
    assert_eq!(common::within(again.result::<u32>()).await.unwrap(), 15);
    assert_eq!(runs(&id), [1, 2, 3, 4, 5, 3, 4, 5], "1 and 2 replayed, 3 to 5 ran once more");
    let steps = rt.client().steps(&id).await.unwrap();
    assert_eq!(steps.len(), 5);

    // Refusals: a running workflow, an unknown id, step 0.
    let p = format!("{:?}-parked", db.backend);
    rt.start("parked", (), WorkflowOptions::with_id(&p)).await.unwrap();
    let running = rt.client().rewind(&p, 1).await.unwrap_err();
    assert!(matches!(running, Error::StillActive { .. }), "{running:?}");
    assert!(matches!(rt.client().rewind("nobody", 1).await, Err(Error::NotFound(_))));
    assert!(matches!(rt.client().rewind(&id, 0).await, Err(Error::InvalidArgument(_))));
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}
}

both_backends! {
async fn reject_existing_refuses_an_id_in_use_with_a_typed_error(db) {
    let rt = common::builder(&db).workflow("five", five).launch().await.unwrap();
    let id = format!("{:?}-once", db.backend);
    let first = rt
        .start("five", (), WorkflowOptions::with_id(&id).reject_existing())
        .await
        .unwrap();
    assert_eq!(common::within(first.result::<u32>()).await.unwrap(), 15);
    // The default returns the existing workflow; reject_existing refuses it.
    let same = rt.start("five", (), WorkflowOptions::with_id(&id)).await.unwrap();
    assert_eq!(same.id(), id);
    let refused = rt
        .start("five", (), WorkflowOptions::with_id(&id).reject_existing())
        .await
        .unwrap_err();
    assert!(matches!(&refused, Error::WorkflowExists(existing) if *existing == id), "{refused:?}");
    assert_eq!(runs(&id), [1, 2, 3, 4, 5], "ran once");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

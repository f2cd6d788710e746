//! Rewinding a finished workflow: refused while it runs, its calls from the step on dropped,
//! enqueued again with no owner.

use super::{owner_of, store_tests, Fixture, Kind};
use crate::base::status::Status;
use crate::sysdb::{FinishWrite, Rewind, Rewound, StepQuery};

store_tests!(rewind_drops_calls_from_the_step_and_requeues_a_finished_workflow);

fn rewind(id: &str, from_step: u32) -> Rewind {
    Rewind {
        id: id.into(),
        from_step,
        queue: "_dbos_internal_queue".into(),
        app_version: None,
    }
}

async fn rewind_drops_calls_from_the_step_and_requeues_a_finished_workflow(kind: Kind) {
    let f = Fixture::new(kind).await;
    assert_eq!(
        f.store.rewind(&rewind("nobody", 1)).await.unwrap(),
        Rewound::NotFound
    );
    f.running("w").await;
    for fid in 1..=3 {
        f.step("w", fid, "1").await;
    }
    assert_eq!(
        f.store.rewind(&rewind("w", 2)).await.unwrap(),
        Rewound::Active {
            status: "PENDING".into()
        }
    );
    let finish = FinishWrite {
        workflow_id: "w".into(),
        owner: owner_of("w"),
        status: "SUCCESS",
        output: Some("7".into()),
        error: None,
        step: None,
    };
    f.session().await.finish(&[&finish]).await.unwrap();
    assert_eq!(
        f.store.rewind(&rewind("w", 2)).await.unwrap(),
        Rewound::Requeued
    );
    let steps = f.store.list_steps("w", &StepQuery::ALL).await.unwrap();
    assert_eq!(steps.iter().map(|s| s.function_id).collect::<Vec<_>>(), [1]);
    let row = f.store.status("w").await.unwrap().unwrap();
    assert_eq!(row.status.status, Status::Enqueued);
    assert_eq!(
        row.status.queue_name.as_deref(),
        Some("_dbos_internal_queue")
    );
    assert_eq!(row.output, None);
    assert_eq!(f.store.workflow_owner("w").await.unwrap(), None);
}

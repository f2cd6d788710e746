//! The storage interface failing at a seeded 5% (test hook `Fault::Store`): every lane batch and
//! pool call may fail before it reaches the database or after the database applied it (the
//! reply lost). Steps, a queue, messages, events, durable sleeps and children all finish with
//! their results; no step body runs twice; no workflow is left unfinished.

use std::time::Duration;

use stead::{Context, Fault, Queue, WorkflowOptions};

use crate::common;

async fn leaf(ctx: Context, n: u64) -> stead::Result<u64> {
    let id = ctx.workflow_id().to_owned();
    ctx.step("double", move || {
        let id = id.clone();
        async move {
            common::count_body(&id, 0);
            Ok(n * 2)
        }
    })
    .await
}

async fn tour(ctx: Context, n: u64) -> stead::Result<u64> {
    let me = ctx.workflow_id().to_owned();
    let body_id = me.clone();
    let a: u64 = ctx
        .step("one", move || {
            let id = body_id.clone();
            async move {
                common::count_body(&id, 0);
                Ok(n)
            }
        })
        .await?;
    ctx.send(&me, &a, Some("t")).await?;
    let got: Option<u64> = ctx.recv(Some("t"), Duration::from_secs(60)).await?;
    assert_eq!(got, Some(n), "the message to itself");
    ctx.set_event("seen", &got).await?;
    let seen: Option<Option<u64>> = ctx.get_event(&me, "seen", Duration::from_secs(30)).await?;
    ctx.sleep(Duration::from_millis(20)).await?;
    let child: u64 = ctx
        .run_child("leaf", n, WorkflowOptions::with_id(format!("{me}-leaf")))
        .await?;
    Ok(seen.flatten().unwrap_or(0) + child)
}

both_backends! {
async fn five_percent_of_store_calls_failing_lose_nothing_and_rerun_nothing(db) {
    // `STEAD_FAULT_SEED=<seed>` replays a printed run's faults (their order, not their timing).
    let seed = std::env::var("STEAD_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
    let prefix = format!("sf{}-", if db.backend == common::Backend::Postgres { "p" } else { "s" });
    let rt = common::builder(&db)
        .workflow("tour", tour)
        .workflow("leaf", leaf)
        .queue(Queue::new("faulty").worker_concurrency(10))
        .launch()
        .await
        .unwrap();
    assert!(rt.inject_fault(Fault::Store { seed, per_mille: 50 }));
    let mut handles = Vec::new();
    for n in 0..60u64 {
        let id = format!("{prefix}{n}");
        // A start refused by an injected fault is retried with the same id, as a caller would.
        let handle = loop {
            let opts = WorkflowOptions::with_id(id.clone());
            let started = if n % 2 == 0 {
                rt.start("tour", n, opts).await
            } else {
                rt.enqueue("faulty", "tour", n, opts).await
            };
            match started {
                Ok(h) => break h,
                Err(e) => assert!(e.to_string().contains("injected fault"), "{e}"),
            }
        };
        handles.push(handle);
    }
    for (n, h) in handles.iter().enumerate() {
        let got = tokio::time::timeout(Duration::from_secs(120), h.result::<u64>())
            .await
            .unwrap_or_else(|_| panic!("{prefix}{n} is stuck (seed {seed})"))
            .unwrap_or_else(|e| panic!("{prefix}{n} (seed {seed}): {e}"));
        assert_eq!(got, 3 * n as u64, "seed {seed}");
    }
    let (before, after) = rt.store_faults_struck();
    let runs = common::body_runs_by_step(&prefix);
    let reran: Vec<_> = runs.iter().filter(|(_, n)| *n > 1).collect();
    eprintln!(
        "store faults ({:?}, seed {seed}): {before} before the database, {after} after it; {} \
         step bodies, {} re-ran",
        db.backend,
        runs.len(),
        reran.len()
    );
    let pool = db.checks().await;
    for ((id, _), _) in &reran {
        let row = common::scalar(
            &pool,
            &format!(
                "SELECT status || ' attempts ' || recovery_attempts FROM dbos.workflow_status \
                 WHERE workflow_uuid = '{id}'"
            ),
        )
        .await;
        eprintln!("{id}: {row:?}");
    }
    assert!(before + after > 0, "no fault struck (seed {seed})");
    assert_eq!(runs.len(), 120, "every step ran (seed {seed})");
    assert!(reran.is_empty(), "step bodies re-ran (seed {seed}): {reran:?}");
    rt.shutdown(Duration::from_secs(10)).await.unwrap();
}
}

//! Executor ids and SIGKILL: a second launch under a live id is refused and touches
//! nothing; a killed executor's work is adopted by a survivor, each step body run at most twice.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_launch_under_a_live_id_is_refused_and_touches_nothing() {
    let db = common::TestDb::new().await;
    let effects_db = common::TestDb::new().await;
    let effects = effects_pool(&effects_db.url, "twin-").await;
    let first = executor(&db.url, "twin", "v1").launch().await.unwrap();
    let h = first
        .enqueue("work", "job", 1u64, WorkflowOptions::with_id("twin-1"))
        .await
        .unwrap();
    let pool = db.pool().await;
    common::wait_count(&effects, "SELECT count(*) FROM effects", 1).await;
    let before: (String, i64) = sqlx::query_as(
        "SELECT executor_id, recovery_attempts FROM dbos.workflow_status \
         WHERE workflow_uuid = 'twin-1'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let second = executor(&db.url, "twin", "v1").launch().await;
    assert!(
        matches!(&second, Err(Error::ExecutorInUse { executor_id }) if executor_id == "twin"),
        "{:?}",
        second.err()
    );
    let after: (String, i64) = sqlx::query_as(
        "SELECT executor_id, recovery_attempts FROM dbos.workflow_status \
         WHERE workflow_uuid = 'twin-1'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(before, after, "the first executor's run was not touched");
    assert_eq!(common::within(h.result::<u64>()).await.unwrap(), 3);
    assert_eq!(repeats(&effects).await, (0, 0), "nothing ran twice");
    // Empty ids and versions are refused by name.
    for (id, version) in [("", "v1"), ("x", "")] {
        let err = executor(&db.url, id, version).launch().await.err();
        assert!(matches!(err, Some(Error::InvalidArgument(_))), "{err:?}");
    }
    first.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_executors_work_is_adopted_once_by_a_survivor() {
    let (prefix, n) = ("kill-", 200);
    let db = common::TestDb::new().await;
    let effects_db = common::TestDb::new().await;
    let effects = effects_pool(&effects_db.url, prefix).await;
    let pool = db.pool().await;
    let _doomed = spawn(&db.url, &effects_db.url, "doomed", "v1", false);
    wait_live(&pool, "doomed").await;
    let client = stead::Client::connect(&db.url).await.unwrap();
    let mut handles = Vec::new();
    for i in 0..n {
        let options = WorkflowOptions::with_id(format!("{prefix}{i}"));
        handles.push(client.enqueue("work", "job", i, options).await.unwrap());
    }
    // Only the child serves the queue until it is well into the work.
    common::wait_count(&effects, "SELECT count(*) FROM effects", 40).await;
    let mut doomed = _doomed;
    doomed.0.kill().unwrap();
    let killed = Instant::now();
    doomed.0.wait().unwrap();
    let orphans: Vec<String> = sqlx::query_scalar(
        "SELECT workflow_uuid FROM dbos.workflow_status WHERE executor_id = 'doomed' \
         AND status = 'PENDING'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let in_flight = orphans.len() as i64;
    assert!(in_flight > 0, "the child was running work when killed");
    let survivor = executor(&db.url, "survivor", "v1").launch().await.unwrap();
    let latency = first_step_of(&effects, &orphans, killed).await;
    println!("kill -> first adopted step: {latency:?} ({in_flight} workflows in flight)");
    for (i, h) in handles.iter().enumerate() {
        let out = common::within(h.result::<u64>()).await.unwrap();
        assert_eq!(out, i as u64 * steps());
    }
    let (repeated, most) = repeats(&effects).await;
    println!("step bodies run twice: {repeated} (at most {in_flight} were in flight)");
    assert!(
        repeated <= in_flight && most <= 2,
        "{repeated} repeats, max {most}"
    );
    let adopted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dbos.workflow_status WHERE executor_id = 'survivor'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(adopted >= in_flight, "the survivor ran the dead one's work");
    // Behaviour: adoption within about ten seconds (the default lease's expiry plus a fleet
    // round); lease expiry is wall-clock, so load adds only the round's own statements.
    assert!(
        latency < Duration::from_secs(10),
        "adopted after {latency:?}"
    );
    // The roster shows both: the survivor live, the dead one dead with nothing pending.
    let listed = survivor.client().list_executors().await.unwrap();
    let state: HashMap<_, _> = listed
        .iter()
        .map(|e| (e.executor_id.as_str(), (e.live, e.pending)))
        .collect();
    assert_eq!(state.get("doomed"), Some(&(false, 0)));
    assert_eq!(state.get("survivor").map(|s| s.0), Some(true));
    survivor.shutdown(Duration::from_secs(5)).await.unwrap();
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// How long after `since` the parent first ran a step body of one of `orphans` (waiting up to
/// 30 s): the first adopted step.
async fn first_step_of(effects: &PgPool, orphans: &[String], since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM effects WHERE executor = 'parent' AND wf = ANY($1)",
        )
        .bind(orphans)
        .fetch_one(effects)
        .await
        .unwrap();
        if n > 0 {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "nothing adopted within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

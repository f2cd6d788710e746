//! The fleet soak (ignored; run by `.ci/run`): 4 child processes, 5,000 workflows, 2 of the
//! processes killed along the way; every output right, a step body run again only after the
//! process that ran it was killed.

use super::*;

/// The soak's children: 5 steps of 40 ms each, the default lease and adoption interval. Set on
/// the children only (the soak's own process runs no workflow), so tests running beside it in
/// this process keep theirs.
fn soak_settings(cmd: &mut Command) -> &mut Command {
    cmd.env(STEPS, "5").env(STEP_MS, "40").env(DEFAULTS, "1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the fleet soak (4 processes, 5,000 workflows, 2 killed): run by .ci/run"]
async fn fleet_soak() {
    let (prefix, n) = ("soak-", 5000u64);
    let db = common::TestDb::new().await;
    let effects_db = common::TestDb::new().await;
    let effects = effects_pool(&effects_db.url, prefix).await;
    let pool = db.pool().await;
    let mut children: Vec<Killed> = (0..4)
        .map(|i| {
            let mut cmd = child(&db.url, &effects_db.url, &format!("soak-{i}"), "v1");
            Killed(soak_settings(&mut cmd).spawn().unwrap())
        })
        .collect();
    for i in 0..4 {
        wait_live(&pool, &format!("soak-{i}")).await;
    }
    let client = stead::Client::connect(&db.url).await.unwrap();
    let began = Instant::now();
    for i in 0..n {
        let options = WorkflowOptions::with_id(format!("{prefix}{i}"));
        client.enqueue("work", "job", i, options).await.unwrap();
    }
    let mut in_flight = 0;
    let kills = [n / 5, n / 2];
    let mut latencies = Vec::new();
    for (k, at) in kills.iter().enumerate() {
        common::wait_count(
            &pool,
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'",
            *at as i64,
        )
        .await;
        // A random-ish moment past the mark.
        tokio::time::sleep(Duration::from_millis(u64::from(
            began.elapsed().subsec_millis(),
        )))
        .await;
        let victim = format!("soak-{k}");
        children[k].0.kill().unwrap();
        let killed = Instant::now();
        children[k].0.wait().unwrap();
        let orphans: Vec<String> = sqlx::query_scalar(
            "SELECT workflow_uuid FROM dbos.workflow_status WHERE executor_id = $1 \
             AND status = 'PENDING'",
        )
        .bind(&victim)
        .fetch_all(&pool)
        .await
        .unwrap();
        in_flight += orphans.len() as i64;
        let latency = first_adopted_step(&effects, &victim, &orphans, killed).await;
        println!(
            "killed {victim}: {} in flight, first adopted step after {latency:?}",
            orphans.len()
        );
        latencies.push(latency);
    }
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'",
        n as i64,
    )
    .await;
    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dbos.workflow_status s LEFT JOIN dbos.workflow_output o USING \
         (workflow_uuid) WHERE COALESCE(o.output, s.output)::jsonb \
         IS DISTINCT FROM to_jsonb(split_part(s.workflow_uuid, '-', 2)::int8 * 5)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(wrong, 0, "every output right");
    let (repeated, most) = repeats(&effects).await;
    println!(
        "soak: {n} workflows in {:?}; step bodies run twice: {repeated} (in flight at kills: \
         {in_flight}); adoption latencies {latencies:?}",
        began.elapsed()
    );
    // A body runs again only after the process that ran it before was killed: every run of a
    // step but its last is in a killed process (a step in flight at both kills runs three times).
    let unexplained: Vec<(String, i32, Vec<String>)> = sqlx::query_as(
        "SELECT wf, step, array_agg(executor ORDER BY began) FROM effects \
         GROUP BY wf, step HAVING count(*) > 1",
    )
    .fetch_all(&effects)
    .await
    .unwrap()
    .into_iter()
    .filter(|(_, _, runs): &(String, i32, Vec<String>)| {
        runs[..runs.len() - 1]
            .iter()
            .any(|e| !(0..kills.len()).any(|k| *e == format!("soak-{k}")))
    })
    .collect();
    assert!(
        unexplained.is_empty(),
        "step bodies ran again though the process that ran them lived: {unexplained:?}"
    );
    assert!(repeated <= in_flight && most <= 1 + kills.len() as i64);
    // Behaviour: adoption within about ten seconds (lease expiry plus a round), as in survivors.rs.
    assert!(latencies.iter().all(|l| *l < Duration::from_secs(10)));
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// How long after `since` another executor than `dead` first ran a step of `orphans`.
async fn first_adopted_step(
    effects: &PgPool,
    dead: &str,
    orphans: &[String],
    since: Instant,
) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM effects WHERE executor <> $1 AND wf = ANY($2) \
             AND at > clock_timestamp() - make_interval(secs => $3)",
        )
        .bind(dead)
        .bind(orphans)
        .bind(since.elapsed().as_secs_f64())
        .fetch_one(effects)
        .await
        .unwrap();
        if n > 0 || orphans.is_empty() {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "nothing adopted within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

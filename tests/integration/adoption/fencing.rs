//! The long tests (ignored; run by `.ci/run`): a process frozen for 20 s is adopted and starts
//! nothing after it thaws; one cut off its database for 20 s fences itself, and its work runs
//! once. And one short: a lease lost while a step's held record is written starts no step until
//! it is back (the gate is passed again after the write).

use super::*;

fn signal(child: &Child, sig: &str) {
    let done = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(done.success(), "kill {sig}");
}

/// The database server's clock, as text (compared in SQL).
async fn server_now(pool: &PgPool) -> String {
    sqlx::query_scalar("SELECT clock_timestamp()::text")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "freezes a process for 20 s: run by .ci/run"]
async fn a_process_frozen_for_20_s_is_adopted_and_starts_nothing_after_it_thaws() {
    let (prefix, n) = ("frozen-", 10u64);
    let db = common::TestDb::new().await;
    let effects_db = common::TestDb::new().await;
    let effects = effects_pool(&effects_db.url, prefix).await;
    let pool = db.pool().await;
    let frozen = spawn(&db.url, &effects_db.url, "frozen", "v1", false);
    wait_live(&pool, "frozen").await;
    let client = stead::Client::connect(&db.url).await.unwrap();
    let mut handles = Vec::new();
    for i in 0..n {
        let options = WorkflowOptions::with_id(format!("{prefix}{i}"));
        handles.push(client.enqueue("work", "job", i, options).await.unwrap());
    }
    common::wait_count(&effects, "SELECT count(*) FROM effects", n as i64).await;
    let survivor = executor(&db.url, "survivor", "v1").launch().await.unwrap();
    // Frozen (as by a long pause or a lost network): its lease session ends on the server.
    signal(&frozen.0, "-STOP");
    let stopped = server_now(&effects).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    signal(&frozen.0, "-CONT");
    let thawed = server_now(&effects).await;
    for (i, h) in handles.iter().enumerate() {
        let out = common::within(h.result::<u64>()).await.unwrap();
        assert_eq!(out, i as u64 * steps());
    }
    // Adopted: every workflow finished under the survivor, and the thawed process started no
    // step body (its lease had run out), so only bodies in flight at the freeze ran twice.
    let survivors: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dbos.workflow_status WHERE executor_id = 'survivor'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(survivors, n as i64);
    // By when the body began: one in flight at the freeze may insert its row after the thaw.
    let late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM effects WHERE executor = 'frozen' AND began >= $1::timestamptz",
    )
    .bind(&thawed)
    .fetch_one(&effects)
    .await
    .unwrap();
    assert_eq!(
        late, 0,
        "no step began in the frozen process after it thawed"
    );
    let (repeated, most) = repeats(&effects).await;
    println!(
        "frozen at {}: {repeated} step bodies ran twice (at most {n} in flight)",
        stopped
    );
    assert!(repeated <= n as i64 && most <= 2);
    survivor.shutdown(Duration::from_secs(5)).await.unwrap();
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cuts a process off its database for 20 s: run by .ci/run"]
async fn a_process_cut_off_its_database_for_20_s_fences_and_its_work_runs_once() {
    let (prefix, n, lease) = ("cut-", 10u64, 2.0f64);
    let db = common::TestDb::new().await;
    let effects_db = common::TestDb::new().await;
    let effects = effects_pool(&effects_db.url, prefix).await;
    let pool = db.pool().await;
    // The child reaches the system database only through the proxy (its effects go direct),
    // and its steps hold 1 s, so every workflow is inside a step body when the proxy is cut.
    let proxy = common::proxy::Proxy::start().await;
    let mut cut_off = Killed(
        child(&proxy.url(&db.url), &effects_db.url, "cut", "v1")
            .env(STEP_MS, "1000")
            .spawn()
            .unwrap(),
    );
    wait_live(&pool, "cut").await;
    let client = stead::Client::connect(&db.url).await.unwrap();
    let mut handles = Vec::new();
    for i in 0..n {
        let options = WorkflowOptions::with_id(format!("{prefix}{i}"));
        handles.push(client.enqueue("work", "job", i, options).await.unwrap());
    }
    common::wait_count(&effects, "SELECT count(*) FROM effects", n as i64).await;
    let survivor = executor(&db.url, "survivor", "v1").launch().await.unwrap();
    common::wait_count(&effects, "SELECT count(*) FROM effects", 15).await;
    let before = server_now(&effects).await;
    let dropped = proxy.cut();
    let after = server_now(&effects).await;
    // The checkpoints the child wrote, once any commit already in transit landed (no peer can
    // adopt before the lease runs out, so these are all the child's).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done: HashMap<String, i64> = sqlx::query_as(
        "SELECT workflow_uuid, count(*) FROM dbos.operation_outputs \
         WHERE function_name = 'effect' GROUP BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert!(
        done.values().all(|&d| d < steps() as i64),
        "every workflow was unfinished at the cut: {done:?}"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    proxy.restore();
    // It comes back: alive, its lock taken again through the proxy.
    wait_live(&pool, "cut").await;
    assert!(cut_off.0.try_wait().unwrap().is_none(), "the child lives");
    for (i, h) in handles.iter().enumerate() {
        let out = common::within(h.result::<u64>()).await.unwrap();
        assert_eq!(out, i as u64 * steps());
    }
    // Time for the returned process to recover whatever it still thinks is its own.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Fenced: no step body began in the cut-off process after its lease ran out (a second of
    // slack for the body's own insert), through the cut and after it came back.
    let (late, last): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE at > $1::timestamptz + make_interval(secs => $2 + 1)), \
         extract(epoch FROM max(at) - $1::timestamptz)::float8 FROM effects \
         WHERE executor = 'cut'",
    )
    .bind(&after)
    .bind(lease)
    .fetch_one(&effects)
    .await
    .unwrap();
    assert_eq!(
        late, 0,
        "no step body began in the cut-off process after its lease"
    );
    // Adopted only after the lease: the survivor's first body of this work came later.
    let first: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM min(at) - $1::timestamptz)::float8 FROM effects \
         WHERE executor = 'parent'",
    )
    .bind(&before)
    .fetch_one(&effects)
    .await
    .unwrap();
    let first = first.expect("the survivor ran some of the work");
    assert!(first >= lease, "adopted {first:.2} s after the cut");
    let survivors: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dbos.workflow_status WHERE executor_id = 'survivor' \
         AND status = 'SUCCESS'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(survivors, n as i64, "the survivor finished all of it");
    let checkpoints: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'effect'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(checkpoints, (n * steps()) as i64, "one checkpoint per step");
    // Only bodies in flight at the cut (begun, not checkpointed) ran twice; the rest once.
    let bodies: Vec<(String, i32, i64, bool)> = sqlx::query_as(
        "SELECT wf, step, count(*), bool_or(executor = 'cut') FROM effects GROUP BY 1, 2",
    )
    .fetch_all(&effects)
    .await
    .unwrap();
    let (mut in_flight, mut repeated) = (0, 0);
    for (wf, step, runs, by_child) in &bodies {
        let open = *by_child && i64::from(*step) > done.get(wf).copied().unwrap_or(0);
        in_flight += i64::from(open);
        repeated += i64::from(*runs > 1);
        assert!(
            *runs == 1 || (open && *runs == 2),
            "{wf} step {step} ran {runs} times"
        );
    }
    println!(
        "cut for 20 s ({dropped} connections dropped): last body in the cut-off process began \
         {:.2} s after the cut, first adopted body {first:.2} s after it; step bodies run twice: \
         {repeated} (in flight at the cut: {in_flight})",
        last.unwrap_or(f64::NAN)
    );
    survivor.shutdown(Duration::from_secs(5)).await.unwrap();
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The gate is the last thing before a step's body: a lease that runs out while the previous
/// step's held record is being written (here: its insert waits on a table lock, and so do the
/// pings) starts the next body only once the lease is back, not as soon as the write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_while_a_record_is_written_starts_no_step_until_it_is_back() {
    static BEGAN: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
    async fn two_steps(ctx: Context, _: ()) -> stead::Result<()> {
        for i in 0..2u32 {
            ctx.step("s", move || async move {
                BEGAN.lock().unwrap().push((i, Instant::now()));
                Ok(())
            })
            .await?;
        }
        Ok(())
    }
    let db = common::TestDb::new().await;
    let rt = Runtime::builder()
        .database_url(&db.url)
        .executor_id("gated")
        .lease(Duration::from_secs(2))
        .workflow("two", two_steps)
        .launch()
        .await
        .unwrap();
    let pool = db.pool().await;
    let lock = |table: &'static str| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let sql = format!("LOCK TABLE dbos.{table} IN EXCLUSIVE MODE");
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await
                .unwrap();
            tx
        }
    };
    // Step 0's record is written when step 1 begins: it waits on this lock, and so do pings.
    let records = lock("operation_outputs").await;
    let pings = lock("stead_executors").await;
    let h = rt
        .start("two", (), WorkflowOptions::with_id("g"))
        .await
        .unwrap();
    common::wait::until_async("step 0 ran", Duration::from_millis(10), || async {
        !BEGAN.lock().unwrap().is_empty()
    })
    .await;
    // Past the lease: the gate is shut. Then the record lands while pings still wait.
    tokio::time::sleep(Duration::from_secs(3)).await;
    records.commit().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let renewable = Instant::now();
    pings.commit().await.unwrap();
    common::within(h.result::<()>()).await.unwrap();
    let began = BEGAN.lock().unwrap().clone();
    assert_eq!(
        began.iter().filter(|(i, _)| *i == 0).count(),
        1,
        "{began:?}"
    );
    let step1: Vec<_> = began.iter().filter(|(i, _)| *i == 1).collect();
    assert_eq!(step1.len(), 1, "{began:?}");
    assert!(
        step1[0].1 > renewable,
        "step 1 began {:?} before the pings could renew the lease",
        renewable - step1[0].1
    );
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

//! A fleet that heals itself (Postgres): executor ids are unique among live processes, a
//! SIGKILLed or frozen executor's work is adopted by a survivor (once), a retired version's work
//! is reported stranded and moved by one command, and a DBOS Python app's work is never taken.
//!
//! Executors that die are child processes: this test binary run again as `adoption_child`.
//! Step bodies append to a side-effect table in a database of their own, so how often each body
//! ran is counted outside the system database.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use stead::{Context, Error, Queue, Runtime, WorkflowOptions};

use crate::common;

const CHILD_DB: &str = "STEAD_TEST_ADOPT_DB";
const CHILD_EFFECTS: &str = "STEAD_TEST_ADOPT_EFFECTS";
const CHILD_ID: &str = "STEAD_TEST_ADOPT_EXECUTOR";
const CHILD_VERSION: &str = "STEAD_TEST_ADOPT_VERSION";
const CHILD_PARK: &str = "STEAD_TEST_ADOPT_PARK";
const CHILD_WIDTH: &str = "STEAD_TEST_ADOPT_WIDTH";
const DEFAULTS: &str = "STEAD_TEST_ADOPT_DEFAULTS";

/// How long each step body holds, in ms, and the number of steps of a job (the soak sets both
/// through the environment, for its children too).
const STEP_MS: &str = "STEAD_TEST_ADOPT_STEP_MS";
const STEPS: &str = "STEAD_TEST_ADOPT_STEPS";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn steps() -> u64 {
    setting(STEPS, 3)
}

/// The side-effect pools, by workflow-id prefix (tests run in parallel in one process).
static EFFECTS: OnceLock<Mutex<HashMap<String, PgPool>>> = OnceLock::new();

fn effects_for(id: &str) -> PgPool {
    let pools = EFFECTS.get_or_init(Default::default).lock().unwrap();
    pools
        .iter()
        .find(|(prefix, _)| id.starts_with(prefix.as_str()))
        .map(|(_, pool)| pool.clone())
        .expect("an effects pool for this workflow")
}

async fn effects_pool(url: &str, prefix: &str) -> PgPool {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(url)
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS effects (wf text, step int, executor text, \
         at timestamptz DEFAULT clock_timestamp())",
    )
    .execute(&pool)
    .await
    .unwrap();
    EFFECTS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .insert(prefix.to_owned(), pool.clone());
    pool
}

/// `STEPS` steps, each appending its effect then holding; parks forever in a child told to.
async fn job(ctx: Context, n: u64) -> stead::Result<u64> {
    let (mut total, hold) = (0, Duration::from_millis(setting(STEP_MS, 150)));
    for step in 1..=steps() {
        let (id, me) = (ctx.workflow_id().to_owned(), executor_name());
        total += ctx
            .step_typed("effect", move || async move {
                sqlx::query("INSERT INTO effects (wf, step, executor) VALUES ($1, $2, $3)")
                    .bind(&id)
                    .bind(step as i32)
                    .bind(me)
                    .execute(&effects_for(&id))
                    .await?;
                tokio::time::sleep(hold).await;
                Ok::<_, sqlx::Error>(n)
            })
            .await?;
        if std::env::var(CHILD_PARK).is_ok() {
            std::future::pending::<()>().await;
        }
    }
    Ok(total)
}

/// Which process ran a body: the child's executor id, else `parent`.
fn executor_name() -> String {
    std::env::var(CHILD_ID).unwrap_or_else(|_| "parent".into())
}

fn executor(url: &str, id: &str, version: &str) -> stead::RuntimeBuilder {
    let width = std::env::var(CHILD_WIDTH)
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(10);
    let b = Runtime::builder()
        .database_url(url)
        .app_version(version)
        .executor_id(id)
        .internal_queue_poll(Duration::from_millis(200))
        .workflow("job", job)
        .queue(Queue::new("work").worker_concurrency(width));
    // The soak measures the default lease and adoption interval; the rest shorten them.
    if std::env::var(DEFAULTS).is_ok() {
        return b;
    }
    b.lease(Duration::from_secs(2))
        .adoption_interval(Duration::from_millis(500))
}

/// Entry point of a child executor; does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the adoption tests as a child executor"]
async fn adoption_child() {
    let (Ok(url), Ok(effects), Ok(id), Ok(version)) = (
        std::env::var(CHILD_DB),
        std::env::var(CHILD_EFFECTS),
        std::env::var(CHILD_ID),
        std::env::var(CHILD_VERSION),
    ) else {
        return;
    };
    effects_pool(&effects, "").await;
    let _rt = executor(&url, &id, &version).launch().await.unwrap();
    std::future::pending::<()>().await;
}

/// Kills the child when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The command that runs a child executor `id` of `version` on the system database `db`.
fn child(db: &str, effects: &str, id: &str, version: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "adoption::adoption_child",
        "--ignored",
        "--nocapture",
    ])
    .env(CHILD_DB, db)
    .env(CHILD_EFFECTS, effects)
    .env(CHILD_ID, id)
    .env(CHILD_VERSION, version)
    .stdout(Stdio::null());
    cmd
}

fn spawn(db: &str, effects: &str, id: &str, version: &str, park: bool) -> Killed {
    let mut cmd = child(db, effects, id, version);
    if park {
        cmd.env(CHILD_PARK, "1").env(CHILD_WIDTH, "100");
    }
    Killed(cmd.spawn().unwrap())
}

async fn live_executors(pool: &PgPool, id: &str) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM dbos.stead_executors e WHERE executor_id = $1 AND EXISTS \
         (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 2 \
          AND l.classid::int8 = (e.lock_key1::int8 & 4294967295) \
          AND l.objid::int8 = (e.lock_key2::int8 & 4294967295))",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .ok()
}

async fn wait_live(pool: &PgPool, id: &str) {
    for _ in 0..600 {
        if live_executors(pool, id).await == Some(1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("executor {id} never came up");
}

/// How many step bodies ran more than once, and the most times one ran.
async fn repeats(effects: &PgPool) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), COALESCE(max(n), 0) FROM \
         (SELECT count(*) AS n FROM effects GROUP BY wf, step HAVING count(*) > 1) x",
    )
    .fetch_one(effects)
    .await
    .unwrap()
}

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
    common::wait_count(&effects, "SELECT count(*) FROM effects", 1, 30).await;
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
    common::wait_count(&effects, "SELECT count(*) FROM effects", 40, 60).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_versions_work_is_stranded_until_one_command_moves_it() {
    let (prefix, n) = ("deploy-", 100u64);
    let db = common::TestDb::new().await;
    let effects_db = common::TestDb::new().await;
    let effects = effects_pool(&effects_db.url, prefix).await;
    let pool = db.pool().await;
    // Version A runs 100 workflows (each parks after its first step), then every A dies.
    let mut a = spawn(&db.url, &effects_db.url, "a-1", "A", true);
    wait_live(&pool, "a-1").await;
    let client = stead::Client::connect(&db.url).await.unwrap();
    for i in 0..n {
        let options = WorkflowOptions::with_id(format!("{prefix}{i}")).app_version("A");
        client.enqueue("work", "job", i, options).await.unwrap();
    }
    // Every first step recorded: the A processes die between steps.
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.operation_outputs",
        n as i64,
        60,
    )
    .await;
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    // Version B starts: it cannot run A's work, so the work is reported, not adopted.
    let b = executor(&db.url, "b-1", "B").launch().await.unwrap();
    let mut stranded = Vec::new();
    for _ in 0..100 {
        stranded = b.client().stranded_workflows().await.unwrap();
        if stranded.len() == n as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stranded.len(), n as usize, "all of A's work is stranded");
    let admin = stead::admin::serve(b.client(), stead::admin::AdminOptions::new())
        .await
        .unwrap();
    let listing = common::http::get(&format!("{}/api/stranded", admin.url()), None).await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    let body = listing.json();
    assert_eq!(body["workflows"].as_array().map(Vec::len), Some(n as usize));
    admin.shutdown().await;
    let cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_stead"))
        .args(["--database-url", &db.url, "--json", "workflow", "stranded"])
        .output()
        .await
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(n as usize));
    // The one documented command moves them onto B, which finishes them.
    let moved = tokio::process::Command::new(env!("CARGO_BIN_EXE_stead"))
        .args([
            "--database-url",
            &db.url,
            "workflow",
            "stranded",
            "--move-to",
            "B",
        ])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&moved.stdout);
    assert!(text.contains(&format!("moved {n} stranded")), "{text}");
    for i in 0..n {
        let h = client.handle(format!("{prefix}{i}"));
        assert_eq!(common::within(h.result::<u64>()).await.unwrap(), i * 3);
    }
    assert!(b.client().stranded_workflows().await.unwrap().is_empty());
    // Each first step ran once (recorded by A, replayed by B).
    assert_eq!(repeats(&effects).await, (0, 0));
    b.shutdown(Duration::from_secs(5)).await.unwrap();
    client.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dbos_python_apps_pending_work_is_never_adopted() {
    require_dbos!();
    let db = common::TestDb::new().await;
    let pool = db.pool().await;
    stead::Client::migrate(&db.url, &Default::default())
        .await
        .unwrap();
    // A live DBOS app starts two workflows that hold, then dies (the tempting case).
    let python = common::dbos_py::dbos_cli_async()
        .await
        .with_file_name("python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/app.py");
    let mut app = tokio::process::Command::new(python)
        .arg(script)
        .args([&common::dbos_py::sqlalchemy_url(&db.url), "pyapp", "2"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_count(
        &pool,
        "SELECT count(*) FROM dbos.workflow_status s JOIN dbos.operation_outputs o \
         USING (workflow_uuid) WHERE s.status = 'PENDING' AND s.application_name = 'pyapp'",
        2,
        60,
    )
    .await;
    let before: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT workflow_uuid, executor_id, recovery_attempts FROM dbos.workflow_status \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    app.kill().await.unwrap();
    // stead executors come and go around it: one is killed, a survivor adopts.
    let effects_db = common::TestDb::new().await;
    let _effects = effects_pool(&effects_db.url, "py-").await;
    let rt = executor(&db.url, "stead-1", "v1").launch().await.unwrap();
    let mut doomed = spawn(&db.url, &effects_db.url, "stead-2", "v1", false);
    wait_live(&pool, "stead-2").await;
    doomed.0.kill().unwrap();
    doomed.0.wait().unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT workflow_uuid, executor_id, recovery_attempts FROM dbos.workflow_status \
         WHERE status = 'PENDING' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(before, after, "the DBOS app's workflows are untouched");
    let listed = rt.client().list_executors().await.unwrap();
    assert!(listed.iter().all(|e| e.executor_id.starts_with("stead-")));
    assert!(rt.client().stranded_workflows().await.unwrap().is_empty());
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

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
    common::wait_count(&effects, "SELECT count(*) FROM effects", n as i64, 60).await;
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
    let late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM effects WHERE executor = 'frozen' AND at >= $1::timestamptz",
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
    common::wait_count(&effects, "SELECT count(*) FROM effects", n as i64, 60).await;
    let survivor = executor(&db.url, "survivor", "v1").launch().await.unwrap();
    common::wait_count(&effects, "SELECT count(*) FROM effects", 15, 60).await;
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
            180,
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
        180,
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
    assert!(repeated <= in_flight && most <= 2);
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

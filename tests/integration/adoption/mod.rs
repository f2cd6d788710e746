//! A fleet that heals itself (Postgres): executor ids are unique among live processes, a
//! SIGKILLed or frozen executor's work is adopted by a survivor (once), a retired version's work
//! is reported stranded and moved by one command, and a DBOS Python app's work is never taken.
//!
//! Executors that die are child processes: this test binary run again as
//! `adoption::adoption_child`. Step bodies append to a side-effect table in a database of their
//! own, so how often each body ran is counted outside the system database.

mod fencing;
mod soak;
mod stranded;
mod survivors;

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
         at timestamptz DEFAULT clock_timestamp(), began timestamptz)",
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
                // When the body began, by this process's clock: its insert may land later.
                let began = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                sqlx::query(
                    "INSERT INTO effects (wf, step, executor, began) \
                     VALUES ($1, $2, $3, to_timestamp($4))",
                )
                .bind(&id)
                .bind(step as i32)
                .bind(me)
                .bind(began)
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

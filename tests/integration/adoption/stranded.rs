//! Work no survivor adopts: a retired version's is reported stranded until one command moves
//! it onto the new version; a DBOS Python app's pending work is never taken.

use super::*;

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

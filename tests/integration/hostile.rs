//! Hostile input: values the database can never hold fail the call that wrote them (typed),
//! never the run; refusals are not retried; foreign rows, bad serialization and panicking user
//! values do not blind or crash anything.

use std::time::Duration;

use stead::{error::DbError, Context, Error, WorkflowOptions};

use crate::common;

/// Each way a durable call can carry a value the database would refuse, and what it is.
const HOSTILE: &[(&str, &str)] = &[
    ("nul-step", "a NUL byte in a step name"),
    ("nul-event", "a NUL byte in an event key"),
    ("nul-topic", "a NUL byte in a recv topic"),
    ("nul-send", "a NUL byte in a send topic"),
    ("nul-stream", "a NUL byte in a stream key"),
    (
        "long-event",
        "an event key of 10,000 characters (past NOTIFY's 8,000 bytes)",
    ),
    (
        "long-step",
        "a step name of ~10 KB (past an index row's limit)",
    ),
];

/// Runs a counted step, then the hostile call `case`, and returns the kind of error the call
/// failed with (the workflow sees it typed and goes on), then a last step.
async fn hostile_call(ctx: Context, case: String) -> stead::Result<String> {
    let id = ctx.workflow_id().to_owned();
    ctx.step("before", || async {
        common::count_body(&id, 1);
        Ok(())
    })
    .await?;
    let long = "k".repeat(10_000);
    let result: stead::Result<()> = match case.as_str() {
        "nul-step" | "long-step" => {
            let name = if case == "nul-step" {
                "st\0ep".to_owned()
            } else {
                "s".repeat(10_240)
            };
            ctx.step(&name, || async {
                common::count_body(&id, 2);
                Ok(())
            })
            .await
        }
        "nul-event" => ctx.set_event("ke\0y", &1).await,
        "long-event" => ctx.set_event(&long, &1).await,
        "nul-topic" => ctx
            .recv::<u32>(Some("to\0pic"), Duration::from_millis(10))
            .await
            .map(drop),
        "nul-send" => ctx.send(&id, &1, Some("to\0pic")).await,
        "nul-stream" => ctx.write_stream("str\0eam", &1).await,
        other => panic!("unknown case {other}"),
    };
    let kind = match result {
        Ok(()) => "accepted".to_owned(),
        Err(e) => e.kind().to_owned(),
    };
    ctx.step("after", || async { Ok(()) }).await?;
    Ok(kind)
}

/// The error workflow `h` failed with, once it has; within 20 s (a run that crash-loops never
/// fails in time) and without a restart.
async fn failure(h: &stead::WorkflowHandle) -> stead::error::PortableError {
    let outcome = tokio::time::timeout(common::wait::SETUP, h.result::<serde_json::Value>())
        .await
        .expect("the workflow did not finish (restarting instead of failing?)");
    assert_eq!(h.status().await.unwrap().recovery_attempts, 1, "restarted");
    match outcome {
        Err(Error::WorkflowFailed { error, .. }) => *error,
        other => panic!("expected the workflow to fail, got {other:?}"),
    }
}

/// A step the database refuses to record (a constraint the test adds): the step's body ran.
async fn refused_step(ctx: Context, _: ()) -> stead::Result<()> {
    let id = ctx.workflow_id().to_owned();
    let refused = ctx
        .step("refused", || async {
            common::count_body(&id, 1);
            Ok(())
        })
        .await;
    // A step's record is held back until the next durable call or the outcome (which carry
    // it): the refusal fails whichever writes it, here the outcome.
    match &refused {
        Ok(()) | Err(Error::Database(DbError::Refused { .. })) => {}
        other => panic!("expected a refusal or a held record, got {other:?}"),
    }
    refused
}

both_backends! {
async fn values_the_database_cannot_hold_fail_the_call_not_the_run(db) {
    let rt = common::builder(&db)
        .workflow("hostile", hostile_call)
        .launch()
        .await
        .unwrap();
    let prefix = format!("hostile-{}-", db.name);
    for (case, what) in HOSTILE {
        let id = format!("{prefix}{case}");
        let h = rt
            .start("hostile", case.to_string(), WorkflowOptions::with_id(&id))
            .await
            .unwrap();
        let kind = tokio::time::timeout(common::wait::SETUP, h.result::<String>())
            .await
            .unwrap_or_else(|_| panic!("{what}: the workflow did not finish"))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(kind, "InvalidArgument", "{what}");
        assert_eq!(common::body_run(&id, 1), 1, "{what}: the step before ran again");
        assert_eq!(common::body_run(&id, 2), 0, "{what}: a refused step's body ran");
        assert_eq!(h.status().await.unwrap().recovery_attempts, 1, "{what}: restarted");
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_record_the_database_refuses_fails_the_step_once_without_a_restart(db) {
    let rt = common::builder(&db)
        .workflow("refused", refused_step)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let refuse = if db.is_sqlite() {
        "CREATE TRIGGER dbos.refuse BEFORE INSERT ON operation_outputs \
         WHEN NEW.function_name = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END"
    } else {
        "ALTER TABLE dbos.operation_outputs ADD CONSTRAINT refuse \
         CHECK (function_name <> 'refused')"
    };
    sqlx::query(sqlx::AssertSqlSafe(refuse)).execute(&pool).await.unwrap();
    let id = format!("refused-{}", db.name);
    let h = rt
        .start("refused", (), WorkflowOptions::with_id(&id))
        .await
        .unwrap();
    let error = failure(&h).await;
    assert_eq!(error.name, "DatabaseError");
    assert!(error.message.contains("refused"), "{}", error.message);
    assert_eq!(common::body_run(&id, 1), 1, "the step body ran again");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Every form of a database URL that carries a password (or is not a URL stead takes), with
/// whether it parses (a connection is then tried) and the CLI's exit code.
const SECRET: &str = "s3cret";
const URL_FORMS: &[(&str, bool)] = &[
    ("postgres://u:s3cret@127.0.0.1:1/db", true),
    ("postgres://127.0.0.1:1/db?user=u&password=s3cret", true),
    ("postgresql://127.0.0.1:1/db?pass%77ord=s3cret", true),
    ("host=127.0.0.1 port=1 user=u password=s3cret", false),
    ("postgres:u:s3cret@127.0.0.1:1/db", false),
    ("mysql://u:s3cret@127.0.0.1:1/db", false),
    ("http://u:s3cret@127.0.0.1:1/db", false),
    ("postgress://u:s3cret@127.0.0.1:1/db", false),
    ("postgres://u:s3cret@127.0.0.1:notaport/db", false),
];

/// Captured log output, shared with the subscriber that writes it.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_url_form_prints_its_password_in_errors_or_logs() {
    let logs = Logs::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    for (url, parses) in URL_FORMS {
        let options = stead::client::ClientOptions {
            connect_timeout: Duration::from_millis(300),
            ..Default::default()
        };
        let err = stead::Client::connect_with(url, options)
            .await
            .err()
            .unwrap();
        let (text, debug) = (err.to_string(), format!("{err:?}"));
        assert!(
            !text.contains(SECRET) && !debug.contains(SECRET),
            "{url}: {debug}"
        );
        match (&err, parses) {
            (Error::Connect { url: shown, .. }, true) => {
                assert!(shown.starts_with("postgres"), "{url}: {text}");
                // The cause is kept as the source, not only as text.
                assert!(std::error::Error::source(&err).is_some(), "{url}: {debug}");
                assert!(!text.contains(" at line "), "{url}: {text}");
            }
            (Error::InvalidUrl { .. }, false) => {}
            other => panic!("{url}: unexpected {other:?}"),
        }
    }
    // The server's refusal keeps its own words, without the server's source line, and its
    // cause as the source (issue 17).
    let missing = format!("{}/no_such_database_here", common::server_url());
    let err = stead::Client::connect(&missing).await.err().unwrap();
    let text = err.to_string();
    assert!(
        text.contains("does not exist") && !text.contains(" at line "),
        "{text}"
    );
    let source = std::error::Error::source(&err).expect("a source");
    assert!(source.to_string().contains("does not exist"), "{source}");

    let unknown = stead::Client::connect("mysql://db/app")
        .await
        .err()
        .unwrap();
    let text = unknown.to_string();
    assert!(
        text.contains("mysql") && text.contains("postgres://"),
        "{text}"
    );
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(!logged.contains(SECRET), "{logged}");
}

#[tokio::test]
async fn the_cli_prints_no_password_of_any_url_form() {
    for (url, parses) in URL_FORMS {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_stead"))
            .args([
                "--connect-timeout",
                "300ms",
                "--database-url",
                url,
                "workflow",
                "list",
            ])
            .env_remove("STEAD_DATABASE_URL")
            .env_remove("DATABASE_URL")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(SECRET), "{url}: {stderr}");
        assert_eq!(
            out.status.code(),
            Some(if *parses { 4 } else { 2 }),
            "{url}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{url}: {stderr}");
    }
}

async fn double(ctx: Context, n: u64) -> stead::Result<u64> {
    ctx.step("double", || async move { Ok(n * 2) }).await
}

both_backends! {
async fn a_foreign_row_with_an_unknown_status_is_listed_not_fatal(db) {
    let rt = common::builder(&db)
        .workflow("double", double)
        .launch()
        .await
        .unwrap();
    let h = rt.start("double", 2u64, WorkflowOptions::with_id("mine")).await.unwrap();
    assert_eq!(h.result::<u64>().await.unwrap(), 4);
    let pool = db.checks().await;
    sqlx::query(
        "INSERT INTO dbos.workflow_status (workflow_uuid, status, name) \
         VALUES ('foreign', 'BOGUS', 'theirs')",
    )
    .execute(&pool)
    .await
    .unwrap();

    // The library.
    let listed = rt.client().list_workflows(Default::default()).await.unwrap();
    let foreign = listed.iter().find(|w| w.status.id == "foreign").expect("listed");
    assert_eq!(foreign.status.status, stead::Status::Unknown);
    assert_eq!(foreign.status.stored_status.as_deref(), Some("BOGUS"));
    assert_eq!(foreign.status.status_label(), "BOGUS (unknown)");
    assert!(listed.iter().any(|w| w.status.id == "mine"));
    let one = rt.client().handle("foreign").status().await.unwrap();
    assert_eq!(one.stored_status.as_deref(), Some("BOGUS"));

    // The CLI, as a table and as JSON.
    let cli = |json: bool| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stead"));
        cmd.args(["--database-url", &db.url, "workflow", "list"]);
        if json {
            cmd.arg("--json");
        }
        cmd
    };
    let out = cli(false).output().await.unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.contains("BOGUS (unknown)") && table.contains("mine"), "{table}");
    let out = cli(true).output().await.unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = json.as_array().unwrap().iter().find(|w| w["id"] == "foreign").unwrap().clone();
    assert_eq!((row["status"].as_str(), row["stored_status"].as_str()), (Some("UNKNOWN"), Some("BOGUS")));

    // The admin API (the dashboard reads the same listing).
    let server = stead::admin::serve(rt.client(), Default::default()).await.unwrap();
    let got = common::http::get(&format!("{}/api/workflows", server.url()), None).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let workflows = got.json()["workflows"].as_array().unwrap().clone();
    let row = workflows.iter().find(|w| w["id"] == "foreign").expect("listed");
    assert_eq!(row["stored_status"], "BOGUS");
    assert!(workflows.iter().any(|w| w["id"] == "mine"));
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn deleting_a_queue_with_waiting_work_is_refused_or_cancels_it_by_choice(db) {
    stead::migrate(&db.url, "dbos").await.unwrap();
    let client = common::client(&db, "app").await;
    client.create_queue(stead::Queue::new("doomed")).await.unwrap();
    for id in ["w1", "w2"] {
        client
            .enqueue("doomed", "anything", (), WorkflowOptions::with_id(id))
            .await
            .unwrap();
    }
    match client.delete_queue("doomed").await {
        Err(Error::QueueNotEmpty { queue, waiting }) => assert_eq!((queue.as_str(), waiting), ("doomed", 2)),
        other => panic!("expected QueueNotEmpty, got {other:?}"),
    }
    assert_eq!(client.queues().await.unwrap().len(), 1, "the queue was deleted anyway");
    client
        .delete_queue_with("doomed", stead::queues::WaitingWork::Cancel)
        .await
        .unwrap();
    assert!(client.queues().await.unwrap().is_empty());
    for id in ["w1", "w2"] {
        assert_eq!(client.handle(id).status().await.unwrap().status, stead::Status::Cancelled);
    }
    client.shutdown(Duration::from_secs(1)).await.unwrap();
}
}

/// An error whose `Display` panics.
#[derive(Debug)]
struct Rude;

impl std::fmt::Display for Rude {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        panic!("Display of Rude")
    }
}

impl std::error::Error for Rude {}

async fn rude_step(ctx: Context, _: ()) -> stead::Result<()> {
    let id = ctx.workflow_id().to_owned();
    ctx.step_typed("rude", || async {
        common::count_body(&id, 1);
        Err::<(), _>(Rude)
    })
    .retry(stead::RetryPolicy::attempts(3).interval(Duration::from_millis(5)))
    .await
}

async fn nan_step(ctx: Context, _: ()) -> stead::Result<bool> {
    let v: f64 = ctx.step("nan", || async { Ok(f64::NAN) }).await?;
    Ok(v.is_nan())
}

async fn nan_output(_: Context, _: ()) -> stead::Result<f64> {
    Ok(f64::INFINITY)
}

both_backends! {
async fn a_panicking_display_is_recorded_and_the_retry_budget_holds(db) {
    let rt = common::builder(&db)
        .workflow("rude", rude_step)
        .launch()
        .await
        .unwrap();
    let id = format!("rude-{}", db.name);
    let h = rt.start("rude", (), WorkflowOptions::with_id(&id)).await.unwrap();
    let error = failure(&h).await;
    assert_eq!(error.name, "StepError");
    assert!(error.message.contains("Display panicked"), "{}", error.message);
    assert_eq!(common::body_run(&id, 1), 3, "the step ran past its budget of 3 attempts");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_value_json_cannot_hold_is_refused_when_first_recorded(db) {
    let rt = common::builder(&db)
        .workflow("nan-step", nan_step)
        .workflow("nan-output", nan_output)
        .launch()
        .await
        .unwrap();
    for (workflow, names) in [("nan-step", "step \"nan\""), ("nan-output", "workflow's output")] {
        let h = rt.start(workflow, (), WorkflowOptions::default()).await.unwrap();
        let error = failure(&h).await;
        assert_eq!(error.name, "EncodeError", "{workflow}");
        assert!(error.message.contains(names), "{workflow}: {}", error.message);
        assert!(error.message.contains("NaN or infinite"), "{}", error.message);
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

both_backends! {
async fn the_admin_api_answers_bad_ids_400_and_never_shows_database_text(db) {
    let rt = common::builder(&db)
        .workflow("double", double)
        .launch()
        .await
        .unwrap();
    let server = stead::admin::serve(rt.client(), Default::default()).await.unwrap();
    let base = server.url();
    let long = "x".repeat(2000);
    for path in [
        "/api/workflows/a%00b".to_owned(),
        "/api/workflows/a%00b/steps".to_owned(),
        format!("/api/workflows/{long}"),
        "/api/workflows?name=a%00b".to_owned(),
    ] {
        let got = common::http::get(&format!("{base}{path}"), None).await;
        assert_eq!(got.status, 400, "{path}: {}", got.body);
        assert!(got.error().contains("workflow"), "{path}: {}", got.body);
    }
    let got = common::http::post(&format!("{base}/api/workflows/a%00b/cancel"), None, None).await;
    assert_eq!(got.status, 400, "{}", got.body);

    // A database failure is a 500 that says so, without the database's words.
    let pool = db.checks().await;
    sqlx::query("ALTER TABLE dbos.workflow_status RENAME TO gone")
        .execute(&pool)
        .await
        .unwrap();
    let got = common::http::get(&format!("{base}/api/workflows"), None).await;
    assert_eq!(got.status, 500, "{}", got.body);
    let body = got.body.to_lowercase();
    assert!(!body.contains("workflow_status") && !body.contains("relation") && !body.contains("no such table"), "{}", got.body);
    server.shutdown().await;
}
}

/// A fork request declaring a body of `declared` bytes and sending one: the whole answer, read
/// until the server closes the connection (within 5 s).
async fn fork_with_body_of(addr: std::net::SocketAddr, declared: u64) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/workflows/x/fork HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("the connection was held open")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn an_admin_request_whose_body_never_arrives_is_timed_out_and_closed() {
    let db = common::TestDb::sqlite().await;
    let rt = common::builder(&db)
        .workflow("double", double)
        .launch()
        .await
        .unwrap();
    let options = stead::admin::AdminOptions::new().body_timeout(Duration::from_millis(300));
    let server = stead::admin::serve(rt.client(), options).await.unwrap();
    let answer = fork_with_body_of(server.local_addr(), 100).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn an_admin_request_declaring_an_oversized_body_is_refused_at_once() {
    let db = common::TestDb::sqlite().await;
    let rt = common::builder(&db)
        .workflow("double", double)
        .launch()
        .await
        .unwrap();
    // A long body timeout: the answer must not wait for it.
    let options = stead::admin::AdminOptions::new().body_timeout(Duration::from_secs(30));
    let server = stead::admin::serve(rt.client(), options).await.unwrap();
    let began = std::time::Instant::now();
    let answer = fork_with_body_of(server.local_addr(), 10_000_000).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("10000000 bytes"), "{answer}");
    // Behaviour: refused from the header, not after reading 10 MB or the 30 s body timeout; two
    // seconds hold a loaded machine's one request many times over.
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "answered after {:?}",
        began.elapsed()
    );
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

both_backends! {
async fn a_fork_from_step_0_is_refused_by_the_library_and_the_cli(db) {
    let rt = common::builder(&db).workflow("double", double).launch().await.unwrap();
    let h = rt.start("double", 1u64, WorkflowOptions::with_id("orig")).await.unwrap();
    h.result::<u64>().await.unwrap();
    let err = rt.client().fork("orig", 0, Default::default()).await.err().unwrap();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_stead"))
        .args(["--database-url", &db.url, "workflow", "fork", "orig", "--step", "0"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--step"), "{stderr}");
    let forks = rt
        .client()
        .list_workflows(stead::client::ListWorkflows::new().forked_from("orig"))
        .await
        .unwrap();
    assert!(forks.is_empty(), "a fork was made");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

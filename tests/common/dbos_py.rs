//! The real DBOS Transact (PyPI `dbos`), for tests that check stead against it.
//!
//! The tests never install it: `.ci/test-deps` puts `dbos==DBOS_VERSION` in a virtualenv at
//! `$STEAD_DBOS_VENV` (default `<repo>/.venv-dbos`). A test that needs it starts with
//! `require_dbos!()`, which skips the test with one line when it is missing (fails under `CI`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// The DBOS release whose schema stead reproduces.
pub const DBOS_VERSION: &str = "3.4.0";

/// Skips the calling test (returns from it) when DBOS's reference package is not installed;
/// under `CI` its absence fails the test instead.
#[macro_export]
macro_rules! require_dbos {
    () => {
        if let Err(why) = $crate::common::dbos_py::located() {
            $crate::common::skip(concat!(file!(), ":", line!()), &why);
            return;
        }
    };
}

/// Like `require_dbos!()`, and also skips when the venv lacks DBOS's `otel` extra (the
/// OpenTelemetry SDK), which `.ci/test-deps` installs.
#[macro_export]
macro_rules! require_dbos_otel {
    () => {
        $crate::require_dbos!();
        if let Err(why) = $crate::common::dbos_py::otel_located() {
            $crate::common::skip(concat!(file!(), ":", line!()), &why);
            return;
        }
    };
}

/// Whether the venv's Python has the OpenTelemetry SDK (`dbos[otel]`), or why not.
pub fn otel_located() -> Result<(), String> {
    let python = dbos_cli().with_file_name("python");
    let out = Command::new(&python)
        .args(["-c", "import opentelemetry.sdk.trace"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the OpenTelemetry SDK (dbos[otel]=={DBOS_VERSION}) is not installed beside {}; run \
             .ci/test-deps",
            python.display()
        ))
    }
}

/// The venv's `dbos` command, or why it cannot be used.
pub fn located() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(locate).clone()
}

fn locate() -> Result<PathBuf, String> {
    let venv = std::env::var_os("STEAD_DBOS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-dbos"));
    match installed_version(&venv) {
        Some(v) if v == DBOS_VERSION => Ok(venv.join("bin").join("dbos")),
        Some(v) => Err(format!(
            "{} holds dbos {v}, not {DBOS_VERSION}; run .ci/test-deps",
            venv.display()
        )),
        None => Err(format!(
            "DBOS's reference package (dbos=={DBOS_VERSION}) is not installed in {}; run \
             .ci/test-deps",
            venv.display()
        )),
    }
}

/// The `dbos` command of the venv; the test must have called `require_dbos!()` first.
pub fn dbos_cli() -> PathBuf {
    located().unwrap_or_else(|why| panic!("{why} (missing require_dbos!() in this test?)"))
}

/// [`dbos_cli`], kept async for the callers that await it.
pub async fn dbos_cli_async() -> PathBuf {
    dbos_cli()
}

/// Runs `dbos migrate` on `url`, for the default schema `dbos`.
pub fn dbos_migrate(url: &str) {
    dbos_migrate_schema(url, "dbos");
}

/// `url` as DBOS's URL parser (SQLAlchemy) wants it.
pub fn sqlalchemy_url(url: &str) -> String {
    if let Some(rest) = url.strip_prefix("postgres://") {
        return format!("postgresql://{rest}");
    }
    // sqlx's `sqlite://<path>` is SQLAlchemy's `sqlite:///<path>` (an absolute path then
    // starts with a fourth slash).
    match url.strip_prefix("sqlite://") {
        Some(path) => format!("sqlite:///{path}"),
        None => url.to_owned(),
    }
}

/// Runs `dbos migrate` on `url` for `schema`; panics with the command's output on failure.
pub fn dbos_migrate_schema(url: &str, schema: &str) {
    let url = sqlalchemy_url(url);
    let cli = dbos_cli();
    let out = Command::new(&cli)
        .args(["migrate", "-s", &url, "--schema", schema])
        // Away from any dbos-config.yaml that would add settings of its own.
        .current_dir(cli.parent().unwrap_or(Path::new("/")))
        .env_remove("DBOS_SYSTEM_DATABASE_URL")
        .output()
        .expect("run dbos migrate");
    assert!(
        out.status.success(),
        "dbos migrate -s {url} --schema {schema} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How long one Python process may run before the test fails (and the process is killed).
const PY_TIMEOUT: Duration = super::wait::SETUP;

/// Runs `tests/py/client.py` (the DBOS Python client) on `url` as application `app`:
/// `command` with the JSON argument `arg`. Returns its answer, `{"ok": ...}` or `{"error": ...}`.
pub async fn py_client(url: &str, app: &str, command: &str, arg: Value) -> Value {
    let python = dbos_cli_async().await.with_file_name("python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/client.py");
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(script)
        .args([&sqlalchemy_url(url), app, command, &arg.to_string()]);
    json_output(cmd, &format!("client.py {command} {arg}")).await
}

/// Runs the Python script `tests/py/<script>` with the system database `url` (as SQLAlchemy
/// wants it) and `arg` as JSON; returns the last line of its output, parsed.
pub async fn py_script(script: &str, url: &str, arg: Value) -> Value {
    let python = dbos_cli_async().await.with_file_name("python");
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(path).args([&sqlalchemy_url(url), &arg.to_string()]);
    json_output(cmd, &format!("{script} {arg}")).await
}

/// The `ok` of a `client.py` answer, failing the test on its `error`.
pub fn ok_answer(answer: Value) -> Value {
    match answer {
        Value::Object(mut m) if m.contains_key("ok") => m.remove("ok").unwrap_or_default(),
        other => panic!("the Python client failed: {other}"),
    }
}

/// A running DBOS application (`tests/py/peer_app.py`); it stops when this value is dropped.
pub struct PyApp {
    child: tokio::process::Child,
}

impl PyApp {
    /// Launches `tests/py/peer_app.py` on `url` as application `app`, serving `queue`, and waits
    /// until it has launched.
    pub async fn launch(url: &str, app: &str, queue: &str) -> PyApp {
        PyApp::launch_script("peer_app.py", url, app, queue).await
    }

    /// Launches `tests/py/<script>` (an app taking the same arguments and printing "ready" as
    /// `peer_app.py` does) and waits until it has launched.
    pub async fn launch_script(script: &str, url: &str, app: &str, queue: &str) -> PyApp {
        use tokio::io::AsyncBufReadExt;
        let python = dbos_cli_async().await.with_file_name("python");
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/py")
            .join(script);
        let mut child = tokio::process::Command::new(python)
            .arg(&script)
            .args([&sqlalchemy_url(url), app, queue])
            .current_dir(dbos_cli().parent().unwrap_or(Path::new("/")))
            .env_remove("DBOS_SYSTEM_DATABASE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        let stdout = child.stdout.take().expect("piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let ready = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim() == "ready" {
                    return true;
                }
            }
            false
        };
        let launched = tokio::time::timeout(PY_TIMEOUT, ready).await;
        assert!(
            matches!(launched, Ok(true)),
            "{} did not launch",
            script.display()
        );
        // Keep reading, so its later output never meets a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        PyApp { child }
    }

    /// Stops the app and waits for it to exit.
    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Runs `dbos workflow <args> -s <url>` and parses its JSON output.
pub async fn dbos_workflow_cli(url: &str, args: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::new(dbos_cli_async().await);
    cmd.arg("workflow")
        .args(args)
        .args(["-s", &sqlalchemy_url(url)]);
    json_output(cmd, &format!("dbos workflow {args:?}")).await
}

/// The entry of workflow `id` in the CLI's JSON list (`dbos workflow list`).
pub fn listed_entry<'a>(list: &'a Value, id: &str) -> &'a Value {
    list.as_array()
        .and_then(|l| l.iter().find(|w| w["workflow_id"] == id))
        .unwrap_or_else(|| panic!("{id} not in {list}"))
}

/// Runs `cmd` away from any DBOS configuration, killed if it outlives `PY_TIMEOUT`, and parses
/// the last line of its stdout as JSON (DBOS may log before it).
async fn json_output(mut cmd: tokio::process::Command, what: &str) -> Value {
    let cli = dbos_cli_async().await;
    cmd.current_dir(cli.parent().unwrap_or(Path::new("/")))
        .env_remove("DBOS_SYSTEM_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let out = tokio::time::timeout(PY_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {PY_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{what}: output is not JSON ({e}):\n{stdout}\n{stderr}"))
}

/// The `dbos` version installed in `venv`, if any.
fn installed_version(venv: &Path) -> Option<String> {
    let out = Command::new(venv.join("bin").join("python"))
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('dbos'))",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

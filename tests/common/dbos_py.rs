//! The real DBOS Transact (PyPI `dbos`), for tests that check stead against it.
//!
//! The package is installed once into `<target dir>/dbos-venv` and reused while its version
//! matches. Test binaries run in parallel, so the install is serialised with a file lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// The DBOS release whose schema stead reproduces.
pub const DBOS_VERSION: &str = "3.4.0";

/// The `dbos` command of a venv holding `dbos==DBOS_VERSION`, installing it on first use.
///
/// The first install downloads from PyPI and takes a minute or so; later calls only check
/// the installed version.
pub fn dbos_cli() -> PathBuf {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(install).clone()
}

/// [`dbos_cli`] off the async threads: the first call may install for a minute.
pub async fn dbos_cli_async() -> PathBuf {
    tokio::task::spawn_blocking(dbos_cli)
        .await
        .expect("install the DBOS venv")
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
const PY_TIMEOUT: Duration = Duration::from_secs(25);

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

/// Runs `dbos workflow <args> -s <url>` and parses its JSON output.
pub async fn dbos_workflow_cli(url: &str, args: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::new(dbos_cli_async().await);
    cmd.arg("workflow")
        .args(args)
        .args(["-s", &sqlalchemy_url(url)]);
    json_output(cmd, &format!("dbos workflow {args:?}")).await
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

fn install() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::fs::create_dir_all(&target).expect("create the target directory");
    let venv = target.join("dbos-venv");
    let cli = venv.join("bin").join("dbos");

    let lock = File::create(target.join("dbos-venv.lock")).expect("create the venv lock file");
    lock.lock().expect("lock the venv lock file");
    if installed_version(&venv).as_deref() != Some(DBOS_VERSION) {
        if venv.exists() {
            std::fs::remove_dir_all(&venv).expect("remove the stale venv");
        }
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv));
        run(Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("dbos=={DBOS_VERSION}")));
        assert_eq!(
            installed_version(&venv).as_deref(),
            Some(DBOS_VERSION),
            "pip installed another dbos version"
        );
    }
    assert!(
        cli.exists(),
        "{} is missing after the install",
        cli.display()
    );
    drop(lock); // unlocks
    cli
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

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

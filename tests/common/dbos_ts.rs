//! The real DBOS Transact for TypeScript (npm `@dbos-inc/dbos-sdk`), for tests that check stead
//! against its default client and app.
//!
//! The tests never install it: `.ci/test-deps` puts `@dbos-inc/dbos-sdk@DBOS_TS_VERSION` in a
//! directory of its own at `$STEAD_DBOS_TS` (default `<repo>/.dbos-ts`), run with the `node` on
//! the `PATH`. A test that needs it starts with `require_dbos_ts!()`, which skips the test with
//! one line when either is missing (fails under `CI`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// The DBOS TypeScript release whose default formats stead reads.
pub const DBOS_TS_VERSION: &str = "5.3.0";

/// Skips the calling test (returns from it) when Node.js or DBOS's npm package is missing;
/// under `CI` their absence fails the test instead.
#[macro_export]
macro_rules! require_dbos_ts {
    () => {
        if let Err(why) = $crate::common::dbos_ts::located() {
            $crate::common::skip(concat!(file!(), ":", line!()), &why);
            return;
        }
    };
}

/// The `node_modules` holding the package, or why it cannot be used.
pub fn located() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(locate).clone()
}

fn locate() -> Result<PathBuf, String> {
    let dir = std::env::var_os("STEAD_DBOS_TS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".dbos-ts"));
    let modules = dir.join("node_modules");
    let manifest = modules.join("@dbos-inc/dbos-sdk/package.json");
    let node = Command::new("node")
        .args(["-p", "process.versions.node.split('.')[0]"])
        .output()
        .map_err(|e| format!("Node.js (node) cannot be run ({e}); run .ci/test-deps"))?;
    let major: u32 = String::from_utf8_lossy(&node.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    if major < 20 {
        return Err(format!(
            "@dbos-inc/dbos-sdk needs Node.js 20 or later, and node is version {major}"
        ));
    }
    let probe = format!("console.log(require({:?}).version)", manifest.display());
    let out = Command::new("node")
        .args(["-e", &probe])
        .output()
        .map_err(|e| format!("Node.js (node) cannot be run ({e}); run .ci/test-deps"))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match (out.status.success(), version.as_str()) {
        (true, DBOS_TS_VERSION) => Ok(modules),
        (true, other) => Err(format!(
            "{} holds @dbos-inc/dbos-sdk {other}, not {DBOS_TS_VERSION}; run .ci/test-deps",
            dir.display()
        )),
        (false, _) => Err(format!(
            "DBOS's TypeScript package (@dbos-inc/dbos-sdk@{DBOS_TS_VERSION}) is not installed in \
             {}; run .ci/test-deps",
            dir.display()
        )),
    }
}

/// The package's `node_modules`; the test must have called `require_dbos_ts!()` first.
fn modules() -> PathBuf {
    located().unwrap_or_else(|why| panic!("{why} (missing require_dbos_ts!() in this test?)"))
}

/// A `node` running `tests/ts/<script>` with the package on its module path, away from the
/// repository (no configuration file of DBOS's is found there).
fn node(script: &str) -> tokio::process::Command {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ts")
        .join(script);
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(path)
        .env("NODE_PATH", modules())
        .env_remove("DBOS_SYSTEM_DATABASE_URL")
        .current_dir(std::env::temp_dir())
        .kill_on_drop(true);
    cmd
}

/// How long one Node.js process may run before the test fails (and the process is killed).
const TS_TIMEOUT: Duration = super::wait::SETUP;

/// Runs `tests/ts/client.js` (the default DBOS TypeScript client) on `url` as application `app`:
/// `command` with the JSON argument `arg`. Returns its answer, `{"ok": ...}` or `{"error": ...}`.
pub async fn ts_client(url: &str, app: &str, command: &str, arg: Value) -> Value {
    let mut cmd = node("client.js");
    cmd.args([url, app, command, &arg.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("client.js {command} {arg}");
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let out = tokio::time::timeout(TS_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} still running after {TS_TIMEOUT:?}"))
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

/// A running default DBOS TypeScript application (`tests/ts/app.js`); it stops when this value
/// is dropped.
pub struct TsApp {
    child: tokio::process::Child,
}

impl TsApp {
    /// Launches `tests/ts/app.js` on `url` as application `app`, serving `queue`, and waits
    /// until it has launched (DBOS migrates the database first if it needs to).
    pub async fn launch(url: &str, app: &str, queue: &str) -> TsApp {
        use tokio::io::AsyncBufReadExt;
        let mut child = node("app.js")
            .args([url, app, queue])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run app.js");
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
        let launched = tokio::time::timeout(TS_TIMEOUT, ready).await;
        assert!(matches!(launched, Ok(true)), "app.js did not launch");
        // Keep reading, so its later output never meets a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        TsApp { child }
    }

    /// Stops the app (it shuts DBOS down when its stdin closes) and waits for it to exit.
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

/// The `ok` of a `client.js` answer, failing the test on its `error`.
pub fn ok_answer(answer: Value) -> Value {
    match answer {
        Value::Object(mut m) if m.contains_key("ok") => m.remove("ok").unwrap_or_default(),
        other => panic!("the TypeScript client failed: {other}"),
    }
}

//! The real DBOS Transact (PyPI `dbos`), for tests that check stead against it.
//!
//! The package is installed once into `<target dir>/dbos-venv` and reused while its version
//! matches. Test binaries run in parallel, so the install is serialised with a file lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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

/// Runs `dbos migrate` on `url`, for the default schema `dbos`.
pub fn dbos_migrate(url: &str) {
    dbos_migrate_schema(url, "dbos");
}

/// Runs `dbos migrate` on `url` for `schema`; panics with the command's output on failure.
pub fn dbos_migrate_schema(url: &str, schema: &str) {
    // DBOS's URL parser (SQLAlchemy) wants the postgresql:// scheme.
    let url = match url.strip_prefix("postgres://") {
        Some(rest) => format!("postgresql://{rest}"),
        None => url.to_owned(),
    };
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

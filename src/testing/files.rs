//! Replay from history files (feature `testing`): exported histories replayed against the
//! current code with no database at all, so a build keeps a folder of real runs and fails on an
//! incompatible change. The checks are the replay core's (`testing::replay`), the same as
//! [`verify`](crate::testing::verify)'s against a live database.
//!
//! It must never open a database: the replay runs on an offline state whose store handle is
//! closed, so the replay-only context's refusals are the only thing a write could meet.

use std::path::{Path, PathBuf};

use crate::engine::shared::Shared;
use crate::runtime::builder::RuntimeBuilder;
use crate::testing::error::KitError;
use crate::testing::history::History;
use crate::testing::replay::{replay, Verdict};

/// Replays `history` against the workflows registered in `builder` (its database settings are
/// not used): no step body runs, nothing is opened or written.
pub async fn replay_history(
    builder: RuntimeBuilder,
    history: &History,
) -> Result<Verdict, KitError> {
    let (config, registry) = builder.into_offline()?;
    let shared = Shared::offline(config, registry);
    Ok(replay(&shared.registry, &shared, history.recorded()).await)
}

/// Replays one history file (see [`replay_history`]).
pub async fn replay_file(
    builder: RuntimeBuilder,
    path: impl AsRef<Path>,
) -> Result<Verdict, KitError> {
    replay_history(builder, &History::read(path)?).await
}

/// Replays every `*.json` file directly in `dir`, in name order, against the workflows
/// registered in `builder`: one verdict per file.
pub async fn replay_dir(
    builder: RuntimeBuilder,
    dir: impl AsRef<Path>,
) -> Result<Vec<(PathBuf, Verdict)>, KitError> {
    let (config, registry) = builder.into_offline()?;
    let shared = Shared::offline(config, registry);
    let mut found = Vec::new();
    for path in history_files(dir.as_ref())? {
        let history = History::read(&path)?;
        found.push((
            path,
            replay(&shared.registry, &shared, history.recorded()).await,
        ));
    }
    Ok(found)
}

/// Replays a folder of histories (see [`replay_dir`]) and fails on the first file, in name
/// order, that the current code does not replay: [`KitError::Incompatible`] names the file, the
/// workflow and its first problem with its call number. Returns how many files replayed.
///
/// ```no_run
/// # async fn pay(ctx: stead::Context, order: u32) -> stead::Result<()> { Ok(()) }
/// #[tokio::test]
/// async fn recorded_payments_still_replay() {
///     let build = stead::Runtime::builder().workflow("pay", pay);
///     stead::testing::check_dir(build, "tests/histories").await.unwrap();
/// }
/// ```
pub async fn check_dir(builder: RuntimeBuilder, dir: impl AsRef<Path>) -> Result<usize, KitError> {
    let verdicts = replay_dir(builder, dir).await?;
    for (file, v) in &verdicts {
        if let Some(problem) = v.first_problem() {
            return Err(KitError::Incompatible {
                file: file.clone(),
                workflow_id: v.workflow_id.clone(),
                workflow_name: v.workflow_name.clone(),
                problem,
            });
        }
    }
    Ok(verdicts.len())
}

/// Replays each path (a history file, or a folder of them) and writes one line per history to
/// `out`: `ok` or `DIVERGED` with the file and its first problem. True when every history
/// replays. [`replay_main`] is this as a command.
pub async fn replay_report(
    builder: RuntimeBuilder,
    paths: &[PathBuf],
    out: &mut impl std::io::Write,
) -> Result<bool, KitError> {
    let (config, registry) = builder.into_offline()?;
    let shared = Shared::offline(config, registry);
    let mut files = Vec::new();
    for path in paths {
        match path.is_dir() {
            true => files.extend(history_files(path)?),
            false => files.push(path.clone()),
        }
    }
    let mut clean = true;
    for file in files {
        let history = History::read(&file)?;
        let v = replay(&shared.registry, &shared, history.recorded()).await;
        let line = match v.first_problem() {
            None => format!("ok        {} ({} calls)", file.display(), v.matched_calls),
            Some(problem) => {
                clean = false;
                format!(
                    "DIVERGED  {} ({}): {problem}",
                    file.display(),
                    v.workflow_id
                )
            }
        };
        writeln!(out, "{line}").map_err(|source| KitError::Io {
            path: file.clone(),
            source,
        })?;
    }
    Ok(clean)
}

/// A replay command for the user's own binary (the `stead` CLI holds no workflow code): replays
/// the history files and folders named on the command line against `builder`'s workflows, prints
/// a line per history, and exits non-zero on a divergence or an unreadable file.
///
/// ```no_run
/// // src/bin/replay.rs: `cargo run --bin replay --features stead/testing -- tests/histories`
/// # async fn pay(ctx: stead::Context, order: u32) -> stead::Result<()> { Ok(()) }
/// #[tokio::main]
/// async fn main() -> std::process::ExitCode {
///     stead::testing::replay_main(stead::Runtime::builder().workflow("pay", pay)).await
/// }
/// ```
pub async fn replay_main(builder: RuntimeBuilder) -> std::process::ExitCode {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        eprintln!("usage: replay <history file or folder>...");
        return std::process::ExitCode::from(2);
    }
    match replay_report(builder, &paths, &mut std::io::stdout()).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("replay: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The `*.json` files directly in `dir`, in name order.
fn history_files(dir: &Path) -> Result<Vec<PathBuf>, KitError> {
    let io = |source| KitError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

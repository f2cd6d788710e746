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

//! Replay verification against a live system database: checks new workflow code against the
//! recorded histories of chosen workflows before a deploy. It reads each history through a
//! [`Client`] and hands it to the replay core (`testing::replay`, where the checks are), the same
//! core that replays exported files.
//!
//! It must never write to the system database: it reads through a [`Client`] (which never
//! migrates nor runs workflows), and a replay-only context refuses every write. It is a library
//! function and not a `stead verify` command, since the CLI binary holds no workflow code.

use std::time::Duration;

use crate::client::manage::ListWorkflows;
use crate::client::Client;
use crate::engine::registry::Registry;
use crate::error::Result;
use crate::runtime::builder::RuntimeBuilder;
use crate::testing::replay::{replay, Recorded, Verdict};

/// Replays the recorded calls of the workflows `which` selects (by id, name, or the newest N:
/// `ListWorkflows::new().newest_first().limit(n)`) against the workflows registered in
/// `builder`, without launching it: no step body runs and nothing is written. The builder's
/// database URL, schema and application name say where the histories are.
///
/// ```no_run
/// # async fn checkout(ctx: stead::Context, order: u32) -> stead::Result<()> { Ok(()) }
/// # async fn demo() -> stead::Result<()> {
/// use stead::{client::ListWorkflows, Runtime};
/// let build = Runtime::builder()
///     .database_url("postgres://localhost/app")
///     .workflow("checkout", checkout);
/// let verdicts = stead::testing::verify(build, ListWorkflows::new().name("checkout").newest_first().limit(100)).await?;
/// for v in verdicts.iter().filter(|v| !v.is_compatible()) {
///     eprintln!("{}: {:?} {:?}", v.workflow_id, v.divergences, v.skipped);
/// }
/// # Ok(()) }
/// ```
pub async fn verify(builder: RuntimeBuilder, which: ListWorkflows) -> Result<Vec<Verdict>> {
    let (url, options, registry) = builder.into_check()?;
    let client = Client::connect_with(&url, options).await?;
    let outcome = verify_with(&client, &registry, which).await;
    client.shutdown(Duration::from_secs(5)).await?;
    outcome
}

async fn verify_with(
    client: &Client,
    registry: &Registry,
    which: ListWorkflows,
) -> Result<Vec<Verdict>> {
    let runs = client.recorded_runs(which).await?;
    let mut verdicts = Vec::with_capacity(runs.len());
    for (info, steps) in runs {
        let recorded = Recorded {
            id: info.status.id,
            name: info.status.name,
            status: info.status.status,
            serialization: info.serialization,
            input: info.input,
            steps,
        };
        verdicts.push(replay(registry, client.shared(), recorded).await);
    }
    Ok(verdicts)
}

//! The testing kit's one error type (feature `testing`): what reading, writing or replaying
//! history files and running a crash matrix can fail with. Each variant says what to fix.
//!
//! It wraps stead's [`Error`](crate::Error) for failures of the runtime underneath, and never
//! stands for a divergence found in replay: that is a finding (`Verdict`), except where a helper
//! is asked to fail on one (`check_dir`).

use std::path::PathBuf;

/// What the testing kit failed with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KitError {
    /// A file or folder could not be read or written.
    #[error("cannot use {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not a stead history (not JSON, another `format`, a missing field).
    #[error("{source_name} is not a stead history: {reason}")]
    Format { source_name: String, reason: String },
    /// The history was written by a newer stead; upgrade stead to read it.
    #[error(
        "{source_name} is a stead history of version {found}; this build reads versions up to \
         {supported} (upgrade stead)"
    )]
    Version {
        source_name: String,
        found: u64,
        supported: u32,
    },
    /// A history no longer replays on the current code (`check_dir`): change the code back, or
    /// guard the change with `ctx.patch(..)`.
    #[error("{file}: workflow {workflow_id} ({workflow_name}) no longer replays: {problem}")]
    Incompatible {
        file: PathBuf,
        workflow_id: String,
        workflow_name: String,
        problem: String,
    },
    /// The crash matrix could not run its scenarios (the workflow never finished, a boundary
    /// was never reached): fix the workflow or the matrix's settings.
    #[error("crash matrix: {0}")]
    Matrix(String),
    /// A virtual clock could not be installed (no tokio runtime, or one already there).
    #[error("virtual clock: {0}")]
    Clock(String),
    /// The runtime, client or replay underneath failed.
    #[error(transparent)]
    Stead(#[from] crate::error::Error),
}

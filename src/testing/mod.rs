//! Checks for a deploy and a test kit: [`verify`] replays recorded histories from a system
//! database against the code registered in a builder, without running a step or writing
//! anything. With the feature `testing`: histories exported to files (`History`) and replayed
//! with no database (`replay_file`, `replay_dir`, `check_dir`), the crash matrix
//! (`CrashMatrix`), and virtual time (`VirtualClock`, `TestRuntime`). The replay core both
//! sources share is `replay`.

#[cfg(feature = "testing")]
mod crash;
#[cfg(feature = "testing")]
mod error;
#[cfg(feature = "testing")]
mod files;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod history;
mod replay;
#[cfg(feature = "testing")]
mod time;
mod verify;

pub use replay::{Divergence, Verdict};
pub use verify::verify;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use crash::{Boundary, CrashMatrix, Effects, Problem, Report};
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use error::KitError;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use files::{check_dir, replay_dir, replay_file, replay_history, replay_main, replay_report};
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use history::History;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use time::{TestRuntime, VirtualClock};

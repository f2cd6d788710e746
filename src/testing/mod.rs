//! Checks for a deploy: [`verify`] replays recorded histories against the code registered in a
//! builder, without running a step or writing anything.

mod verify;

pub use verify::{verify, Divergence, Verdict};

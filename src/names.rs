//! Names, ids, keys and topics stead writes: the one place their rules live (non-empty where
//! required, no NUL byte, at most [`MAX_NAME_BYTES`]). Every ring checks through here; it never
//! rewrites a value, only refuses one.
//!
//! **Hostile input** (issue 15; the hostile-input tests, `tests/integration/hostile.rs`). Cheap
//! cases are checked before the write with the client's error, `InvalidArgument`: at
//! `MAX_NAME_BYTES` (1,024) any two values fit a Postgres index row (~2,700 bytes) and a NOTIFY
//! payload; a step name is checked before its body runs. What the database still refuses is sorted
//! by `sysdb/classify.rs`. Values: NaN and ±∞ are refused when first recorded (`Error::Encode`
//! naming the step; `base/nonfinite.rs`), a panicking `Serialize` is an encode error, a panicking
//! `Display` of a step error becomes its recorded text. URLs: `sysdb/urls.rs`. A status no DBOS
//! version defines is `Status::Unknown` with `WorkflowStatus::stored_status`. What each face
//! answers, per bad input (runtime and `Context`; client; CLI; admin API):
//!
//! - NUL byte in a name, id, key or topic, or over 1,024 bytes: the call fails `InvalidArgument`
//!   and the run goes on; `InvalidArgument`; exit 2, one line; 400 naming it.
//! - A value the database still refuses: the call fails `Database(Refused)`, no restart, an outcome
//!   becomes `ERROR`; `Database(Refused)`; exit 1; 500 without the database's text.
//! - An unknown status in a row: listed as `Status::Unknown` with the stored text; the same; `BOGUS
//!   (unknown)`, JSON `stored_status`; `stored_status`, which the dashboard shows.
//! - NaN/∞, a panicking `Serialize`: `Encode` naming the step or output; `Encode` (inputs,
//!   messages).
//! - A panicking `Display` of a step error: recorded as text, retry budget kept.
//! - A password in a URL (userinfo, `?password=`, key=value, `postgres:u:p@`): `InvalidUrl` (scheme
//!   only) or `Connect` (redacted); the same; the same line, exit 2 or 4.
//! - An unknown scheme (`mysql://`, `http://`, `postgress://`): `InvalidUrl` naming the accepted
//!   ones; the same; exit 2.
//! - An admin path `a%00b`, a bad filter: client `InvalidArgument`; admin 400.
//! - A body shorter than its `Content-Length`: admin 408 after `body_timeout`, connection closed.
//! - `fork --step 0`: client `InvalidArgument`; CLI exit 2 (clap); admin 400.
//! - `delete_queue` with waiting work: client `QueueNotEmpty` (or cancel by option).

use crate::error::{Error, Result};

/// The longest name, id, key or topic stead writes, in bytes. Each is a text column, often
/// part of an index (a Postgres index row holds at most ~2,700 bytes) or of a NOTIFY payload
/// (at most 8,000 bytes, two such values joined): at this length any two fit both.
pub const MAX_NAME_BYTES: usize = 1024;

/// Names and ids become text columns: they must be non-empty, free of NUL bytes and at most
/// [`MAX_NAME_BYTES`] long.
pub(crate) fn validate_name(value: &str, what: &str) -> Result<()> {
    if value.is_empty() {
        Err(Error::InvalidArgument(format!("{what} must not be empty")))
    } else {
        validate_text(value, what)
    }
}

/// Keys, topics and step names may be empty, but are otherwise held to [`validate_name`]'s
/// rules; the error shows at most the start of an over-long value.
pub(crate) fn validate_text(value: &str, what: &str) -> Result<()> {
    if value.len() > MAX_NAME_BYTES {
        let start: String = value.chars().take(40).collect();
        Err(Error::InvalidArgument(format!(
            "{what} {start:?}... is {} bytes long; the limit is {MAX_NAME_BYTES}",
            value.len()
        )))
    } else if value.contains('\0') {
        Err(Error::InvalidArgument(format!(
            "{what} {value:?} contains a NUL byte"
        )))
    } else {
        Ok(())
    }
}

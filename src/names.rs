//! Names, ids, keys and topics stead writes: the one place their rules live (non-empty where
//! required, no NUL byte, at most [`MAX_NAME_BYTES`]). Every ring checks through here; it never
//! rewrites a value, only refuses one.

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

//! An evicted run in its compact form: what the eviction registry keeps of a stopped actor's
//! dispatch (interned names, boxed strings, the owner token as 16 bytes) and the queue slot it
//! keeps, and the dispatch that replays it. It must never lose a field the replay needs.

use std::sync::Arc;

use crate::engine::admission::Permit;
use crate::engine::dispatch::Dispatch;

/// An evicted run: its dispatch, compacted, and the queue slot it keeps.
pub(crate) struct Parked {
    pub(super) id: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) queue: Arc<str>,
    pub(super) owner: Token,
    pub(super) attempts: i64,
    pub(super) inputs: Option<Box<str>>,
    pub(super) serialization: Option<Arc<str>>,
    pub(super) restarts: u32,
    pub(super) deadline: Option<i64>,
    pub(super) trace_context: Option<Box<str>>,
    pub(super) slot: Permit,
}

impl Parked {
    /// The queue whose actor runs it again.
    pub(crate) fn queue(&self) -> &str {
        &self.queue
    }

    /// The dispatch that replays it, and its slot.
    pub(crate) fn into_dispatch(self) -> (Dispatch, Permit) {
        let d = Dispatch {
            id: self.id.to_string(),
            name: self.name.to_string(),
            owner: self.owner.to_string(),
            attempts: self.attempts,
            inputs: self.inputs.map(Into::into),
            serialization: self.serialization.map(|s| s.to_string()),
            fresh: false,
            restarts: self.restarts,
            deadline: self.deadline,
            trace_context: self.trace_context.map(Into::into),
        };
        (d, self.slot)
    }
}

/// An owner token, held as 16 bytes when it is a UUID in its usual text form (as every writer
/// makes them), so that form is all that is kept.
pub(super) enum Token {
    Uuid(u128),
    Text(Box<str>),
}

impl From<String> for Token {
    fn from(text: String) -> Token {
        match uuid::Uuid::try_parse(&text) {
            Ok(u) if u.hyphenated().to_string() == text => Token::Uuid(u.as_u128()),
            _ => Token::Text(text.into()),
        }
    }
}

impl Token {
    pub(super) fn is(&self, text: &str) -> bool {
        match self {
            Token::Uuid(u) => uuid::Uuid::try_parse(text)
                .is_ok_and(|t| t.as_u128() == *u && t.hyphenated().to_string() == text),
            Token::Text(t) => t.as_ref() == text,
        }
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Uuid(u) => uuid::Uuid::from_u128(*u).hyphenated().fmt(f),
            Token::Text(t) => f.write_str(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_token_reads_back_as_written() {
        for text in [
            "0191c7e2-5b7a-7cc1-9a53-1f0c2f9e3a11",
            "0191C7E2-5B7A-7CC1-9A53-1F0C2F9E3A11",
            "0191c7e25b7a7cc19a531f0c2f9e3a11",
            "not-a-uuid",
            "",
        ] {
            let token = Token::from(text.to_owned());
            assert_eq!(token.to_string(), text);
            assert!(token.is(text));
            assert!(!token.is("0191c7e2-5b7a-7cc1-9a53-1f0c2f9e3a12"));
        }
        let token = Token::from("0191c7e2-5b7a-7cc1-9a53-1f0c2f9e3a11".to_owned());
        assert!(!token.is("0191C7E2-5B7A-7CC1-9A53-1F0C2F9E3A11"));
    }
}

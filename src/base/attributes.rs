//! Workflow attributes: the custom JSON object DBOS 3.4 keeps per workflow (the `attributes`
//! column), set when a workflow is started or enqueued ([`crate::WorkflowOptions::attributes`]),
//! listed and filtered ([`crate::client::ListWorkflows::attributes`]), and changed afterwards by
//! [`crate::Client::update_workflow_attributes`] and
//! [`crate::Client::merge_workflow_attributes`] (in `client/attributes.rs`), with DBOS's
//! `update_workflow_attributes` semantics.
//!
//! It builds no SQL and never reads a key's meaning, except the trace carrier the `otel` feature
//! keeps under [`OTEL_CONTEXT_KEY`] (recorded by `start`, through `crate::base::otel`).
//!
//! **As DBOS 3.4** (`_sys_db.py`, `update_workflow_attributes` and `_attributes_contains_clause`):
//! `workflow_status.attributes` is `jsonb` on Postgres, text on SQLite, written by the
//! start/enqueue statement, copied by a fork, not inherited by children. Replace writes the object
//! or NULL; merge sets top-level keys over the stored object (a stored non-object counts as `{}`; a
//! nested object is replaced whole; `null` is stored), one statement on Postgres (`||`),
//! read-merge-write inside the `BEGIN IMMEDIATE` transaction on SQLite. Both touch `updated_at`.
//! Unlike DBOS (which says nothing), an update of a missing workflow is `Error::NotFound`. The list
//! filter is containment (`@>`, the GIN index) on Postgres; DBOS refuses the filter on SQLite,
//! where stead matches each top-level key whose stored value equals the given one as SQLite JSON
//! text (`->`): the same answer for scalars, exact equality instead of containment for an object or
//! array value. The CLI and admin API take filters as `KEY=VALUE` (`parse_attribute`), the value
//! read as JSON when it parses, else as a string.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A workflow's attributes: a JSON object.
pub type Attributes = Map<String, Value>;

/// The key under which DBOS (and stead, with the `otel` feature) keeps the W3C trace context of
/// the workflow's starter: `{"traceparent": "00-…", "tracestate": "…"}`.
pub const OTEL_CONTEXT_KEY: &str = "dbos.otelContext";

/// The stored text of `attributes`; refuses what Postgres's `jsonb` cannot hold (a NUL
/// character), naming it, rather than failing in the database.
pub(crate) fn encode(attributes: &Attributes) -> Result<String> {
    let text = Value::Object(attributes.clone()).to_string();
    check_encoded(&text)?;
    Ok(text)
}

/// Refuses encoded attributes (or an attribute filter) holding a NUL character.
pub(crate) fn check_encoded(text: &str) -> Result<()> {
    if text.contains("\\u0000") {
        return Err(Error::InvalidArgument(
            "workflow attributes must not contain a NUL character".into(),
        ));
    }
    Ok(())
}

/// The JSON of the trace context in stored attributes `text`, if they hold one.
pub(crate) fn trace_context(text: Option<&str>) -> Option<String> {
    let attributes: Attributes = serde_json::from_str(text?).ok()?;
    attributes.get(OTEL_CONTEXT_KEY).map(Value::to_string)
}

/// Parses one attribute as the CLI and the admin API take it, `KEY=VALUE`: the value is JSON
/// when it parses as JSON (`n=3`, `vip=true`, `tag="3"`), a string otherwise (`c=acme`).
pub fn parse_attribute(text: &str) -> Result<(String, Value)> {
    let (key, value) = text
        .split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| Error::InvalidArgument(format!("attribute {text:?} is not KEY=VALUE")))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
    Ok((key.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_parse_as_json_values_or_strings() {
        use serde_json::json;
        let ok = |t: &str| parse_attribute(t).unwrap();
        assert_eq!(ok("n=3"), ("n".into(), json!(3)));
        assert_eq!(ok("c=acme"), ("c".into(), json!("acme")));
        assert_eq!(ok(r#"t="3""#), ("t".into(), json!("3")));
        assert_eq!(ok("e=a=b"), ("e".into(), json!("a=b")));
        assert!(parse_attribute("=1").is_err() && parse_attribute("k").is_err());
    }

    #[test]
    fn a_nul_character_is_refused_by_name() {
        let mut a = Attributes::new();
        a.insert("k".into(), Value::from("a\0b"));
        let err = encode(&a).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(m) if m.contains("NUL")));
        a.insert("k".into(), Value::from("ab"));
        assert_eq!(encode(&a).unwrap(), r#"{"k":"ab"}"#);
    }
}

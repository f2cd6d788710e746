//! Workflow attributes: the custom JSON object DBOS 3.4 keeps per workflow (the `attributes`
//! column), set when a workflow is started or enqueued ([`crate::WorkflowOptions::attributes`]),
//! listed and filtered ([`crate::ListWorkflows::attributes`]), and changed afterwards by
//! [`Client::update_workflow_attributes`] and [`Client::merge_workflow_attributes`], with DBOS's
//! `update_workflow_attributes` semantics.
//!
//! It builds no SQL (the store's `Manage::update_attributes` does) and never reads a key's
//! meaning, except the trace carrier the `otel` feature keeps under [`OTEL_CONTEXT_KEY`].

use serde_json::{Map, Value};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::sysdb::AttributesUpdate;

/// A workflow's attributes: a JSON object.
pub type Attributes = Map<String, Value>;

/// The key under which DBOS (and stead, with the `otel` feature) keeps the W3C trace context of
/// the workflow's starter: `{"traceparent": "00-…", "tracestate": "…"}`.
pub const OTEL_CONTEXT_KEY: &str = "dbos.otelContext";

/// The stored text of `attributes`; refuses what Postgres's `jsonb` cannot hold (a NUL
/// character), naming it, rather than failing in the database.
pub(crate) fn encode(attributes: &Attributes) -> Result<String> {
    let text = Value::Object(attributes.clone()).to_string();
    if text.contains("\\u0000") {
        return Err(Error::InvalidArgument(
            "workflow attributes must not contain a NUL character".into(),
        ));
    }
    Ok(text)
}

/// The stored attributes of a workflow being created: the given ones, plus (feature `otel`) the
/// current span's trace context under [`OTEL_CONTEXT_KEY`] unless they carry one already.
pub(crate) fn for_new_workflow(given: Option<&Attributes>) -> Result<Option<String>> {
    #[cfg(feature = "otel")]
    if let Some(with_trace) = crate::otel::with_current_trace(given) {
        return encode(&with_trace).map(Some);
    }
    given.map(encode).transpose()
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

impl Client {
    /// Replaces the attributes of workflow `id` with `attributes`, or clears them (`None`).
    /// Fails with [`Error::NotFound`] when there is no such workflow.
    pub async fn update_workflow_attributes(
        &self,
        id: &str,
        attributes: Option<Attributes>,
    ) -> Result<()> {
        let value = attributes.as_ref().map(encode).transpose()?;
        self.change_attributes(id, AttributesUpdate::Replace(value))
            .await
    }

    /// Sets each top-level key of `attributes` on workflow `id`, keeping its other keys (a
    /// matching key's value is replaced whole, nested objects included; `null` is stored as
    /// JSON null), in one atomic write, as DBOS's `update_workflow_attributes(merge=True)`.
    /// Fails with [`Error::NotFound`] when there is no such workflow.
    pub async fn merge_workflow_attributes(&self, id: &str, attributes: Attributes) -> Result<()> {
        let value = encode(&attributes)?;
        self.change_attributes(id, AttributesUpdate::Merge(value))
            .await
    }

    async fn change_attributes(&self, id: &str, update: AttributesUpdate) -> Result<()> {
        let target = id.to_owned();
        let found = self
            .shared()
            .db
            .call_with((target, update), |db, (target, update)| async move {
                db.update_attributes(&target, &update).await
            })
            .await?;
        if found {
            Ok(())
        } else {
            Err(Error::NotFound(id.to_owned()))
        }
    }
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

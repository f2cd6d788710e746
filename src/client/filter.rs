//! Listing filters written as text, `KEY=VALUE` (`created` also takes `>=`, `>`, `<`, `<=`), as
//! `stead workflow cancel --where` and the admin API's batches take them: one parser, one set of
//! errors, each naming the clause and what was wrong with it. It builds a [`ListWorkflows`] and
//! nothing else.

use std::time::SystemTime;

use serde_json::Value;

use super::manage::{epoch_ms, ListWorkflows};
use crate::base::attributes::parse_attribute;
use crate::base::status::Status;
use crate::error::{Error, Result};

/// The keys a clause may name, for the error that names an unknown one.
pub const WHERE_KEYS: &str = "id, status, name, queue, version, app, executor, parent, \
     forked_from, created (>=, >, <, <=), attr.<KEY>";

impl ListWorkflows {
    /// Adds one filter written as text (all of them must hold):
    ///
    /// - `id=ID`, `status=STATUS` (any case; `status=CANCELLED,ERROR` or repeated: any of
    ///   them), `name=`, `queue=`, `version=` (application version), `app=` (application name),
    ///   `executor=`, `parent=` (children of), `forked_from=`;
    /// - `created>=TIME`, `created>TIME`, `created<TIME`, `created<=TIME`: TIME is RFC 3339
    ///   (`2026-01-01T00:00:00Z`) or epoch milliseconds;
    /// - `attr.KEY=VALUE`: attribute KEY equals VALUE (JSON when it parses, else a string, as
    ///   [`parse_attribute`](crate::workflow::parse_attribute)).
    ///
    /// Fails with [`Error::InvalidArgument`] naming the clause and its unknown key, bad value,
    /// or a key given twice.
    ///
    /// ```
    /// # fn demo() -> stead::Result<()> {
    /// use stead::client::ListWorkflows;
    /// let f = ListWorkflows::new()
    ///     .with_where("status=pending")?
    ///     .with_where("created>=2026-01-01T00:00:00Z")?
    ///     .with_where("attr.customer=acme")?;
    /// assert!(ListWorkflows::new().with_where("colour=red").is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_where(mut self, clause: &str) -> Result<ListWorkflows> {
        let bad = |why: String| Error::InvalidArgument(format!("filter {clause:?}: {why}"));
        let at = clause
            .find(['=', '<', '>'])
            .filter(|at| *at > 0)
            .ok_or_else(|| bad(format!("not KEY=VALUE (keys: {WHERE_KEYS})")))?;
        let (key, rest) = clause.split_at(at);
        let op_len = if rest[1..].starts_with('=') && !rest.starts_with('=') {
            2
        } else {
            1
        };
        let (op, value) = rest.split_at(op_len);
        if key == "created" {
            let ms = time_ms(value).map_err(bad)?;
            let q = &mut self.query;
            let (slot, ms) = match op {
                ">=" => (&mut q.created_from, ms),
                ">" => (&mut q.created_from, ms.saturating_add(1)),
                "<" => (&mut q.created_until, ms),
                "<=" => (&mut q.created_until, ms.saturating_add(1)),
                _ => return Err(bad("created takes >=, >, < or <=".into())),
            };
            return match slot.replace(ms) {
                None => Ok(self),
                Some(_) => Err(bad("that bound of created is already given".into())),
            };
        }
        if op != "=" {
            return Err(bad(format!("{key} takes =, not {op}")));
        }
        if let Some(name) = key.strip_prefix("attr.") {
            return self.with_attribute(name, value).map_err(bad);
        }
        let q = &mut self.query;
        let slot = match key {
            "id" => {
                q.ids.get_or_insert_with(Vec::new).push(value.to_owned());
                return Ok(self);
            }
            "status" => {
                for text in value.split(',').map(str::trim) {
                    let status = Status::parse(&text.to_ascii_uppercase())
                        .filter(|s| *s != Status::Unknown)
                        .ok_or_else(|| {
                            bad(format!(
                                "unknown status {text:?}; one of PENDING, ENQUEUED, DELAYED, \
                                 SUCCESS, ERROR, CANCELLED, MAX_RECOVERY_ATTEMPTS_EXCEEDED"
                            ))
                        })?;
                    self = self.status(status);
                }
                return Ok(self);
            }
            "name" => &mut q.name,
            "queue" => &mut q.queue,
            "version" => &mut q.app_version,
            "app" => &mut q.app_name,
            "executor" => &mut q.executor,
            "parent" => &mut q.parent,
            "forked_from" => &mut q.forked_from,
            other => return Err(bad(format!("unknown key {other:?} (keys: {WHERE_KEYS})"))),
        };
        if value.is_empty() {
            return Err(bad(format!("{key} needs a value")));
        }
        match slot.replace(value.to_owned()) {
            None => Ok(self),
            Some(_) => Err(bad(format!("{key} is already given"))),
        }
    }

    /// Adds attribute `name` = `value` (JSON, else a string) to the attribute filter.
    fn with_attribute(mut self, name: &str, value: &str) -> std::result::Result<Self, String> {
        let (name, value) =
            parse_attribute(&format!("{name}={value}")).map_err(|e| e.to_string())?;
        let mut attributes = match self.query.attributes.as_deref() {
            Some(text) => serde_json::from_str(text).map_err(|e| e.to_string())?,
            None => serde_json::Map::new(),
        };
        if attributes.insert(name.clone(), value).is_some() {
            return Err(format!("attr.{name} is already given"));
        }
        self.query.attributes = Some(Value::Object(attributes).to_string());
        Ok(self)
    }

    /// Whether any filter is set (paging and payloads aside): a batch without one would
    /// change every workflow.
    pub(super) fn filters_anything(&self) -> bool {
        let q = &self.query;
        let texts = [
            &q.name,
            &q.queue,
            &q.app_version,
            &q.app_name,
            &q.parent,
            &q.forked_from,
            &q.executor,
            &q.attributes,
        ];
        q.ids.is_some()
            || q.statuses.is_some()
            || q.created_from.is_some()
            || q.created_until.is_some()
            || q.queued_only
            || texts.iter().any(|t| t.is_some())
    }
}

/// RFC 3339, or epoch milliseconds.
fn time_ms(text: &str) -> std::result::Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let at = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| {
        format!("{text:?} is not a time (RFC 3339, e.g. 2026-01-01T00:00:00Z, or epoch ms)")
    })?;
    Ok(epoch_ms(SystemTime::from(at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(clauses: &[&str]) -> Result<ListWorkflows> {
        clauses
            .iter()
            .try_fold(ListWorkflows::new(), |f, c| f.with_where(c))
    }

    #[test]
    fn clauses_set_the_listing_filters() {
        let f = parse(&[
            "status=pending,Cancelled",
            "name=foo",
            "queue=q",
            "version=v=2",
            "id=a",
            "id=b",
            "created>=2026-01-01T00:00:00Z",
            "created<1767225600500",
            "attr.customer=acme",
            "attr.n=3",
        ])
        .unwrap();
        let q = &f.query;
        assert_eq!(
            q.statuses,
            Some(vec!["PENDING".to_owned(), "CANCELLED".to_owned()])
        );
        assert_eq!(
            (q.name.as_deref(), q.queue.as_deref()),
            (Some("foo"), Some("q"))
        );
        assert_eq!(q.app_version.as_deref(), Some("v=2"), "the first = splits");
        assert_eq!(q.ids, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(
            (q.created_from, q.created_until),
            (Some(1_767_225_600_000), Some(1_767_225_600_500))
        );
        let attrs: Value = serde_json::from_str(q.attributes.as_deref().unwrap()).unwrap();
        assert_eq!(attrs, serde_json::json!({"customer": "acme", "n": 3}));
        assert!(f.filters_anything());
        assert!(!ListWorkflows::new().filters_anything());
        let f = parse(&["created>10", "created<=20"]).unwrap();
        assert_eq!(
            (f.query.created_from, f.query.created_until),
            (Some(11), Some(21))
        );
    }

    #[test]
    fn bad_clauses_name_what_is_wrong() {
        for (clause, says) in [
            ("colour=red", "unknown key \"colour\""),
            ("status=RUNNING", "unknown status \"RUNNING\""),
            ("created>=yesterday", "is not a time"),
            ("created=5", "created takes"),
            ("name>=x", "name takes ="),
            ("name=", "needs a value"),
            ("novalue", "not KEY=VALUE"),
            ("=x", "not KEY=VALUE"),
        ] {
            let err = parse(&[clause]).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, Error::InvalidArgument(_)),
                "{clause}: {err:?}"
            );
            assert!(
                text.contains(clause) && text.contains(says),
                "{clause}: {text}"
            );
        }
        for twice in [
            ["name=a", "name=b"],
            ["attr.k=1", "attr.k=2"],
            ["created>=1", "created>2"],
        ] {
            let err = parse(&twice).unwrap_err().to_string();
            assert!(err.contains("already given"), "{twice:?}: {err}");
        }
    }
}

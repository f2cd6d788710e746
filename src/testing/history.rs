//! The history file format (feature `testing`): one workflow's recorded run as portable JSON, so
//! a build can keep real histories in a folder and replay them without a database
//! (`testing::files`). `Client::export_history` writes it; `stead workflow export ID` prints it.
//!
//! It owns the format, its version and its conversion to the replay core's input; it must never
//! read a database, and never change the meaning of a field within a version: a new meaning is a
//! new version, and a reader refuses versions above its own.
//!
//! **Format, version 1.** One JSON object:
//!
//! ```json
//! {
//!   "format": "stead.history",
//!   "version": 1,
//!   "workflow": {
//!     "id": "pay-42", "name": "pay", "status": "SUCCESS",
//!     "app_name": "shop", "app_version": "3f2a…", "executor_id": "local",
//!     "queue_name": null, "created_at_ms": 1767225600000, "updated_at_ms": 1767225600120,
//!     "parent_workflow_id": null, "forked_from": null, "attributes": null,
//!     "serialization": "portable_json",
//!     "input": {"order": 42}, "output": "paid", "error": null
//!   },
//!   "steps": [
//!     {"function_id": 1, "name": "reserve", "output": 7, "serialization": "portable_json"},
//!     {"function_id": 2, "name": "DBOS.sleep", "output": 1767225600.1},
//!     {"function_id": 3, "name": "charge", "error": {"name": "Declined", "message": "…"}}
//!   ]
//! }
//! ```
//!
//! `workflow` is the status row: `status` as stored (`PENDING`, `SUCCESS`, `ERROR`, …), times in
//! epoch milliseconds, `input` as the workflow receives it, `output`/`error` its outcome (`error`
//! in DBOS's portable shape `{name, message, code?, data?}`). `steps` are the rows of
//! `operation_outputs` by call number: every durable call (steps, sleeps, `now`/`random`/`uuid`,
//! sends and receives, events, streams, child starts and results with `child_workflow_id`, patch
//! markers), which is all a replay reads: messages, events and streams are replayed from the
//! calls that read them. `output` and `error` hold the stored JSON; a payload that is not JSON (a
//! foreign format, named by `serialization`) is kept verbatim as `output_text`/`error_text`.
//! Absent fields mean `null`. Unknown fields are ignored, so a version may gain fields.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::base::status::Status;
use crate::sysdb::{StepRow, Text};
use crate::testing::error::KitError;
use crate::testing::replay::Recorded;

/// The `format` field of every history file.
pub const FORMAT: &str = "stead.history";
/// The version this build writes, and the highest it reads.
pub const VERSION: u32 = 1;

/// One workflow's recorded run (the format is in this module's docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct History {
    /// Always [`FORMAT`].
    pub format: String,
    /// The format version it was written in.
    pub version: u32,
    /// The workflow's status row.
    pub workflow: HistoryWorkflow,
    /// Its durable calls, by call number.
    pub steps: Vec<HistoryStep>,
}

/// The status row of a history's workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HistoryWorkflow {
    pub id: String,
    pub name: String,
    /// As stored: `PENDING`, `SUCCESS`, `ERROR`, `CANCELLED`, …
    pub status: String,
    #[serde(default)]
    pub app_name: Option<String>,
    #[serde(default)]
    pub app_version: Option<String>,
    #[serde(default)]
    pub executor_id: Option<String>,
    #[serde(default)]
    pub queue_name: Option<String>,
    #[serde(default)]
    pub created_at_ms: i64,
    #[serde(default)]
    pub updated_at_ms: i64,
    #[serde(default)]
    pub parent_workflow_id: Option<String>,
    #[serde(default)]
    pub forked_from: Option<String>,
    #[serde(default)]
    pub attributes: Option<Value>,
    /// The payloads' format (`portable_json`; `None` on legacy rows).
    #[serde(default)]
    pub serialization: Option<String>,
    /// The input as the workflow receives it (absent when stored in another format).
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub output: Option<Value>,
    /// DBOS's portable error shape.
    #[serde(default)]
    pub error: Option<Value>,
}

/// One recorded durable call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HistoryStep {
    /// The call number (1-based).
    pub function_id: u32,
    /// The call's name: a step's own, or `DBOS.sleep`, `DBOS.recv`, a child's workflow name, …
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The output verbatim, when it is not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The error verbatim, when it is not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_workflow_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serialization: Option<String>,
}

/// Stored text as JSON when it is JSON, else verbatim.
fn split(text: Option<String>) -> (Option<Value>, Option<String>) {
    match text {
        None => (None, None),
        Some(text) => match serde_json::from_str(&text) {
            Ok(value) => (Some(value), None),
            Err(_) => (None, Some(text)),
        },
    }
}

/// The stored text back from its JSON or its verbatim form.
fn join(value: &Option<Value>, text: &Option<String>) -> Option<String> {
    text.clone()
        .or_else(|| value.as_ref().map(Value::to_string))
}

impl HistoryStep {
    pub(crate) fn from_row(row: StepRow) -> HistoryStep {
        let (output, output_text) = split(row.output.map(Text::into_string));
        let (error, error_text) = split(row.error);
        HistoryStep {
            function_id: row.function_id,
            name: row.name,
            output,
            output_text,
            error,
            error_text,
            child_workflow_id: row.child_workflow_id,
            serialization: row.serialization,
        }
    }

    fn to_row(&self) -> StepRow {
        StepRow {
            function_id: self.function_id,
            name: self.name.clone(),
            output: join(&self.output, &self.output_text).map(Text::from),
            error: join(&self.error, &self.error_text),
            child_workflow_id: self.child_workflow_id.clone(),
            serialization: self.serialization.clone(),
        }
    }
}

impl History {
    pub(crate) fn new(workflow: HistoryWorkflow, steps: Vec<HistoryStep>) -> History {
        History {
            format: FORMAT.to_owned(),
            version: VERSION,
            workflow,
            steps,
        }
    }

    /// Reads a history from JSON text; `source_name` names it in errors.
    pub fn from_json(text: &str, source_name: &str) -> Result<History, KitError> {
        let format_err = |reason: String| KitError::Format {
            source_name: source_name.to_owned(),
            reason,
        };
        let value: Value = serde_json::from_str(text).map_err(|e| format_err(e.to_string()))?;
        match value.get("format").and_then(Value::as_str) {
            Some(FORMAT) => {}
            other => {
                return Err(format_err(format!(
                    "its format is {other:?}, not {FORMAT:?}"
                )))
            }
        }
        match value.get("version").and_then(Value::as_u64) {
            Some(found) if found > u64::from(VERSION) => {
                return Err(KitError::Version {
                    source_name: source_name.to_owned(),
                    found,
                    supported: VERSION,
                })
            }
            Some(_) => {}
            None => return Err(format_err("it has no numeric version".into())),
        }
        serde_json::from_value(value).map_err(|e| format_err(e.to_string()))
    }

    /// The history as pretty JSON (what a file holds).
    pub fn to_json(&self) -> String {
        // A tree of strings, numbers and JSON values always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a history file.
    pub fn read(path: impl AsRef<Path>) -> Result<History, KitError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KitError::Io {
            path: path.to_owned(),
            source,
        })?;
        History::from_json(&text, &path.display().to_string())
    }

    /// Writes the history to a file (replacing it).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), KitError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json() + "\n").map_err(|source| KitError::Io {
            path: path.to_owned(),
            source,
        })
    }

    /// The file name [`Client::export_histories`](crate::Client::export_histories) output is
    /// best kept under: the workflow id, with characters a file name may not hold replaced.
    pub fn file_name(&self) -> String {
        let safe: String = (self.workflow.id.chars())
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
                _ => '_',
            })
            .collect();
        format!("{safe}.json")
    }

    /// The replay core's input.
    pub(crate) fn recorded(&self) -> Recorded {
        let w = &self.workflow;
        Recorded {
            id: w.id.clone(),
            name: w.name.clone(),
            status: Status::parse(&w.status).unwrap_or(Status::Unknown),
            serialization: w.serialization.clone(),
            input: w.input.clone(),
            steps: self.steps.iter().map(|s| s.to_row()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_as_json_or_verbatim_and_newer_versions_are_refused() {
        let row = StepRow {
            function_id: 2,
            name: "charge".into(),
            output: Some(r#"{"amount":12.5}"#.into()),
            error: None,
            child_workflow_id: None,
            serialization: Some("py_pickle".into()),
        };
        let mut pickled = row.clone();
        pickled.output = Some("gASVBQ==".into());
        let workflow = HistoryWorkflow {
            id: "w/1".into(),
            name: "pay".into(),
            status: "SUCCESS".into(),
            app_name: None,
            app_version: None,
            executor_id: None,
            queue_name: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            parent_workflow_id: None,
            forked_from: None,
            attributes: None,
            serialization: None,
            input: Some(Value::from(3)),
            output: None,
            error: None,
        };
        let steps = vec![
            HistoryStep::from_row(row.clone()),
            HistoryStep::from_row(pickled.clone()),
        ];
        let history = History::new(workflow, steps);
        assert_eq!(
            history.steps[0].output,
            Some(serde_json::json!({"amount": 12.5}))
        );
        assert_eq!(history.steps[1].output_text.as_deref(), Some("gASVBQ=="));
        assert_eq!(history.file_name(), "w_1.json");
        let back = History::from_json(&history.to_json(), "t").unwrap();
        assert_eq!(back, history);
        let rows = back.recorded().steps;
        assert_eq!(rows[0].output, row.output);
        assert_eq!(rows[1].output, pickled.output);

        let newer = history
            .to_json()
            .replace("\"version\": 1", "\"version\": 2");
        assert!(matches!(
            History::from_json(&newer, "t"),
            Err(KitError::Version { found: 2, .. })
        ));
        let other = history.to_json().replace(FORMAT, "x");
        assert!(matches!(
            History::from_json(&other, "t"),
            Err(KitError::Format { .. })
        ));
    }
}

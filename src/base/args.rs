//! `Args`: several positional and named arguments for a workflow written in another language,
//! carried in DBOS's input envelope `{"positionalArgs": [...], "namedArgs": {...}}`.
//!
//! A Rust workflow takes one value, so stead's other inputs travel as the one positional
//! argument. `Args` is the way to call `def add(a, b)`, `def noargs()` or `greet(name, *,
//! punctuation)` with its real signature. It never decides how stead's own workflows read their
//! input (`codec::decode_inputs` does).

use serde::ser::{Error as _, SerializeMap};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// The key an `Args` value serializes under, which `codec::encode_inputs` recognises and
/// unwraps into the envelope itself.
pub(crate) const ARGS_MARKER: &str = "$stead.args";

/// Positional and named arguments for a workflow, passed wherever an input is taken
/// (`Client::enqueue`, `Runtime::start`/`enqueue`, `Context::enqueue_child`, ...).
///
/// ```
/// // Python: def greet(name, punctuation="."): ...
/// let args = stead::workflow::Args::new().arg("Ada").named("punctuation", "!");
/// # let _ = args;
/// ```
///
/// A stead workflow receiving `Args` reads them as any envelope: one positional argument is
/// its value, several are a tuple, none are the named arguments as an object (or `null`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    positional: Vec<Value>,
    named: Map<String, Value>,
    /// The first value that could not be encoded; reported when the input is written.
    error: Option<String>,
}

impl Args {
    /// No arguments (`f()`).
    pub fn new() -> Args {
        Args::default()
    }

    /// Adds the next positional argument.
    pub fn arg<T: Serialize>(mut self, value: T) -> Args {
        match serde_json::to_value(value) {
            Ok(v) => self.positional.push(v),
            Err(e) => self.fail(format!(
                "positional argument {}: {e}",
                self.positional.len()
            )),
        }
        self
    }

    /// Adds (or replaces) the named argument `name`.
    pub fn named<T: Serialize>(mut self, name: impl Into<String>, value: T) -> Args {
        let name = name.into();
        match serde_json::to_value(value) {
            Ok(v) => {
                self.named.insert(name, v);
            }
            Err(e) => self.fail(format!("named argument {name:?}: {e}")),
        }
        self
    }

    fn fail(&mut self, reason: String) {
        self.error.get_or_insert(reason);
    }
}

impl Serialize for Args {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let Some(reason) = &self.error {
            return Err(S::Error::custom(reason));
        }
        let mut envelope = Map::new();
        envelope.insert(
            "positionalArgs".into(),
            Value::Array(self.positional.clone()),
        );
        envelope.insert("namedArgs".into(), Value::Object(self.named.clone()));
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(ARGS_MARKER, &envelope)?;
        map.end()
    }
}

//! The codec every stored payload crosses: how inputs, outputs and errors are written to the
//! system database, and how what other writers stored is read back.
//!
//! stead writes one format, portable JSON (`serialization = portable_json`), which DBOS
//! clients in every language read. It reads three: portable JSON, DBOS Python's default
//! `py_pickle` (`base::pickle`) and DBOS TypeScript's default `js_superjson`
//! (`base::superjson`), each into the same JSON a portable writer would have stored, then into
//! the caller's type. It must never guess a format from the text: the row's `serialization`
//! column decides, and any other name (a DBOS custom serializer's, or NULL) is an error naming
//! it. A refused foreign payload is [`Error::PayloadRefused`], naming what was refused.
//!
//! **One path.** Every read of a stored payload goes through [`read`], [`read_text`],
//! [`read_inputs`] or [`read_error`] with the row's `serialization`; for portable JSON each is
//! the plain `serde_json` parse it always was (a string comparison more, no extra allocation).
//! A foreign value stead records again (an event or a child's result a workflow reads) is
//! converted to portable JSON text first ([`read_text`]); a received message is recorded as it
//! came, in its sender's format, as DBOS records it, and read back by that format.
//!
//! **Inputs.** A Rust workflow takes one value: the one positional argument. Other writers'
//! envelopes: several positional arguments are a tuple (array); none means the named arguments as
//! an object, or `null`. Going out, `null` (`()`, `None`) is written as no argument at all
//! (`positionalArgs: []`, which stead reads back as `null` and a Python `def f()` accepts), and an
//! `Args` value is the envelope itself: it serializes as `{"$stead.args": <envelope>}`, which
//! `encode_inputs` unwraps by a string prefix (no parse on the hot path); a registered stead
//! workflow given `Args` is checked against what it will receive. The marker, not a new input
//! trait, keeps every `I: Serialize` signature as it was.
//!
//! **A workflow enqueued in another format.** DBOS readers read a workflow's output and error in
//! the format its row names, and stead writes portable JSON; so when stead runs a workflow whose
//! inputs are `py_pickle` or `js_superjson`, it first rewrites them as the portable envelope of
//! what it decoded and marks the row `portable_json` ([`Inputs::portable`], written by the
//! workflow actor before the body runs): a default DBOS client then reads the result stead
//! writes, and DBOS's tools list the inputs as stead read them. Inputs stead refuses (or in a
//! format it does not read) fail only their workflow: the row is marked `portable_json` too,
//! since the refusal stead records is, so every DBOS reader reads it (a `PortableWorkflowError`
//! named `PayloadRefused` or `UnsupportedSerialization`, saying what the inputs held); the
//! inputs stay as they were stored, which DBOS's tools then show as raw text.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::base::{pickle, superjson};
use crate::error::{Error, PortableError, Refusal};

/// The payload format stead writes, and reads (the `serialization` column).
pub(crate) const PORTABLE_JSON: &str = "portable_json";
/// DBOS Python's default format, which stead reads.
pub(crate) const PY_PICKLE: &str = "py_pickle";
/// DBOS TypeScript's default format, which stead reads.
pub(crate) const JS_SUPERJSON: &str = "js_superjson";

/// A format stead reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Portable,
    Pickle,
    Superjson,
}

impl Format {
    /// The format a `serialization` column names; NULL and other names are refused.
    fn of(serialization: Option<&str>, what: &dyn std::fmt::Display) -> Result<Format, Error> {
        match serialization {
            Some(PORTABLE_JSON) => Ok(Format::Portable),
            Some(PY_PICKLE) => Ok(Format::Pickle),
            Some(JS_SUPERJSON) => Ok(Format::Superjson),
            other => Err(Error::UnsupportedSerialization {
                what: what.to_string(),
                format: other.unwrap_or("NULL (legacy)").to_owned(),
            }),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Portable => PORTABLE_JSON,
            Format::Pickle => PY_PICKLE,
            Format::Superjson => JS_SUPERJSON,
        }
    }

    fn refused(self, what: &dyn std::fmt::Display) -> impl FnOnce(Refusal) -> Error + '_ {
        move |refusal| Error::PayloadRefused {
            what: what.to_string(),
            format: self.name().to_owned(),
            refusal,
        }
    }

    /// A foreign value column as the JSON a portable writer would have stored.
    fn value(self, text: &str, what: &dyn std::fmt::Display) -> Result<Value, Error> {
        match self {
            Format::Portable => serde_json::from_str(text).map_err(|e| Error::Decode {
                what: what.to_string(),
                reason: e.to_string(),
            }),
            Format::Pickle => pickle::decode_value(text).map_err(self.refused(what)),
            Format::Superjson => superjson::decode_value(text).map_err(self.refused(what)),
        }
    }
}

/// Reads a stored payload of format `serialization` into `T`; a missing payload reads as
/// `null`. Portable JSON is parsed straight into `T`, as [`decode`] does.
pub(crate) fn read<T: DeserializeOwned>(
    serialization: Option<&str>,
    text: Option<&str>,
    what: impl std::fmt::Display,
) -> Result<T, Error> {
    match Format::of(serialization, &what)? {
        Format::Portable => decode(text, what),
        foreign => {
            let value = match text {
                Some(text) => foreign.value(text, &what)?,
                None => Value::Null,
            };
            serde_json::from_value(value).map_err(|e| Error::Decode {
                what: what.to_string(),
                reason: e.to_string(),
            })
        }
    }
}

/// A stored payload as portable JSON text: `text` itself when it is portable, else what it
/// decodes to (for a value stead records again, or hands on as text).
pub(crate) fn read_text(
    serialization: Option<&str>,
    text: String,
    what: impl std::fmt::Display,
) -> Result<String, Error> {
    match Format::of(serialization, &what)? {
        Format::Portable => Ok(text),
        foreign => Ok(foreign.value(&text, &what)?.to_string()),
    }
}

/// Refuses a format stead does not read (see [`read`]), naming it.
pub(crate) fn check_format(
    serialization: Option<&str>,
    what: impl std::fmt::Display,
) -> Result<(), Error> {
    Format::of(serialization, &what).map(|_| ())
}

/// A stored error as portable JSON text: `text` itself when it is portable (or in a format
/// stead does not read), else [`read_error`]'s reading of it.
pub(crate) fn read_error_text(serialization: Option<&str>, text: String) -> String {
    match serialization {
        Some(PY_PICKLE | JS_SUPERJSON) => encode_error(&read_error(serialization, &text)),
        _ => text,
    }
}

/// A workflow's inputs as stead reads them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Inputs {
    /// What the workflow receives (the rule in [`decode_inputs`]).
    pub value: Value,
    /// For inputs stored in another format: the same arguments as a portable envelope, for the
    /// row to be rewritten with (see the module docs).
    pub portable: Option<String>,
}

/// Reads a workflow's stored inputs (`text`) of format `serialization`.
pub(crate) fn read_inputs(serialization: Option<&str>, text: &str) -> Result<Inputs, Error> {
    let what = "the workflow's input";
    let format = Format::of(serialization, &what)?;
    let (positional, named) = match format {
        Format::Portable => {
            return Ok(Inputs {
                value: decode_inputs(text)?,
                portable: None,
            })
        }
        Format::Pickle => pickle::decode_inputs(text).map_err(format.refused(&what))?,
        Format::Superjson => superjson::decode_inputs(text)
            .map(|args| (args, Map::new()))
            .map_err(format.refused(&what))?,
    };
    #[derive(Serialize)]
    struct Envelope<'a> {
        #[serde(rename = "positionalArgs")]
        positional: &'a [Value],
        #[serde(rename = "namedArgs")]
        named: &'a Map<String, Value>,
    }
    let envelope = Envelope {
        positional: &positional,
        named: &named,
    };
    let portable = serde_json::to_string(&envelope).map_err(|e| Error::Encode {
        what: what.into(),
        reason: e.to_string(),
    })?;
    Ok(Inputs {
        value: received(positional, named),
        portable: Some(portable),
    })
}

/// Reads a stored error of format `serialization`. Never fails: a foreign error stead refuses
/// is reported as a `PayloadRefused` error naming why, and text that is not a DBOS error
/// object (or in a format stead does not read) is kept as the message.
pub(crate) fn read_error(serialization: Option<&str>, text: &str) -> PortableError {
    let what = "the error";
    let decoded = match serialization {
        Some(PY_PICKLE) => pickle::decode_error(text).map_err(Format::Pickle.refused(&what)),
        Some(JS_SUPERJSON) => {
            superjson::decode_error(text).map_err(Format::Superjson.refused(&what))
        }
        _ => return decode_error(text),
    };
    decoded.unwrap_or_else(|e| PortableError::new(e.kind(), e.to_string()))
}

/// Wraps a workflow input (JSON text) in DBOS's envelope as the one positional argument; an
/// [`Args`](crate::workflow::Args) value is the envelope itself, and `null` (`()`, `None`) is no argument
/// at all (which stead reads back as `null`, and another language's `f()` accepts).
pub(crate) fn encode_inputs(input_json: &str) -> String {
    if let Some(envelope) = args_envelope(input_json) {
        return envelope.to_owned();
    }
    if input_json == "null" {
        return r#"{"positionalArgs":[],"namedArgs":{}}"#.to_owned();
    }
    format!(r#"{{"positionalArgs":[{input_json}],"namedArgs":{{}}}}"#)
}

/// The envelope inside a serialized `Args`, if `input_json` is one.
fn args_envelope(input_json: &str) -> Option<&str> {
    let prefix = format!(r#"{{"{}":"#, crate::base::args::ARGS_MARKER);
    input_json.strip_prefix(&prefix)?.strip_suffix('}')
}

/// The input as a stead workflow receives it (JSON text): itself, unless it is an `Args`.
pub(crate) fn as_received(input_json: &str) -> Result<std::borrow::Cow<'_, str>, Error> {
    match args_envelope(input_json) {
        None => Ok(std::borrow::Cow::Borrowed(input_json)),
        Some(envelope) => Ok(decode_inputs(envelope)?.to_string().into()),
    }
}

/// Reads an input envelope into the one value a Rust workflow takes.
///
/// One positional argument is that value; several are an array (a tuple); none is the named
/// arguments as an object when there are any, else `null` (so `()` and `Option` inputs work).
pub(crate) fn decode_inputs(text: &str) -> Result<Value, Error> {
    let decode_err = |reason: String| Error::Decode {
        what: "workflow inputs".into(),
        reason,
    };
    let mut envelope: Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(m)) => m,
        Ok(other) => return Err(decode_err(format!("expected an object, found {other}"))),
        Err(e) => return Err(decode_err(e.to_string())),
    };
    let positional = match envelope.remove("positionalArgs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(args)) => args,
        Some(other) => {
            return Err(decode_err(format!(
                "positionalArgs is not an array: {other}"
            )))
        }
    };
    let named = match envelope.remove("namedArgs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(other) => return Err(decode_err(format!("namedArgs is not an object: {other}"))),
    };
    Ok(received(positional, named))
}

/// The one value a Rust workflow receives from its positional and named arguments.
fn received(mut positional: Vec<Value>, named: Map<String, Value>) -> Value {
    match positional.len() {
        0 if named.is_empty() => Value::Null,
        0 => Value::Object(named),
        1 => positional.remove(0),
        _ => Value::Array(positional),
    }
}

/// Encodes a value as compact portable JSON. Refused: a value whose `Serialize` panics, and
/// one holding a NaN or infinite float (JSON writes it as `null`, so a replay would read back
/// something else, or nothing its type accepts).
pub(crate) fn encode<T: Serialize + ?Sized>(
    value: &T,
    what: impl std::fmt::Display,
) -> Result<String, Error> {
    let refused = |reason: String| Error::Encode {
        what: what.to_string(),
        reason,
    };
    let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serde_json::to_string(value)
    }))
    .map_err(|panic| refused(format!("its Serialize panicked: {}", panic_text(&*panic))))?
    .map_err(|e| refused(e.to_string()))?;
    // Only a value written with a `null` can hold one; most are checked by this search alone.
    if text.contains("null") && crate::base::nonfinite::holds_non_finite(value) {
        return Err(refused(
            "it holds a NaN or infinite float, which JSON cannot represent (it would be \
             recorded as null and replay differently)"
                .into(),
        ));
    }
    Ok(text)
}

/// The text of an error or value, even when its `Display` panics (the panic is described).
pub(crate) fn describe(value: &dyn std::fmt::Display) -> String {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| value.to_string()))
        .unwrap_or_else(|panic| format!("(its Display panicked: {})", panic_text(&*panic)))
}

/// A panic's message, when it has one.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Encodes the input of workflow `workflow` (its name only words the error).
pub(crate) fn encode_input<I: Serialize + ?Sized>(
    workflow: &str,
    input: &I,
) -> Result<String, Error> {
    encode(input, format_args!("the input of workflow {workflow:?}"))
}

/// Decodes portable JSON text; a missing payload reads as `null`.
pub(crate) fn decode<T: DeserializeOwned>(
    text: Option<&str>,
    what: impl std::fmt::Display,
) -> Result<T, Error> {
    serde_json::from_str(text.unwrap_or("null")).map_err(|e| Error::Decode {
        what: what.to_string(),
        reason: e.to_string(),
    })
}

/// Encodes an error as `{"name","message",...}`.
pub(crate) fn encode_error(error: &PortableError) -> String {
    // A struct of strings and JSON values always serializes.
    serde_json::to_string(error).unwrap_or_else(|_| {
        format!(
            "{{\"name\":{},\"message\":{}}}",
            Value::String(error.name.clone()),
            Value::String(error.message.clone())
        )
    })
}

/// Decodes a stored error; text that is not a DBOS error object is kept as the message.
pub(crate) fn decode_error(text: &str) -> PortableError {
    serde_json::from_str(text).unwrap_or_else(|_| PortableError::new("Error", text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inputs_round_trip_through_the_envelope() {
        let text = encode_inputs(r#"{"order":17}"#);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, json!({"positionalArgs":[{"order":17}],"namedArgs":{}}));
        assert_eq!(decode_inputs(&text).unwrap(), json!({"order": 17}));
    }

    #[test]
    fn args_are_the_envelope_and_null_is_no_argument() {
        let args = crate::workflow::Args::new()
            .arg(2)
            .arg("b")
            .named("sep", "-");
        let text = encode_inputs(&encode(&args, "args").unwrap());
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"positionalArgs": [2, "b"], "namedArgs": {"sep": "-"}})
        );
        assert_eq!(decode_inputs(&text).unwrap(), json!([2, "b"]));
        let none = encode_inputs(&encode(&crate::workflow::Args::new(), "args").unwrap());
        assert_eq!(none, r#"{"namedArgs":{},"positionalArgs":[]}"#);
        assert_eq!(
            encode_inputs("null"),
            r#"{"positionalArgs":[],"namedArgs":{}}"#
        );
        assert_eq!(decode_inputs(&encode_inputs("null")).unwrap(), Value::Null);
        // A value that only looks like the marker's content is one argument.
        let lookalike = r#"{"positionalArgs":[1]}"#;
        assert_eq!(
            decode_inputs(&encode_inputs(lookalike)).unwrap(),
            json!({"positionalArgs":[1]})
        );
        let bad = crate::workflow::Args::new().arg(f64::NAN).arg(1);
        assert!(encode(&bad, "args").is_ok(), "NaN is null in serde_json");
        let unencodable =
            crate::workflow::Args::new().named("m", std::collections::HashMap::from([((1, 2), 3)]));
        assert!(encode(&unencodable, "args").is_err());
    }

    #[test]
    fn envelopes_from_other_writers_decode() {
        // Several positional arguments become a tuple; key order and missing keys don't matter.
        assert_eq!(
            decode_inputs(r#"{"namedArgs":{},"positionalArgs":[1,"a"]}"#).unwrap(),
            json!([1, "a"])
        );
        assert_eq!(
            decode_inputs(r#"{"positionalArgs":[]}"#).unwrap(),
            Value::Null
        );
        assert_eq!(decode_inputs(r#"{"namedArgs":null}"#).unwrap(), Value::Null);
        assert_eq!(
            decode_inputs(r#"{"positionalArgs":[],"namedArgs":{"x":1}}"#).unwrap(),
            json!({"x": 1})
        );
    }

    #[test]
    fn malformed_envelopes_are_typed_errors() {
        for bad in [
            "[1]",
            "not json",
            r#"{"positionalArgs":3}"#,
            r#"{"namedArgs":[]}"#,
        ] {
            assert!(
                matches!(decode_inputs(bad), Err(Error::Decode { .. })),
                "{bad} should be rejected"
            );
        }
    }

    #[test]
    fn errors_round_trip_and_foreign_text_is_kept() {
        let e = PortableError::new("ValueError", "bad amount");
        let text = encode_error(&e);
        assert_eq!(text, r#"{"name":"ValueError","message":"bad amount"}"#);
        assert_eq!(decode_error(&text), e);
        assert_eq!(decode_error("boom"), PortableError::new("Error", "boom"));
    }

    #[test]
    fn formats_are_read_by_their_column_and_others_named() {
        let portable: Value = read(Some(PORTABLE_JSON), Some(r#"{"a":1}"#), "output").unwrap();
        assert_eq!(portable, json!({"a": 1}));
        // pickle.dumps({'a': 1}, protocol=4) and what DBOS TypeScript stores for a Date.
        let pickled: Value =
            read(Some(PY_PICKLE), Some("gASVCgAAAAAAAAB9lIwBYZRLAXMu"), "o").unwrap();
        assert_eq!(pickled, json!({"a": 1}));
        let sj = r#"{"json":"2025-06-15T10:30:00.000Z","meta":{"values":["Date"]},"__dbos_serializer":"superjson"}"#;
        let date: String = read(Some(JS_SUPERJSON), Some(sj), "o").unwrap();
        assert_eq!(date, "2025-06-15T10:30:00.000Z");
        assert_eq!(
            read_text(Some(JS_SUPERJSON), sj.into(), "o").unwrap(),
            r#""2025-06-15T10:30:00.000Z""#
        );
        assert_eq!(
            read_text(Some(PORTABLE_JSON), "[1]".into(), "o").unwrap(),
            "[1]"
        );
        // The same text under another name is not guessed at.
        let err = read::<Value>(Some("custom_serializer"), Some("[1]"), "output of step 2");
        let err = err.unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedSerialization { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("custom_serializer"), "{err}");
        assert!(read::<Value>(None, Some("1"), "output").is_err());
        assert!(read::<Value>(Some(PY_PICKLE), Some(sj), "output").is_err());
        // A foreign payload that does not fit the type is a decode error, like a portable one.
        assert!(matches!(
            read::<u32>(Some(PY_PICKLE), Some("gASVCgAAAAAAAAB9lIwBYZRLAXMu"), "o"),
            Err(Error::Decode { .. })
        ));
    }

    #[test]
    fn foreign_inputs_read_by_the_rule_and_rewrite_as_the_envelope() {
        // pickle.dumps({'args': (1, 'a'), 'kwargs': {'flag': False}}, protocol=4)
        let text = "gASVKAAAAAAAAAB9lCiMBGFyZ3OUSwGMAWGUhpSMBmt3YXJnc5R9lIwEZmxhZ5SJc3Uu";
        let inputs = read_inputs(Some(PY_PICKLE), text).unwrap();
        assert_eq!(inputs.value, json!([1, "a"]));
        let envelope: Value = serde_json::from_str(inputs.portable.as_deref().unwrap()).unwrap();
        assert_eq!(
            envelope,
            json!({"positionalArgs": [1, "a"], "namedArgs": {"flag": false}})
        );
        assert_eq!(
            decode_inputs(inputs.portable.as_deref().unwrap()).unwrap(),
            inputs.value
        );
        let sj = r#"{"json":[{"n":"7"}],"meta":{"values":{"0.n":["bigint"]}},"__dbos_serializer":"superjson"}"#;
        let inputs = read_inputs(Some(JS_SUPERJSON), sj).unwrap();
        assert_eq!(inputs.value, json!({"n": "7"}));
        let portable = read_inputs(Some(PORTABLE_JSON), r#"{"positionalArgs":[3]}"#).unwrap();
        assert_eq!(
            portable,
            Inputs {
                value: json!(3),
                portable: None
            }
        );
        // eval('1') pickled: refused by name, never run.
        let hostile = "gASVHQAAAAAAAACMCGJ1aWx0aW5zlIwEZXZhbJSTlIwBMZSFlFKULg==";
        match read_inputs(Some(PY_PICKLE), hostile) {
            Err(Error::PayloadRefused {
                refusal: Refusal::UnsupportedGlobal { module, name },
                ..
            }) => {
                assert_eq!((module.as_str(), name.as_str()), ("builtins", "eval"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn foreign_errors_read_as_portable_errors() {
        // pickle.dumps(ValueError('bad amount'), protocol=4)
        let text = "gASVLAAAAAAAAACMCGJ1aWx0aW5zlIwKVmFsdWVFcnJvcpSTlIwKYmFkIGFtb3VudJSFlFKULg==";
        assert_eq!(
            read_error(Some(PY_PICKLE), text),
            PortableError::new("ValueError", "bad amount")
        );
        let refused = read_error(Some(PY_PICKLE), "gAJOLg==");
        assert_eq!(refused.name, "PayloadRefused", "{refused}");
        let sj = r#"{"json":{"name":"Error","message":"boom","code":402},"__dbos_serializer":"superjson"}"#;
        let e = read_error(Some(JS_SUPERJSON), sj);
        assert_eq!(
            (e.name.as_str(), e.message.as_str(), e.code),
            ("Error", "boom", Some(json!(402)))
        );
        assert_eq!(
            read_error(Some(PORTABLE_JSON), "boom"),
            PortableError::new("Error", "boom")
        );
    }
}

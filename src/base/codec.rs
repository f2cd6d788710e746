//! Portable JSON: how inputs, outputs and errors are written to and read from the system
//! database, in the format DBOS clients in any language read (`serialization = portable_json`).
//!
//! It must never guess: a payload in another format is an error naming that format.
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
//! **Other formats.** A `py_pickle` row (input or message) fails only its workflow, with
//! `UnsupportedSerialization` naming the format; the row keeps `py_pickle` (the truth about its
//! input), so DBOS's tools show stead's error as raw JSON text and the Python client's `get_result`
//! raises a base64 decoding error rather than the message.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, PortableError};

/// The only payload format stead writes and reads (the `serialization` column).
pub(crate) const PORTABLE_JSON: &str = "portable_json";

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
    let mut positional = positional;
    Ok(match positional.len() {
        0 if named.is_empty() => Value::Null,
        0 => Value::Object(named),
        1 => positional.remove(0),
        _ => Value::Array(positional),
    })
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

/// Refuses payloads in any format but portable JSON, naming the format found.
pub(crate) fn check_format(
    serialization: Option<&str>,
    what: impl std::fmt::Display,
) -> Result<(), Error> {
    match serialization {
        Some(PORTABLE_JSON) => Ok(()),
        other => Err(Error::UnsupportedSerialization {
            what: what.to_string(),
            format: other.unwrap_or("NULL (legacy)").to_owned(),
        }),
    }
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
    fn only_portable_json_is_read() {
        assert!(check_format(Some("portable_json"), "output").is_ok());
        let err = check_format(Some("py_pickle"), "output of step 2").unwrap_err();
        assert!(err.to_string().contains("py_pickle"), "{err}");
        assert!(check_format(None, "output").is_err());
    }
}

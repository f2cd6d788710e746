//! DBOS TypeScript's default payloads (`serialization = js_superjson`): SuperJSON, decoded into
//! plain JSON.
//!
//! It owns the reading of the stored text `{"json": .., "meta": .., "__dbos_serializer":
//! "superjson"}` (DBOS 5.3's `DBOSJSON`, `serialization.js`), with SuperJSON 1.x's paths (what
//! DBOS 5.3 bundles, 1.13) and 2.x's (`"v": 1` in `meta`). It must never evaluate anything, never
//! produce more than its input holds (SuperJSON copies shared values into `json` already), and
//! never panic: what it cannot read is a typed [`Refusal`].
//!
//! **Framing.** Inputs are the bare array of positional arguments ([`decode_inputs`]); an error
//! column holds the `serialize-error` record `{name, message, code?, stack}` as a plain object
//! ([`decode_error`]); every other column holds the value ([`decode_value`]).
//!
//! **Mapping.** `json` already is the JSON of most annotated values, so they stay as they are:
//!
//! | TypeScript (annotation) | JSON |
//! |---|---|
//! | `Date` (`Date`) | its ISO text, `2025-06-15T10:30:00.123Z` |
//! | `bigint` (`bigint`) | its decimal text, always (as DBOS's portable serializer writes it; read an `i64` from it with `serde_with::DisplayFromStr`) |
//! | `undefined` (`undefined`) | dropped from an object (as `JSON.stringify` does), `null` in an array or alone |
//! | `Map` (`map`) | an object; string keys, and finite number keys as their text; other keys (objects, annotated ones such as a `Date`) are refused (`UnsupportedKey`) |
//! | `Set` (`set`) | an array |
//! | `RegExp` (`regexp`) | its text, `/ab+c/gi` |
//! | `Error` (`Error`) | `{name, message}` |
//! | `URL`, `Buffer`, typed arrays | its text; an array of numbers |
//! | `-0` (`number`) | `-0.0`; NaN and ±Infinity are refused (`NonFiniteFloat`) |
//! | a registered class, a symbol, another custom type | refused (`UnsupportedAnnotation`) |
//! | a value containing itself (`referentialEqualities` under its own path) | refused (`Recursive`) |
//!
//! **Paths.** A `meta.values` tree is `[type]`, `[type, {path: tree}]` or `{path: tree}`, a
//! node's children applied before its own type (a map's pair `i` is `i.0`, key, and `i.1`,
//! value). Paths are `.`-joined; 2.x escapes `\.` and `\\`; 1.x escapes a dot only in keys that
//! are not the path's last, and never a backslash, so a 1.x segment that is not a key is
//! joined with the ones after it until it is.

use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};

use crate::error::{PortableError, Refusal};

/// The marker DBOS writes beside SuperJSON's fields.
const MARKER: &str = "superjson";
/// The most segments an annotation's path may have.
const MAX_PATH_SEGMENTS: usize = 512;

/// A value column.
pub(crate) fn decode_value(text: &str) -> Result<Value, Refusal> {
    let mut stored = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => return Err(not_superjson()),
        Err(e) => return Err(Refusal::Malformed(format!("not JSON ({e})"))),
    };
    if stored.get("__dbos_serializer").and_then(Value::as_str) != Some(MARKER) {
        return Err(not_superjson());
    }
    let json = stored.remove("json").ok_or_else(not_superjson)?;
    let meta = match stored.remove("meta") {
        None | Some(Value::Null) => return Ok(json),
        Some(Value::Object(meta)) => meta,
        Some(_) => return Err(Refusal::Malformed("a meta that is not an object".into())),
    };
    let v2 = meta.contains_key("v");
    if let Some(shared) = meta.get("referentialEqualities") {
        refuse_cycles(shared, v2)?;
    }
    let Some(tree) = meta.get("values").filter(|t| !t.is_null()) else {
        return Ok(json);
    };
    let mut node = Node::from(json);
    apply(&mut node, tree, v2)?;
    Ok(node.into_value())
}

/// Workflow inputs: the array of positional arguments.
pub(crate) fn decode_inputs(text: &str) -> Result<Vec<Value>, Refusal> {
    match decode_value(text)? {
        Value::Array(args) => Ok(args),
        _ => Err(Refusal::UnsupportedValue(
            "inputs that are not an array of arguments".into(),
        )),
    }
}

/// An error column: `{name, message, code}` of the stored record (its stack is dropped).
pub(crate) fn decode_error(text: &str) -> Result<PortableError, Refusal> {
    let mut record = match decode_value(text)? {
        Value::Object(record) => record,
        other => return Ok(PortableError::new("Error", other.to_string())),
    };
    let mut text_of = |field: &str| match record.remove(field) {
        Some(Value::String(s)) => Some(s),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    let name = text_of("name").unwrap_or_else(|| "Error".into());
    let message = text_of("message").unwrap_or_default();
    Ok(PortableError {
        code: record.remove("code").filter(|c| !c.is_null()),
        ..PortableError::new(name, message)
    })
}

fn not_superjson() -> Refusal {
    Refusal::Malformed("no SuperJSON marker (__dbos_serializer)".into())
}

/// The JSON being annotated: JSON plus `undefined`.
enum Node {
    Leaf(Value),
    Array(Vec<Node>),
    Object(BTreeMap<String, Node>),
    Undefined,
}

impl From<Value> for Node {
    fn from(v: Value) -> Node {
        match v {
            Value::Array(items) => Node::Array(items.into_iter().map(Node::from).collect()),
            Value::Object(fields) => Node::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k, Node::from(v)))
                    .collect(),
            ),
            leaf => Node::Leaf(leaf),
        }
    }
}

impl Node {
    /// Plain JSON: `undefined` dropped from objects, `null` elsewhere.
    fn into_value(self) -> Value {
        match self {
            Node::Leaf(v) => v,
            Node::Undefined => Value::Null,
            Node::Array(items) => Value::Array(items.into_iter().map(Node::into_value).collect()),
            Node::Object(fields) => Value::Object(
                fields
                    .into_iter()
                    .filter(|(_, v)| !matches!(v, Node::Undefined))
                    .map(|(k, v)| (k, v.into_value()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }

    /// The JavaScript type a map key of this shape had (for a refusal).
    fn js_type(&self) -> &'static str {
        match self {
            Node::Leaf(Value::Bool(_)) => "boolean",
            Node::Leaf(Value::Null) => "null",
            Node::Leaf(Value::Number(_)) => "number",
            Node::Leaf(Value::String(_)) => "string",
            Node::Undefined => "undefined",
            _ => "object",
        }
    }
}

/// Applies annotation tree `tree` to `node`: its children first, then its own type.
fn apply(node: &mut Node, tree: &Value, v2: bool) -> Result<(), Refusal> {
    let malformed = || Refusal::Malformed("an annotation tree of the wrong shape".into());
    let (own, children) = match tree {
        Value::Array(parts) => match parts.as_slice() {
            [own] => (Some(own), None),
            [own, children] => (Some(own), Some(children)),
            _ => return Err(malformed()),
        },
        Value::Object(_) => (None, Some(tree)),
        _ => return Err(malformed()),
    };
    let is_map = own.and_then(Value::as_str) == Some("map");
    // Map pairs whose key is annotated: such a key is no string or number.
    let mut annotated_keys: BTreeMap<usize, String> = BTreeMap::new();
    match children {
        None | Some(Value::Null) => {}
        Some(Value::Object(children)) => {
            for (path, sub) in children {
                let segments = parse_path(path, v2)?;
                if let (true, [pair, key, ..]) = (is_map, segments.as_slice()) {
                    if let (Ok(pair), "0") = (pair.parse::<usize>(), key.as_str()) {
                        annotated_keys.insert(pair, annotation_name(sub));
                    }
                }
                apply(resolve(node, &segments, v2, path)?, sub, v2)?;
            }
        }
        Some(_) => return Err(malformed()),
    }
    match own {
        Some(own) => transform(node, own, &annotated_keys),
        None => Ok(()),
    }
}

/// The annotation at the top of `tree`, for naming an annotated map key.
fn annotation_name(tree: &Value) -> String {
    match tree {
        Value::Array(parts) => match parts.first() {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "an annotated value".into(),
        },
        _ => "an annotated value".into(),
    }
}

/// Applies one annotation to `node`, whose children are already applied.
fn transform(
    node: &mut Node,
    annotation: &Value,
    annotated_keys: &BTreeMap<usize, String>,
) -> Result<(), Refusal> {
    let unsupported = || Refusal::UnsupportedAnnotation(annotation.to_string());
    match annotation {
        Value::String(kind) => match kind.as_str() {
            "undefined" => *node = Node::Undefined,
            // The JSON already is the value's text (or array).
            "Date" | "bigint" | "regexp" | "URL" | "Error" | "set" => {}
            "number" => match node {
                Node::Leaf(Value::String(s)) if s == "-0" => {
                    *node = Node::Leaf(Number::from_f64(-0.0).map_or(Value::Null, Value::Number));
                }
                Node::Leaf(Value::String(s))
                    if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") =>
                {
                    return Err(Refusal::NonFiniteFloat(s.clone()))
                }
                _ => {
                    return Err(Refusal::Malformed(
                        "a number annotation on no number".into(),
                    ))
                }
            },
            "map" => {
                let Node::Array(pairs) = std::mem::replace(node, Node::Undefined) else {
                    return Err(Refusal::Malformed(
                        "a map that is not an array of pairs".into(),
                    ));
                };
                let mut map = BTreeMap::new();
                for (i, pair) in pairs.into_iter().enumerate() {
                    if let Some(kind) = annotated_keys.get(&i) {
                        return Err(Refusal::UnsupportedKey(kind.clone()));
                    }
                    let Node::Array(pair) = pair else {
                        return Err(Refusal::Malformed("a map entry that is not a pair".into()));
                    };
                    let [key, value]: [Node; 2] = pair
                        .try_into()
                        .map_err(|_| Refusal::Malformed("a map entry that is not a pair".into()))?;
                    let key = match key {
                        Node::Leaf(Value::String(s)) => s,
                        Node::Leaf(Value::Number(n)) => number_key(&n),
                        other => return Err(Refusal::UnsupportedKey(other.js_type().into())),
                    };
                    if !matches!(value, Node::Undefined) {
                        map.insert(key, value);
                    }
                }
                *node = Node::Object(map);
            }
            _ => return Err(unsupported()),
        },
        Value::Array(parts) => match parts.as_slice() {
            [Value::String(kind), Value::String(name)]
                if (kind == "custom" && name == "Buffer") || kind == "typed-array" => {}
            _ => return Err(unsupported()),
        },
        _ => return Err(unsupported()),
    }
    Ok(())
}

/// A number map key as JavaScript's `String(n)` writes it for the integers and plain decimals
/// JSON carries.
fn number_key(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => {
            format!("{}", f as i64)
        }
        _ => n.to_string(),
    }
}

/// A path's segments (1.x: `\.` is a dot; 2.x: also `\\` is a backslash).
fn parse_path(path: &str, v2: bool) -> Result<Vec<String>, Refusal> {
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') || (v2 && chars.peek() == Some(&'\\')) => {
                current.extend(chars.next());
            }
            '.' => segments.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
        if segments.len() > MAX_PATH_SEGMENTS {
            return Err(Refusal::Malformed(format!(
                "an annotation path of more than {MAX_PATH_SEGMENTS} segments"
            )));
        }
    }
    segments.push(current);
    Ok(segments)
}

/// The node at `segments` under `node`.
fn resolve<'n>(
    mut node: &'n mut Node,
    segments: &[String],
    v2: bool,
    path: &str,
) -> Result<&'n mut Node, Refusal> {
    let nowhere = || Refusal::Malformed(format!("the annotation path {path:?} leads nowhere"));
    let mut i = 0;
    while i < segments.len() {
        node = match node {
            Node::Array(items) => {
                let index = segments[i]
                    .parse::<usize>()
                    .ok()
                    .filter(|_| segments[i].bytes().all(|b| b.is_ascii_digit()));
                i += 1;
                index.and_then(|k| items.get_mut(k)).ok_or_else(nowhere)?
            }
            Node::Object(fields) => {
                let mut key = segments[i].clone();
                i += 1;
                // 1.x leaves dots in a last key unescaped: join segments until one is a key.
                if !v2 && !fields.contains_key(&key) {
                    let mut joined = key.clone();
                    for (j, more) in segments.iter().enumerate().skip(i) {
                        joined.push('.');
                        joined.push_str(more);
                        if fields.contains_key(&joined) {
                            key = joined;
                            i = j + 1;
                            break;
                        }
                    }
                }
                fields.get_mut(&key).ok_or_else(nowhere)?
            }
            _ => return Err(nowhere()),
        };
    }
    Ok(node)
}

/// Refuses a value that contains itself: a shared path under its representative's own path
/// (SuperJSON writes the back-reference as `null` and restores the cycle from this).
fn refuse_cycles(shared: &Value, v2: bool) -> Result<(), Refusal> {
    let mut groups: Vec<(Vec<String>, &Value)> = Vec::new();
    match shared {
        Value::Null => {}
        Value::Object(by_path) => {
            for (rep, same) in by_path {
                groups.push((parse_path(rep, v2)?, same));
            }
        }
        // The root is shared: `[paths]` or `[paths, {rep: paths}]`.
        Value::Array(parts) => {
            if let Some(root) = parts.first() {
                groups.push((Vec::new(), root));
            }
            if let Some(Value::Object(by_path)) = parts.get(1) {
                for (rep, same) in by_path {
                    groups.push((parse_path(rep, v2)?, same));
                }
            }
        }
        _ => {
            return Err(Refusal::Malformed(
                "referentialEqualities of the wrong shape".into(),
            ))
        }
    }
    for (rep, same) in groups {
        let Value::Array(paths) = same else {
            return Err(Refusal::Malformed(
                "referentialEqualities of the wrong shape".into(),
            ));
        };
        for path in paths.iter().filter_map(Value::as_str) {
            if parse_path(path, v2)?.starts_with(&rep) {
                return Err(Refusal::Recursive(path.to_owned()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(json: Value, meta: Value) -> String {
        json!({"json": json, "meta": meta, "__dbos_serializer": "superjson"}).to_string()
    }

    #[test]
    fn paths_read_by_version() {
        assert_eq!(parse_path("a.b", false).unwrap(), ["a", "b"]);
        assert_eq!(parse_path(r"a\.b.c", false).unwrap(), ["a.b", "c"]);
        assert_eq!(parse_path(r"a\\b", false).unwrap(), [r"a\\b"]);
        assert_eq!(parse_path(r"a\\b", true).unwrap(), [r"a\b"]);
        assert_eq!(parse_path(r"x\\\.y", true).unwrap(), [r"x\.y"]);
        let long = vec!["a"; MAX_PATH_SEGMENTS + 2].join(".");
        assert!(parse_path(&long, false).is_err());
    }

    #[test]
    fn annotated_values_become_plain_json() {
        let text = stored(
            json!({"m": [["k", null], [2, "x"], [1.0, "y"]], "u": null, "z": "-0"}),
            json!({"values": {"m": ["map", {"0.1": ["undefined"]}], "u": ["undefined"],
                              "z": ["number"]}}),
        );
        let v = decode_value(&text).unwrap();
        assert_eq!(v, json!({"m": {"2": "x", "1": "y"}, "z": -0.0}));
        assert!(v["z"].as_f64().unwrap().is_sign_negative());
    }

    #[test]
    fn refusals_are_typed() {
        let bool_key = stored(json!([[true, 1]]), json!({"values": ["map"]}));
        assert_eq!(
            decode_value(&bool_key),
            Err(Refusal::UnsupportedKey("boolean".into()))
        );
        let symbol = stored(json!("s"), json!({"values": [["symbol", "tag"]]}));
        assert!(matches!(
            decode_value(&symbol),
            Err(Refusal::UnsupportedAnnotation(a)) if a == r#"["symbol","tag"]"#
        ));
        let nowhere = stored(json!({"a": 1}), json!({"values": {"b": ["Date"]}}));
        assert!(matches!(decode_value(&nowhere), Err(Refusal::Malformed(_))));
        assert!(matches!(decode_value("[1]"), Err(Refusal::Malformed(_))));
        assert!(matches!(
            decode_value("{\"json\":1"),
            Err(Refusal::Malformed(_))
        ));
        assert!(decode_inputs(&stored(json!({"a": 1}), Value::Null)).is_err());
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(decode_value(&format!(
            r#"{{"json":{deep},"__dbos_serializer":"superjson"}}"#
        ))
        .is_err());
    }

    #[test]
    fn errors_keep_name_message_and_code() {
        let text = stored(
            json!({"name": "TypeError", "message": "bad", "code": "E1", "stack": "at x"}),
            Value::Null,
        );
        let e = decode_error(&text).unwrap();
        assert_eq!((e.name.as_str(), e.message.as_str()), ("TypeError", "bad"));
        assert_eq!(e.code, Some(json!("E1")));
        let bare = decode_error(&stored(json!("oops"), Value::Null)).unwrap();
        assert_eq!(
            (bare.name.as_str(), bare.message.as_str()),
            ("Error", "\"oops\"")
        );
    }
}

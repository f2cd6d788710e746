//! DBOS Python's default payloads (`serialization = py_pickle`): the base64 text of a pickle,
//! decoded into JSON without running anything.
//!
//! It owns the reading of pickle protocols 2 to 5 for plain data, and the mapping of those
//! values to JSON. It must never import, call or instantiate anything a pickle names (a global
//! is a name, compared against a fixed list), never allocate in proportion to anything but its
//! input and the limits below, and never panic: whatever it cannot read is a typed
//! [`Refusal`] naming the opcode, the `module.name` or the type, never quoting the data.
//!
//! **Framing** (DBOS 3.4, `_serialization.py`): `base64(pickle.dumps(value))`, protocol 4 on
//! Python 3.8-3.13 (5 from 3.14). Inputs are the dict `{"args": tuple, "kwargs": dict}`
//! ([`decode_inputs`]); an error column holds the exception object itself ([`decode_error`]);
//! every other column holds the value ([`decode_value`]).
//!
//! **Mapping** (the rule: what DBOS's own portable serializer writes, extended where it refuses):
//!
//! | Python | JSON |
//! |---|---|
//! | `None`, `bool`, `str` | the same |
//! | `float` | a number; NaN and ±inf are refused (`NonFiniteFloat`), as stead refuses to write them |
//! | `int` | a number within `i64`..=`u64`; beyond, its decimal text (stead's `serde_json` has no arbitrary precision, and a bare big number would be read as a lossy `f64`) |
//! | `bytes`, `bytearray` | an array of numbers 0-255 (what `Vec<u8>` reads; DBOS portable refuses bytes) |
//! | `list`, `tuple`, `set`, `frozenset` | an array, in pickle order |
//! | `dict`, `OrderedDict` | an object; int keys as their decimal text; other keys refused (`UnsupportedKey`) |
//! | `datetime` | RFC 3339 in UTC with `Z`: `.sss`, or `.ssssss` when it has microseconds (DBOS portable truncates to milliseconds); a naive one is read as UTC, as DBOS portable does; fixed offsets are converted; a named zone (`ZoneInfo`, pickled through `builtins.getattr`) is refused |
//! | `date` | `YYYY-MM-DD` |
//! | `Decimal` | `format(d, 'f')` text: `"12.50"`, `"1000"` for `1E+3`, `"NaN"` (as DBOS portable) |
//! | `UUID` | lowercase hyphenated text (DBOS portable refuses UUIDs) |
//! | an exception, in an error column | `{"name": class name, "message": args[0]}` (never instantiated) |
//! | anything else | refused: `UnsupportedGlobal` at the `GLOBAL` naming it, `UnsupportedOpcode`, `UnsupportedValue` |
//!
//! **Limits.** A value that contains itself is refused (`Recursive`); nesting past
//! [`MAX_DEPTH`] is refused (`TooDeep`); shared references are copied into the JSON, so the
//! conversion counts what it produces and refuses past [`MAX_NODES`] values or [`MAX_TEXT_BYTES`]
//! of text (`TooLarge`: 270 bytes of pickle can name 2^40 values); copies made while decoding
//! (a set built from a memoized list, a call's arguments) count against the same bound. An int
//! is at most 4,300 digits and a Decimal's text 4,300 characters, Python's own limit for an
//! int's text.
//!
//! **Why our own decoder, not `serde-pickle`.** serde-pickle 1.2 never executes anything, but
//! it cannot refuse what it does not know by name: an unknown global's name is dropped (the
//! error cannot say `posix.system`), `NEWOBJ`+`BUILD` of any class silently yields its state
//! (`Point(1, 2)` reads as `{"x":1,"y":2}`, so a class instance cannot be refused), it has no
//! hook for datetime, Decimal or UUID, it fails on `OrderedDict`, on ints past `i64` and on a
//! legitimately shared dict (`{'x': d, 'y': [d, d]}`: "recursive structure found"), and it
//! bounds no expansion of shared references. The opcode set DBOS apps use is small (about fifty
//! opcodes, a dozen globals); this module is that set and nothing else, with no dependency.

mod machine;
mod types;

use serde_json::{Map, Number, Value};

use self::machine::{Machine, Obj, Py};
use crate::error::{PortableError, Refusal};

/// The most JSON values a payload may expand to once shared references are copied.
pub(crate) const MAX_NODES: usize = 1 << 21;
/// The most bytes of text (strings and keys) a payload may expand to.
pub(crate) const MAX_TEXT_BYTES: usize = 64 << 20;
/// The deepest nesting read.
pub(crate) const MAX_DEPTH: usize = 200;

/// A value column (outputs, messages, events, stream values, step outputs).
pub(crate) fn decode_value(text: &str) -> Result<Value, Refusal> {
    let data = unwrap(text)?;
    let mut machine = Machine::new(&data, false);
    let top = machine.run()?;
    Convert::new(&machine.arena).value(&top, 0)
}

/// Workflow inputs, `{"args": tuple, "kwargs": dict}`: the positional and the named arguments.
pub(crate) fn decode_inputs(text: &str) -> Result<(Vec<Value>, Map<String, Value>), Refusal> {
    let data = unwrap(text)?;
    let mut machine = Machine::new(&data, false);
    let top = machine.run()?;
    let arena = &machine.arena;
    let not_inputs = || Refusal::UnsupportedValue("inputs that are not {'args', 'kwargs'}".into());
    let Py::Obj(i) = top else {
        return Err(not_inputs());
    };
    let Obj::Dict(fields) = &arena[i] else {
        return Err(not_inputs());
    };
    let field = |name: &str| {
        fields
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Py::Str(k) if &**k == name))
            .map(|(_, v)| v)
    };
    let mut convert = Convert::new(arena);
    let args = match field("args") {
        None => Vec::new(),
        Some(Py::Obj(i)) => match &arena[*i] {
            Obj::Tuple(items) | Obj::List(items) => items
                .iter()
                .map(|v| convert.value(v, 1))
                .collect::<Result<_, _>>()?,
            _ => return Err(not_inputs()),
        },
        Some(_) => return Err(not_inputs()),
    };
    let kwargs = match field("kwargs") {
        None => Map::new(),
        Some(v @ Py::Obj(i)) if matches!(arena[*i], Obj::Dict(_)) => match convert.value(v, 0)? {
            Value::Object(m) => m,
            _ => return Err(not_inputs()),
        },
        Some(_) => return Err(not_inputs()),
    };
    Ok((args, kwargs))
}

/// An error column: the pickled exception as `{name, message}`. Only the class's name is read
/// (`builtins.ValueError` is `ValueError`, an app's `__main__.AppError` is `AppError`); the
/// message is its first argument when that is text, else its arguments as JSON.
pub(crate) fn decode_error(text: &str) -> Result<PortableError, Refusal> {
    let data = unwrap(text)?;
    let mut machine = Machine::new(&data, true);
    let top = machine.run()?;
    let exception = match top {
        Py::Obj(i) => match &machine.arena[i] {
            Obj::Exception { name, args } => Some((name, args)),
            _ => None,
        },
        _ => None,
    };
    let Some((name, args)) = exception else {
        return Err(Refusal::UnsupportedValue(
            "an error that is not an exception".into(),
        ));
    };
    let mut convert = Convert::new(&machine.arena);
    let message = match args.as_slice() {
        [] => String::new(),
        [Py::Str(s)] => s.to_string(),
        [one] => match convert.value(one, 1) {
            Ok(Value::String(s)) => s,
            Ok(v) => v.to_string(),
            Err(e) => format!("(its argument was not decoded: {e})"),
        },
        many => match many.iter().map(|v| convert.value(v, 1)).collect() {
            Ok(values) => Value::Array(values).to_string(),
            Err(e) => format!("(its arguments were not decoded: {e})"),
        },
    };
    Ok(PortableError::new(name.clone(), message))
}

/// Base64 text's bytes, for tests that mutate pickles.
#[cfg(test)]
pub(crate) fn test_base64(text: &str) -> Vec<u8> {
    types::base64(text).expect("base64")
}

/// Base64 text of `bytes` (padded, as Python writes it), for tests that build pickles.
#[cfg(test)]
pub(crate) fn test_encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The pickle bytes of a column's text: base64 of protocol 2 to 5.
fn unwrap(text: &str) -> Result<Vec<u8>, Refusal> {
    let data = types::base64(text)?;
    match data.as_slice() {
        [0x80, 2..=5, ..] => Ok(data),
        _ => Err(Refusal::UnsupportedProtocol),
    }
}

/// Decoded values to JSON, counting what shared references expand to.
struct Convert<'m> {
    arena: &'m [Obj],
    nodes: usize,
    text: usize,
    /// Containers being converted (a value inside itself is refused).
    active: Vec<bool>,
}

impl<'m> Convert<'m> {
    fn new(arena: &'m [Obj]) -> Convert<'m> {
        Convert {
            arena,
            nodes: 0,
            text: 0,
            active: vec![false; arena.len()],
        }
    }

    fn count(&mut self, nodes: usize, text: usize) -> Result<(), Refusal> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.text = self.text.saturating_add(text);
        if self.nodes > MAX_NODES {
            return Err(Refusal::TooLarge(format!(
                "more than {MAX_NODES} values once shared references are copied"
            )));
        }
        if self.text > MAX_TEXT_BYTES {
            return Err(Refusal::TooLarge(format!(
                "more than {MAX_TEXT_BYTES} bytes of text once shared references are copied"
            )));
        }
        Ok(())
    }

    fn value(&mut self, v: &Py, depth: usize) -> Result<Value, Refusal> {
        if depth > MAX_DEPTH {
            return Err(Refusal::TooDeep(MAX_DEPTH));
        }
        self.count(1, 0)?;
        Ok(match v {
            Py::None => Value::Null,
            Py::Bool(b) => Value::Bool(*b),
            Py::Int(n) => n.to_json(),
            Py::Float(f) => match Number::from_f64(*f) {
                Some(n) => Value::Number(n),
                None => return Err(Refusal::NonFiniteFloat(python_float(*f).into())),
            },
            Py::Str(s) => {
                self.count(0, s.len())?;
                Value::String(s.to_string())
            }
            Py::Text(_, s) => {
                self.count(0, s.len())?;
                Value::String(s.to_string())
            }
            Py::Bytes(b) => {
                self.count(b.len(), 0)?;
                Value::Array(b.iter().map(|&x| Value::from(x)).collect())
            }
            Py::Global(g) => {
                return Err(Refusal::UnsupportedValue(format!(
                    "the class or function {}.{} itself",
                    g.module, g.name
                )))
            }
            Py::Timedelta(_) => return Err(Refusal::UnsupportedValue("a timedelta".into())),
            Py::Tz(_) => return Err(Refusal::UnsupportedValue("a timezone".into())),
            Py::Obj(i) => self.object(*i, depth)?,
        })
    }

    fn object(&mut self, i: usize, depth: usize) -> Result<Value, Refusal> {
        let arena = self.arena;
        if std::mem::replace(&mut self.active[i], true) {
            return Err(Refusal::Recursive("a pickled container".into()));
        }
        let out = match &arena[i] {
            Obj::List(items) | Obj::Tuple(items) | Obj::Set(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.value(v, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Obj::Dict(pairs) => {
                let mut map = Map::new();
                for (k, v) in pairs {
                    let key = self.key(k)?;
                    self.count(0, key.len())?;
                    let value = self.value(v, depth + 1)?;
                    map.insert(key, value);
                }
                Value::Object(map)
            }
            Obj::Text(_, s) => {
                self.count(0, s.len())?;
                Value::String(s.to_string())
            }
            Obj::NewUuid => {
                return Err(Refusal::UnsupportedValue(
                    "a uuid.UUID without its state".into(),
                ))
            }
            Obj::Exception { name, .. } => {
                return Err(Refusal::UnsupportedValue(format!(
                    "an exception ({name}) as a value"
                )))
            }
        };
        self.active[i] = false;
        Ok(out)
    }

    /// A dict key as JSON's string key: text, or an int's decimal text.
    fn key(&self, k: &Py) -> Result<String, Refusal> {
        let type_name = match k {
            Py::Str(s) => return Ok(s.to_string()),
            Py::Int(n) => return Ok(n.text()),
            Py::None => "NoneType",
            Py::Bool(_) => "bool",
            Py::Float(_) => "float",
            Py::Bytes(_) => "bytes",
            Py::Text(kind, _) => kind.type_name(),
            Py::Obj(i) => match &self.arena[*i] {
                Obj::Tuple(_) => "tuple",
                Obj::Set(_) => "frozenset",
                Obj::Text(kind, _) => kind.type_name(),
                _ => "object",
            },
            Py::Global(_) | Py::Timedelta(_) | Py::Tz(_) => "object",
        };
        Err(Refusal::UnsupportedKey(type_name.into()))
    }
}

/// Python's `repr` of a non-finite float.
fn python_float(f: f64) -> &'static str {
    match f {
        f if f.is_nan() => "nan",
        f if f > 0.0 => "inf",
        _ => "-inf",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Base64 of a protocol 2 pickle: `body` between `PROTO 2` and `STOP`.
    fn pickled(body: &[u8]) -> String {
        let mut bytes = vec![0x80, 2];
        bytes.extend_from_slice(body);
        bytes.push(b'.');
        test_encode_base64(&bytes)
    }

    /// Lists nested `depth` deep: `depth` empty lists, each appended into the one below.
    fn nested(depth: usize) -> String {
        let mut body = vec![b']'; depth];
        body.extend(std::iter::repeat_n(b'a', depth - 1));
        pickled(&body)
    }

    #[test]
    fn nesting_is_read_to_its_limit_and_refused_past_it() {
        let mut deepest = decode_value(&nested(MAX_DEPTH + 1)).unwrap();
        for _ in 0..MAX_DEPTH {
            deepest = deepest.as_array().unwrap()[0].clone();
        }
        assert_eq!(deepest, Value::Array(vec![]));
        assert_eq!(
            decode_value(&nested(MAX_DEPTH + 2)),
            Err(Refusal::TooDeep(MAX_DEPTH))
        );
    }

    #[test]
    fn copies_of_a_memoized_container_are_counted_while_decoding() {
        // A list of 1,000 items, memoized, then `set(list)` built 3,000 times from the memo:
        // 3 million copies from a few kilobytes, stopped while decoding.
        let mut body = vec![b']', b'q', 0, b'('];
        body.extend(std::iter::repeat_n(b'N', 1000));
        body.extend([b'e', b'c']);
        body.extend(b"__builtin__\nset\nq\x01");
        body.extend([b'(']);
        for _ in 0..3000 {
            body.extend([b'h', 1, b'h', 0, 0x85, b'R']);
        }
        body.extend([b'l']);
        let refusal = decode_value(&pickled(&body)).unwrap_err();
        assert!(
            matches!(&refusal, Refusal::TooLarge(why) if why.contains("copied while decoding")),
            "{refusal}"
        );
    }
}

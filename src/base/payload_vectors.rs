//! The decoders of DBOS's default formats against recorded vectors (`tests/data/`): what DBOS
//! Python 3.4 pickles (protocols 2-5) and what DBOS TypeScript 5.3 stores (SuperJSON 1.13, and
//! the 2.x form of each), with the JSON each must read as or the refusal it must meet; then the
//! same vectors mutated, which must only ever decode or be refused, never panic.

use serde_json::Value;

use super::codec::{self, JS_SUPERJSON, PY_PICKLE};
use super::{pickle, superjson};
use crate::error::{Error, PortableError, Refusal};

const PICKLES: &str = include_str!("../../tests/data/pickle.jsonl");
const SUPERJSONS: &str = include_str!("../../tests/data/superjson.jsonl");

/// One vector: its name, the column it was stored in, the stored text, and what it must read as
/// (`json`) or be refused with (`error`: `{kind, detail}`).
struct Vector {
    name: String,
    column: String,
    text: String,
    json: Option<Value>,
    error: Option<(String, String)>,
}

fn vectors(lines: &str, text_field: &str) -> Vec<Vector> {
    lines
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a vector is JSON");
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            let name = match v.get("protocol") {
                Some(p) => format!("{} (protocol {p})", s("name")),
                None => s("name"),
            };
            Vector {
                name,
                column: s("column"),
                text: s(text_field),
                json: v.get("json").cloned(),
                error: v.get("error").map(|e| {
                    let t = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                    (t("kind"), t("detail"))
                }),
            }
        })
        .collect()
}

/// JSON equality with numbers compared by value (the vectors' `0` is a decoded `-0.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64() == y.as_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Whether `refusal` is the vector's expected `(kind, detail)`; details are compared where
/// they name what the payload asked for.
fn refused_as(refusal: &Refusal, (kind, detail): &(String, String)) -> bool {
    match (kind.as_str(), refusal) {
        ("UnsupportedGlobal", Refusal::UnsupportedGlobal { module, name }) => {
            format!("{module} {name}") == *detail
        }
        ("UnsupportedDictKey" | "UnsupportedMapKey", Refusal::UnsupportedKey(k)) => k == detail,
        ("UnsupportedAnnotation", Refusal::UnsupportedAnnotation(a)) => a == detail,
        ("Recursive", Refusal::Recursive(path)) => path == detail,
        ("TooDeepOrRecursive", Refusal::TooDeep(_) | Refusal::Recursive(_)) => true,
        ("TooLarge", Refusal::TooLarge(_)) => true,
        ("NonFiniteFloat", Refusal::NonFiniteFloat(v)) => v == detail,
        ("BadPath" | "NotSuperjson", Refusal::Malformed(_)) => true,
        _ => false,
    }
}

/// Decodes a vector as the codec does for its column: a JSON value, or the refusal.
fn decode(format: &str, v: &Vector) -> Result<Value, Refusal> {
    let refusal = |e: Error| match e {
        Error::PayloadRefused { refusal, .. } => refusal,
        other => panic!("{}: not a refusal: {other}", v.name),
    };
    match v.column.as_str() {
        "inputs" => codec::read_inputs(Some(format), &v.text)
            .map(|inputs| inputs.value)
            .map_err(refusal),
        "error" => {
            let decoded = match format {
                PY_PICKLE => pickle::decode_error(&v.text),
                _ => superjson::decode_error(&v.text),
            };
            let e: PortableError = decoded?;
            assert_eq!(codec::read_error(Some(format), &v.text), e, "{}", v.name);
            Ok(serde_json::to_value(e).expect("an error serializes"))
        }
        _ => codec::read::<Value>(Some(format), Some(&v.text), "a vector").map_err(refusal),
    }
}

fn check_all(format: &str, vectors: &[Vector]) {
    let mut failed = Vec::new();
    for v in vectors {
        match (decode(format, v), &v.json, &v.error) {
            (Ok(got), Some(want), None) if same(&got, want) => {}
            (Err(refusal), _, Some(want)) if refused_as(&refusal, want) => {}
            (got, want, want_error) => failed.push(format!(
                "{}: got {got:?}, want {want:?} / {want_error:?}",
                v.name
            )),
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn every_pickle_vector_reads_as_recorded_and_every_hostile_one_is_refused() {
    let all = vectors(PICKLES, "base64");
    assert_eq!(all.len(), 390);
    assert_eq!(all.iter().filter(|v| v.error.is_some()).count(), 60);
    check_all(PY_PICKLE, &all);
    // -0.0 keeps its sign; a value that only fits as text is text.
    let neg_zero = all
        .iter()
        .find(|v| v.name.starts_with("float_neg_zero"))
        .unwrap();
    let got: Value = codec::read(Some(PY_PICKLE), Some(&neg_zero.text), "v").unwrap();
    assert!(got
        .as_f64()
        .is_some_and(|f| f == 0.0 && f.is_sign_negative()));
}

#[test]
fn every_superjson_vector_reads_as_recorded_in_both_path_dialects() {
    let all = vectors(SUPERJSONS, "stored");
    assert!(all.iter().filter(|v| v.name.ends_with("@v2")).count() > 40);
    check_all(JS_SUPERJSON, &all);
}

#[test]
fn a_refusal_names_what_was_asked_for_and_never_the_data() {
    let all = vectors(PICKLES, "base64");
    let system = all
        .iter()
        .find(|v| v.name == "reduce_os_system (protocol 4)")
        .unwrap();
    let e = codec::read::<Value>(Some(PY_PICKLE), Some(&system.text), "the workflow's input");
    let text = e.unwrap_err().to_string();
    assert_eq!(
        text,
        "cannot decode the workflow's input stored as \"py_pickle\": it names posix.system, \
         which stead never imports or calls"
    );
}

/// A small deterministic generator (no dependency), for the mutations.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

#[test]
fn mutated_pickles_and_superjson_only_ever_decode_or_are_refused() {
    let mut rng = Lcg(46);
    let mut outcomes = [0usize; 2];
    for v in vectors(PICKLES, "base64") {
        let bytes = pickle::test_base64(&v.text);
        for round in 0..20 {
            let mut m = bytes.clone();
            match round % 4 {
                0 => m.truncate(rng.below(m.len())),
                1 => {
                    let i = rng.below(m.len());
                    m[i] = rng.below(256) as u8;
                }
                2 => {
                    let i = rng.below(m.len());
                    m.insert(
                        i,
                        [b'(', b'h', b'R', 0x81, b'b', 0x93, b'e', b'u'][rng.below(8)],
                    );
                }
                _ => {
                    let (i, j) = (rng.below(m.len()), rng.below(m.len()));
                    m.swap(i, j);
                }
            }
            let text = pickle::test_encode_base64(&m);
            for result in [
                pickle::decode_value(&text).map(drop),
                pickle::decode_inputs(&text).map(drop),
                pickle::decode_error(&text).map(drop),
            ] {
                outcomes[usize::from(result.is_err())] += 1;
            }
        }
    }
    for v in vectors(SUPERJSONS, "stored") {
        for _ in 0..20 {
            let mut m: Vec<char> = v.text.chars().collect();
            let i = rng.below(m.len());
            match rng.below(3) {
                0 => m.truncate(i),
                1 => m[i] = ['.', '\\', '"', '[', ']', '{', '}', '0', ','][rng.below(9)],
                _ => m.remove(i).to_string().truncate(0),
            }
            let text: String = m.into_iter().collect();
            for result in [
                superjson::decode_value(&text).map(drop),
                superjson::decode_error(&text).map(drop),
            ] {
                outcomes[usize::from(result.is_err())] += 1;
            }
        }
    }
    // Both outcomes happen: the mutations reach past the first byte.
    assert!(outcomes[0] > 100 && outcomes[1] > 10_000, "{outcomes:?}");
}

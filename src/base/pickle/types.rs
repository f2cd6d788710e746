//! The pickle decoder's plain-data readings: base64, integers of any size, the texts of
//! `datetime`, `date`, `Decimal` and `UUID` values, and the names of the opcodes it refuses.
//! Pure functions, each bounded before it allocates.

use std::fmt::Write;

use chrono::{Duration, NaiveDate, NaiveDateTime};

use crate::error::Refusal;

/// The most bytes of a pickled int: 1,785 bytes are 4,300 decimal digits, Python's own limit
/// for turning an int into text (`sys.get_int_max_str_digits()`).
const MAX_LONG_BYTES: usize = 1785;
/// The longest Decimal text (`format(d, 'f')` of `1E+999999` would be a megabyte).
const MAX_DECIMAL_CHARS: usize = 4300;

fn malformed(why: &str) -> Refusal {
    Refusal::Malformed(why.to_owned())
}

/// Which value a [`Text`](super::machine::Py::Text) holds (for a key's refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TextKind {
    Date,
    DateTime,
    Decimal,
    Uuid,
}

impl TextKind {
    pub(super) fn type_name(self) -> &'static str {
        match self {
            TextKind::Date => "date",
            TextKind::DateTime => "datetime",
            TextKind::Decimal => "Decimal",
            TextKind::Uuid => "UUID",
        }
    }
}

/// A Python int: a magnitude up to 128 bits, or the decimal text of a larger one.
#[derive(Debug, Clone)]
pub(super) enum Int {
    Small { negative: bool, magnitude: u128 },
    Big(std::rc::Rc<str>),
}

impl From<i32> for Int {
    fn from(n: i32) -> Int {
        Int::Small {
            negative: n < 0,
            magnitude: u128::from(n.unsigned_abs()),
        }
    }
}

impl Int {
    /// `LONG1`/`LONG4`'s little-endian two's complement.
    pub(super) fn from_le_signed(bytes: &[u8]) -> Result<Int, Refusal> {
        if bytes.len() > MAX_LONG_BYTES {
            return Err(Refusal::TooLarge(format!(
                "an int of more than {MAX_LONG_BYTES} bytes (4,300 digits, Python's own limit)"
            )));
        }
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut magnitude = bytes.to_vec();
        if negative {
            // Two's complement: invert and add one.
            let mut carry = true;
            for b in &mut magnitude {
                *b = !*b;
                if carry {
                    let (sum, overflow) = b.overflowing_add(1);
                    *b = sum;
                    carry = overflow;
                }
            }
        }
        while magnitude.last() == Some(&0) {
            magnitude.pop();
        }
        if magnitude.len() <= 16 {
            let mut buf = [0u8; 16];
            buf[..magnitude.len()].copy_from_slice(&magnitude);
            return Ok(Int::Small {
                negative,
                magnitude: u128::from_le_bytes(buf),
            });
        }
        let sign = if negative { "-" } else { "" };
        Ok(Int::Big(
            format!("{sign}{}", decimal_digits(&magnitude)).into(),
        ))
    }

    /// The value when it is a non-negative int of 128 bits at most.
    pub(super) fn to_u128(&self) -> Option<u128> {
        match self {
            Int::Small {
                negative: false,
                magnitude,
            } => Some(*magnitude),
            _ => None,
        }
    }

    /// The value when it fits an `i64`.
    pub(super) fn to_i64(&self) -> Option<i64> {
        match self {
            Int::Small {
                negative,
                magnitude,
            } => {
                let m = i128::try_from(*magnitude).ok()?;
                i64::try_from(if *negative { -m } else { m }).ok()
            }
            Int::Big(_) => None,
        }
    }

    /// A JSON number within `i64`..=`u64`, else the decimal text.
    pub(super) fn to_json(&self) -> serde_json::Value {
        if let Some(n) = self.to_i64() {
            return n.into();
        }
        if let Some(n) = self.to_u128().and_then(|n| u64::try_from(n).ok()) {
            return n.into();
        }
        serde_json::Value::String(self.text())
    }

    /// The decimal text (Python's `str(n)`).
    pub(super) fn text(&self) -> String {
        match self {
            Int::Small {
                negative,
                magnitude,
            } => format!("{}{magnitude}", if *negative { "-" } else { "" }),
            Int::Big(text) => text.to_string(),
        }
    }
}

/// Decimal digits of a little-endian magnitude (no leading zeros; "0" for none).
fn decimal_digits(le: &[u8]) -> String {
    // Base 2^32 limbs, most significant first, divided by 10^9 until nothing is left.
    let mut limbs: Vec<u32> = le
        .chunks(4)
        .rev()
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect();
    let mut groups = Vec::new();
    loop {
        let first = limbs.iter().position(|&l| l != 0).unwrap_or(limbs.len());
        limbs.drain(..first);
        if limbs.is_empty() {
            break;
        }
        let mut rem = 0u64;
        for limb in &mut limbs {
            let cur = (rem << 32) | u64::from(*limb);
            *limb = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        groups.push(rem as u32);
    }
    let mut out = groups.last().map_or("0".to_owned(), u32::to_string);
    for g in groups.iter().rev().skip(1) {
        let _ = write!(out, "{g:09}");
    }
    out
}

/// Strict base64 (standard alphabet, padded), as Python's `base64.b64encode` writes it.
pub(super) fn base64(text: &str) -> Result<Vec<u8>, Refusal> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(malformed("not base64 (its length is not a multiple of 4)"));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (i, quad) in bytes.chunks(4).enumerate() {
        let mut n = 0u32;
        let mut pad = 0;
        for (j, &c) in quad.iter().enumerate() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' if i + 1 == quads && j >= 2 => {
                    pad += 1;
                    0
                }
                _ => return Err(malformed("not base64")),
            };
            if pad > 0 && c != b'=' {
                return Err(malformed("not base64 (data after padding)"));
            }
            n = (n << 6) | u32::from(v);
        }
        let [_, a, b, c] = n.to_be_bytes();
        out.extend_from_slice(&[a, b, c][..3 - pad]);
    }
    Ok(out)
}

/// Protocol 2's bytes: the code points of a str, each below 256.
pub(super) fn latin1(s: &str) -> Result<Vec<u8>, Refusal> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| malformed("latin-1 text past U+00FF")))
        .collect()
}

/// `timedelta(days, seconds, microseconds)` in microseconds.
pub(super) fn timedelta(days: &Int, secs: &Int, micros: &Int) -> Result<i128, Refusal> {
    let (Some(d), Some(s), Some(us)) = (days.to_i64(), secs.to_i64(), micros.to_i64()) else {
        return Err(malformed("a timedelta out of range"));
    };
    Ok(i128::from(d) * 86_400_000_000 + i128::from(s) * 1_000_000 + i128::from(us))
}

/// A `timezone`'s offset: strictly within a day, as Python requires.
pub(super) fn utc_offset(micros: i128) -> Result<i64, Refusal> {
    const DAY: i128 = 86_400_000_000;
    if micros <= -DAY || micros >= DAY {
        return Err(malformed("a time zone offset of a day or more"));
    }
    i64::try_from(micros).map_err(|_| malformed("a time zone offset out of range"))
}

/// `date`'s pickled state (`yy yy mm dd`) as `YYYY-MM-DD`.
pub(super) fn date_text(state: &[u8]) -> Result<String, Refusal> {
    let [y1, y2, m, d] = state else {
        return Err(malformed("a date state that is not 4 bytes"));
    };
    let date = NaiveDate::from_ymd_opt(
        i32::from(*y1) * 256 + i32::from(*y2),
        (*m).into(),
        (*d).into(),
    )
    .ok_or_else(|| malformed("a date out of range"))?;
    Ok(date.format("%Y-%m-%d").to_string())
}

/// `datetime`'s pickled state (`yy yy mm dd HH MM SS us us us`, the hour's top bit being
/// `fold`) at UTC offset `offset` (microseconds; 0 for a naive one, read as UTC), as RFC 3339
/// UTC text: milliseconds, or microseconds when there are any.
pub(super) fn datetime_text(state: &[u8], offset: i64) -> Result<String, Refusal> {
    let [y1, y2, mo, d, h, mi, s, u1, u2, u3] = state else {
        return Err(malformed("a datetime state that is not 10 bytes"));
    };
    let micros = u32::from(*u1) << 16 | u32::from(*u2) << 8 | u32::from(*u3);
    let local: NaiveDateTime = NaiveDate::from_ymd_opt(
        i32::from(*y1) * 256 + i32::from(*y2),
        (*mo).into(),
        (*d).into(),
    )
    .and_then(|date| date.and_hms_micro_opt((h & 0x7f).into(), (*mi).into(), (*s).into(), micros))
    .ok_or_else(|| malformed("a datetime out of range"))?;
    let utc = local
        .checked_sub_signed(Duration::microseconds(offset))
        .filter(|t| (1..=9999).contains(&chrono::Datelike::year(t)))
        .ok_or_else(|| Refusal::UnsupportedValue("a datetime out of range in UTC".into()))?;
    let fraction = match micros % 1000 {
        0 => "%.3f",
        _ => "%.6f",
    };
    Ok(utc
        .format(&format!("%Y-%m-%dT%H:%M:%S{fraction}Z"))
        .to_string())
}

/// A UUID's 128-bit int as lowercase hyphenated text.
pub(super) fn uuid_text(n: u128) -> String {
    uuid::Uuid::from_u128(n).hyphenated().to_string()
}

/// `Decimal(text)` as `format(d, 'f')` writes it (what DBOS's portable serializer stores):
/// `1E+3` is `1000`, `1.5E-7` is `0.00000015`, `NaN` and `-Infinity` stay as they are.
pub(super) fn decimal_text(text: &str) -> Result<String, Refusal> {
    let (sign, body) = match text.as_bytes().first() {
        Some(b'-') => ("-", &text[1..]),
        Some(b'+') => ("", &text[1..]),
        _ => ("", text),
    };
    let lower = body.to_ascii_lowercase();
    if let Some(payload) = lower
        .strip_prefix("snan")
        .or_else(|| lower.strip_prefix("nan"))
    {
        if !payload.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed("a Decimal that is not a number"));
        }
        let name = if lower.starts_with('s') {
            "sNaN"
        } else {
            "NaN"
        };
        return Ok(format!("{sign}{name}"));
    }
    if lower == "inf" || lower == "infinity" {
        return Ok(format!("{sign}Infinity"));
    }
    let (mantissa, exp) = match lower.split_once('e') {
        Some((m, e)) => (
            m,
            e.parse::<i64>()
                .map_err(|_| malformed("a Decimal with a bad exponent"))?,
        ),
        None => (lower.as_str(), 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int_part}{frac_part}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("a Decimal that is not a number"));
    }
    let too_large =
        || Refusal::TooLarge(format!("a Decimal of more than {MAX_DECIMAL_CHARS} digits"));
    let len = i64::try_from(digits.len()).map_err(|_| too_large())?;
    let frac_len = i64::try_from(frac_part.len()).map_err(|_| too_large())?;
    if digits.bytes().all(|b| b == b'0') {
        let scale = frac_len.saturating_sub(exp);
        if scale > MAX_DECIMAL_CHARS as i64 {
            return Err(too_large());
        }
        return Ok(match scale {
            s if s <= 0 => format!("{sign}0"),
            s => format!("{sign}0.{}", "0".repeat(s as usize)),
        });
    }
    // Where the decimal point falls in `digits`.
    let point = (len - frac_len).saturating_add(exp);
    let width = point.unsigned_abs().max(digits.len() as u64);
    if width > MAX_DECIMAL_CHARS as u64 {
        return Err(too_large());
    }
    let out = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point >= len {
        format!("{digits}{}", "0".repeat((point - len) as usize))
    } else {
        let (i, f) = digits.split_at(point as usize);
        format!("{i}.{f}")
    };
    let (int_text, rest) = match out.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (out.as_str(), None),
    };
    let int_text = match int_text.trim_start_matches('0') {
        "" => "0",
        trimmed => trimmed,
    };
    Ok(match rest {
        Some(f) => format!("{sign}{int_text}.{f}"),
        None => format!("{sign}{int_text}"),
    })
}

/// The name of an opcode stead does not decode.
pub(super) fn opcode_name(op: u8) -> String {
    let name = match op {
        b'i' => "INST",
        b'o' => "OBJ",
        0x92 => "NEWOBJ_EX",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'p' => "PUT",
        b'g' => "GET",
        _ => return format!("0x{op:02x}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_of_any_size_read_as_python_writes_them() {
        let int = |bytes: &[u8]| Int::from_le_signed(bytes).unwrap();
        assert_eq!(int(&[]).to_json(), 0);
        assert_eq!(int(&[0xff]).to_json(), -1);
        assert_eq!(int(&[0x00, 0x80]).to_json(), -32768);
        assert_eq!(int(&[0xff; 8]).to_json(), -1);
        let u64_max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00];
        assert_eq!(int(&u64_max).to_json(), u64::MAX);
        let mut two_pow_64 = [0u8; 9];
        two_pow_64[8] = 1;
        assert_eq!(int(&two_pow_64).to_json(), "18446744073709551616");
        let mut big = vec![0u8; 30];
        big.push(1); // 2^240
        assert_eq!(
            int(&big).text(),
            "1766847064778384329583297500742918515827483896875618958121606201292619776"
        );
        let mut neg_big = vec![0u8; 30];
        neg_big.push(0xff); // -2^240
        assert_eq!(
            int(&neg_big).text(),
            "-1766847064778384329583297500742918515827483896875618958121606201292619776"
        );
        assert!(matches!(
            Int::from_le_signed(&vec![1; MAX_LONG_BYTES + 1]),
            Err(Refusal::TooLarge(_))
        ));
    }

    #[test]
    fn base64_is_strict() {
        assert_eq!(base64("gAJOLg==").unwrap(), b"\x80\x02N.");
        assert_eq!(base64("YWJj").unwrap(), b"abc");
        assert_eq!(base64("YWI=").unwrap(), b"ab");
        assert_eq!(base64("").unwrap(), b"");
        for bad in [
            "gAJOLg=",
            "gA=OLg==",
            "gAJO Lg=",
            "YW==YWJj",
            "Y===",
            "{\"a\":1}",
        ] {
            assert!(matches!(base64(bad), Err(Refusal::Malformed(_))), "{bad}");
        }
    }

    #[test]
    fn decimals_read_as_format_f_writes_them() {
        for (text, want) in [
            ("12.50", "12.50"),
            ("-0.001", "-0.001"),
            ("1E+3", "1000"),
            ("1.5E-7", "0.00000015"),
            ("1.20E+1", "12.0"),
            ("0E-8", "0.00000000"),
            ("-0", "-0"),
            ("0E+2", "0"),
            ("NaN", "NaN"),
            ("-sNaN", "-sNaN"),
            ("-Infinity", "-Infinity"),
            ("007.5", "7.5"),
        ] {
            assert_eq!(decimal_text(text).unwrap(), want, "{text}");
        }
        assert!(matches!(
            decimal_text("1E+999999999"),
            Err(Refusal::TooLarge(_))
        ));
        assert!(matches!(
            decimal_text("1E-999999999"),
            Err(Refusal::TooLarge(_))
        ));
        assert!(matches!(
            decimal_text("1E+99999999999999999999"),
            Err(Refusal::Malformed(_))
        ));
        assert!(matches!(decimal_text("12x"), Err(Refusal::Malformed(_))));
    }

    #[test]
    fn datetimes_read_as_utc_text() {
        let state = [0x07, 0xe9, 6, 15, 10, 30, 0, 0x01, 0xe2, 0x40]; // 123456 µs
        assert_eq!(
            datetime_text(&state, 0).unwrap(),
            "2025-06-15T10:30:00.123456Z"
        );
        let whole = [0x07, 0xe9, 6, 15, 10 | 0x80, 30, 0, 0, 0, 0]; // fold set
        assert_eq!(
            datetime_text(&whole, 2 * 3_600_000_000).unwrap(),
            "2025-06-15T08:30:00.000Z"
        );
        let min = [0, 1, 1, 1, 0, 0, 0, 0, 0, 0];
        assert!(datetime_text(&min, 3_600_000_000).is_err(), "year 0 in UTC");
        assert!(datetime_text(&[0x07, 0xe9, 13, 1, 0, 0, 0, 0, 0, 0], 0).is_err());
        assert_eq!(date_text(&[0x07, 0xe9, 6, 15]).unwrap(), "2025-06-15");
        assert_eq!(uuid_text(u128::MAX), "ffffffff-ffff-ffff-ffff-ffffffffffff");
    }
}

//! SQL text, scanned: where its string literals, quoted identifiers, comments and
//! dollar-quoted bodies lie, so that placeholders are substituted (an inline statement,
//! `exec.rs`) and scripts split (a migration run statement by statement, on Citus) only in code.
//! It never changes a byte of text it does not own: it splices only the values it is given.

/// `sql` with each `$n` replaced by `args[n - 1]` in parentheses. Placeholders inside string
/// literals, quoted identifiers, comments and dollar-quoted strings are text, not parameters.
pub(crate) fn inline(sql: &str, args: &[String]) -> Result<String, sqlx::Error> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + args.iter().map(String::len).sum::<usize>());
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        if let Some(next) = past_text(sql, i) {
            i = next;
            continue;
        }
        let placeholder = bytes[i] == b'$'
            && !ident_at(bytes, i)
            && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
        if !placeholder {
            i += 1;
            continue;
        }
        let end = (i + 1..bytes.len())
            .find(|&j| !bytes[j].is_ascii_digit())
            .unwrap_or(bytes.len());
        let n: usize = sql[i + 1..end]
            .parse()
            .map_err(|_| protocol(format!("placeholder {} is out of range", &sql[i..end])))?;
        let arg = n
            .checked_sub(1)
            .and_then(|k| args.get(k))
            .ok_or_else(|| protocol(format!("no value bound for ${n}")))?;
        out.push_str(&sql[copied..i]);
        out.push('(');
        out.push_str(arg);
        out.push(')');
        copied = end;
        i = end;
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// `script`'s statements, one by one: split at semicolons outside quotes, dollar quotes and
/// comments; empty ones (blank or only comments) dropped.
pub(crate) fn statements(script: &str) -> Vec<&str> {
    let (mut out, mut start, mut i) = (Vec::new(), 0, 0);
    while i < script.len() {
        if let Some(next) = past_text(script, i) {
            i = next;
        } else if script.as_bytes()[i] == b';' {
            out.push(&script[start..i]);
            i += 1;
            start = i;
        } else {
            i += 1;
        }
    }
    out.push(&script[start..]);
    out.into_iter()
        .filter(|s| {
            s.lines()
                .any(|l| !l.trim().is_empty() && !l.trim().starts_with("--"))
        })
        .collect()
}

/// If a string literal, quoted identifier, comment or dollar-quoted string opens at `i`, the
/// index just past it. A `$` that continues an identifier (`a$1`) or opens a placeholder (`$1`)
/// opens none.
fn past_text(sql: &str, i: usize) -> Option<usize> {
    let bytes = sql.as_bytes();
    let next = bytes.get(i + 1).copied();
    match bytes[i] {
        b'\'' => {
            let escapes = i > 0 && matches!(bytes[i - 1], b'E' | b'e') && !ident_at(bytes, i - 1);
            Some(skip_quoted(bytes, i, b'\'', escapes))
        }
        b'"' => Some(skip_quoted(bytes, i, b'"', false)),
        b'-' if next == Some(b'-') => Some(sql[i..].find('\n').map_or(bytes.len(), |n| i + n + 1)),
        b'/' if next == Some(b'*') => Some(skip_block_comment(bytes, i)),
        b'$' if ident_at(bytes, i) || next.is_some_and(|b| b.is_ascii_digit()) => None,
        b'$' => Some(skip_dollar_quoted(sql, i)).filter(|&end| end > i + 1),
        _ => None,
    }
}

fn protocol(message: String) -> sqlx::Error {
    sqlx::Error::InvalidArgument(message)
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Whether the byte at `i` continues an identifier begun before it (so an `E` there is not the
/// escape-string prefix, and a `$` not a dollar quote).
fn ident_at(bytes: &[u8], i: usize) -> bool {
    i > 0 && is_ident_byte(bytes[i - 1])
}

/// The index after the quoted text opening at `start` (`''`/`""` doubled quotes stay inside;
/// with `escapes`, a backslash escapes the next byte).
fn skip_quoted(bytes: &[u8], start: usize, quote: u8, escapes: bool) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if escapes => i += 2,
            b if b == quote => {
                if bytes.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return i + 1;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The index after the (nestable) block comment opening at `start`.
fn skip_block_comment(bytes: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0usize, start);
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The index after the dollar-quoted string opening at `start` (`$$…$$`, `$tag$…$tag$`); a `$`
/// that opens none is one byte of text.
fn skip_dollar_quoted(sql: &str, start: usize) -> usize {
    let rest = &sql[start + 1..];
    let tag_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b >= 0x80)
        .count();
    if rest.as_bytes().get(tag_len) != Some(&b'$') {
        return start + 1;
    }
    let delimiter = &sql[start..start + tag_len + 2];
    let body = start + delimiter.len();
    match sql[body..].find(delimiter) {
        Some(n) => body + n + delimiter.len(),
        None => sql.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_outside_quotes_and_comments() {
        let args: Vec<String> = (1..=10).map(|n| format!("v{n}")).collect();
        assert_eq!(
            inline("SELECT $1, $10, $2::text[]", &args).unwrap(),
            "SELECT (v1), (v10), (v2)::text[]"
        );
        assert_eq!(
            inline(
                "SELECT '$1', E'\\'$1', \"$1\", $$ $1 $$, $t$ $1 $t$ -- $1\n, /* $1 /* $1 */ */ $3",
                &args
            )
            .unwrap(),
            "SELECT '$1', E'\\'$1', \"$1\", $$ $1 $$, $t$ $1 $t$ -- $1\n, /* $1 /* $1 */ */ (v3)"
        );
        assert_eq!(
            inline("SELECT a$1 FROM t", &args).unwrap(),
            "SELECT a$1 FROM t"
        );
        assert_eq!(
            inline("SELECT 'it''s $1'", &args).unwrap(),
            "SELECT 'it''s $1'"
        );
        assert!(inline("SELECT $11", &args).is_err());
        assert!(inline("SELECT $0", &args).is_err());
    }

    #[test]
    fn a_script_splits_at_semicolons_outside_quotes_and_bodies() {
        let script = "CREATE TABLE a (x text DEFAULT ';');\n-- a comment; still one\n\
                      CREATE FUNCTION f() RETURNS int AS $fn$ BEGIN RETURN 1; END $fn$ LANGUAGE plpgsql;\n\
                      DO $$ BEGIN PERFORM 1; END $$;\n/* block; */ SELECT \"a;b\" FROM t;\n";
        let got: Vec<String> = statements(script)
            .iter()
            .map(|s| s.trim().to_owned())
            .collect();
        assert_eq!(got.len(), 4, "{got:#?}");
        assert!(got[0].starts_with("CREATE TABLE a") && got[0].ends_with("';')"));
        assert!(
            got[1].contains("RETURN 1; END $fn$ LANGUAGE plpgsql"),
            "{}",
            got[1]
        );
        assert!(got[2].starts_with("DO $$"));
        assert!(got[3].ends_with("FROM t"));
    }

    #[test]
    fn the_real_scripts_split_into_whole_statements() {
        let script = super::super::migrate::SCRIPT.replace("{s}", "\"dbos\"");
        for statement in statements(&script) {
            let s = statement.trim_start();
            let balanced =
                s.matches("$fn$").count() % 2 == 0 && s.matches("$mig$").count() % 2 == 0;
            assert!(balanced, "a statement cut inside a body: {s}");
        }
    }
}

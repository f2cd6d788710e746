//! How a statement travels: prepared (the default: named, cached per connection, parameters
//! bound in binary), or inline, for a transaction pooler (`pooler=transaction`): sent with the
//! simple query protocol, its parameters rendered as typed literals, in one round trip and with no
//! prepared statement at all (as pgx's `QueryExecModeSimpleProtocol`). A transaction pooler
//! gives each transaction whichever server connection is free, where a prepared statement of
//! another may or may not exist. Once warm, an inline statement is sent as a call of its stored
//! routine instead (`routines.rs`), which the server plans once per connection.
//!
//! It owns the literal rendering and the placeholder substitution; it must never render a value
//! whose type it does not know (each bindable type implements [`Lit`]), and never splice text
//! that did not come from a statement template or a literal it rendered.

use std::fmt::Write as _;
use std::sync::Arc;

use futures::TryStreamExt;
use sqlx::postgres::{PgQueryResult, PgRow};
use sqlx::{AssertSqlSafe, Executor, Postgres, Row, SqlStr};

use super::routines::{ParamType, Routines};
use super::sql::PgQuery;

/// One statement with its parameters.
pub(crate) enum Stmt<'q> {
    Prepared(PgQuery<'q>),
    Inline(Inline),
}

/// An inline statement: its text, its literals (untyped) and their types, and the routines that
/// may carry it instead (`routines.rs`).
pub(crate) struct Inline {
    sql: SqlStr,
    args: Vec<String>,
    params: Vec<ParamType>,
    routines: Arc<Routines>,
}

impl<'q> Stmt<'q> {
    /// `sql`, prepared, or inline (carried by `routines` once they hold it).
    pub(super) fn new(sql: SqlStr, inline: Option<&Arc<Routines>>) -> Stmt<'q> {
        match inline {
            Some(routines) => Stmt::Inline(Inline {
                sql,
                args: Vec::new(),
                params: Vec::new(),
                routines: routines.clone(),
            }),
            None => Stmt::Prepared(sqlx::query(sql)),
        }
    }

    /// Binds the next parameter (`$1`, `$2`, … in order).
    pub(crate) fn bind<T>(self, value: T) -> Stmt<'q>
    where
        T: 'q + sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send + Lit,
    {
        match self {
            Stmt::Prepared(q) => Stmt::Prepared(q.bind(value)),
            Stmt::Inline(mut inline) => {
                let mut lit = String::new();
                value.value(&mut lit);
                inline.args.push(lit);
                inline.params.push((T::TYPE, T::DIMS));
                Stmt::Inline(inline)
            }
        }
    }

    pub(crate) async fn fetch_all<'e, E>(self, e: E) -> Result<Vec<PgRow>, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
    {
        match self {
            Stmt::Prepared(q) => q.fetch_all(e).await,
            Stmt::Inline(inline) => inline.fetch_all(e).await,
        }
    }

    /// Hands each row to `each` as it arrives, so a long answer is never held whole (an inline
    /// statement's rows come together: it runs whole either way).
    pub(crate) async fn fetch_each<'e, E, F, X>(self, e: E, mut each: F) -> Result<(), X>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
        F: FnMut(PgRow) -> Result<(), X>,
        X: From<sqlx::Error>,
    {
        match self {
            Stmt::Prepared(q) => {
                let mut rows = q.fetch(e);
                while let Some(row) = rows.try_next().await? {
                    each(row)?;
                }
            }
            Stmt::Inline(inline) => {
                for row in inline.fetch_all(e).await? {
                    each(row)?;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn fetch_one<'e, E>(self, e: E) -> Result<PgRow, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
    {
        self.fetch_optional(e)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    pub(crate) async fn fetch_optional<'e, E>(self, e: E) -> Result<Option<PgRow>, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
    {
        match self {
            Stmt::Prepared(q) => q.fetch_optional(e).await,
            // Inline statements run whole either way; the first row is the answer.
            Stmt::Inline(inline) => Ok(inline.fetch_all(e).await?.into_iter().next()),
        }
    }

    pub(crate) async fn execute<'e, E>(self, e: E) -> Result<PgQueryResult, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
    {
        match self {
            Stmt::Prepared(q) => q.execute(e).await,
            Stmt::Inline(inline) => inline.raw()?.execute(e).await,
        }
    }

    /// The first column of every row.
    pub(crate) async fn fetch_scalars<'e, E, T>(self, e: E) -> Result<Vec<T>, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        self.fetch_all(e)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect()
    }

    /// The first column of the one row.
    pub(crate) async fn fetch_scalar<'e, E, T>(self, e: E) -> Result<T, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        self.fetch_one(e).await?.try_get(0)
    }

    /// The first column of the row, if there is one.
    pub(crate) async fn fetch_optional_scalar<'e, E, T>(
        self,
        e: E,
    ) -> Result<Option<T>, sqlx::Error>
    where
        'q: 'e,
        E: 'e + Executor<'e, Database = Postgres>,
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        self.fetch_optional(e)
            .await?
            .map(|r| r.try_get(0))
            .transpose()
    }
}

impl<'q> crate::sysdb::rows::Bind<'q> for Stmt<'q> {
    fn arg<T: crate::sysdb::rows::Param<'q>>(self, value: T) -> Self {
        self.bind(value)
    }
}

impl Inline {
    /// Through the statement's routine once it has one (its literals untyped: the routine's
    /// parameters type them), else inline, counting the run towards a routine.
    async fn fetch_all<'e, E>(self, e: E) -> Result<Vec<PgRow>, sqlx::Error>
    where
        E: 'e + Executor<'e, Database = Postgres>,
    {
        if let Some(call) = self.routines.call(&self.sql, &self.params, &self.args) {
            return sqlx::raw_sql(AssertSqlSafe(call))
                .fetch_all(e)
                .await
                .map_err(|err| self.routines.failed(&self.sql, err));
        }
        let rows = self.raw()?.fetch_all(e).await?;
        self.routines.ran(&self.sql, &self.params, rows.first());
        Ok(rows)
    }

    /// The statement with its literals cast in place, ready to send with the simple protocol.
    fn raw(&self) -> Result<sqlx::RawSql, sqlx::Error> {
        let typed: Vec<String> = self
            .args
            .iter()
            .zip(&self.params)
            .map(|(value, (base, dims))| {
                let mut lit = value.clone();
                cast(base, *dims, &mut lit);
                lit
            })
            .collect();
        Ok(sqlx::raw_sql(AssertSqlSafe(inline(
            self.sql.as_str(),
            &typed,
        )?)))
    }
}

/// `sql` with each `$n` replaced by `args[n - 1]` in parentheses. Placeholders inside string
/// literals, quoted identifiers, comments and dollar-quoted strings are text, not parameters.
pub(crate) fn inline(sql: &str, args: &[String]) -> Result<String, sqlx::Error> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + args.iter().map(String::len).sum::<usize>());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => {
                let escapes =
                    i > 0 && matches!(bytes[i - 1], b'E' | b'e') && !ident_at(bytes, i - 1);
                i = skip_quoted(bytes, i, b'\'', escapes);
            }
            b'"' => i = skip_quoted(bytes, i, b'"', false),
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(bytes.len(), |n| i + n + 1);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => i = skip_block_comment(bytes, i),
            b'$' if i > 0 && is_ident_byte(bytes[i - 1]) => i += 1,
            b'$' if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let end = (i + 1..bytes.len())
                    .find(|&j| !bytes[j].is_ascii_digit())
                    .unwrap_or(bytes.len());
                let n: usize = sql[i + 1..end].parse().map_err(|_| {
                    protocol(format!("placeholder {} is out of range", &sql[i..end]))
                })?;
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
            b'$' => i = skip_dollar_quoted(sql, i),
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

fn protocol(message: String) -> sqlx::Error {
    sqlx::Error::InvalidArgument(message)
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Whether the byte at `i` continues an identifier begun before it (so an `E` there is not the
/// escape-string prefix).
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

/// A value written as a SQL literal: untyped (`value`, where the context fixes the type, as a
/// routine's parameter does) or with an explicit cast to the type sqlx would have bound it as
/// (`lit`), so an inline statement means exactly what the prepared one does.
pub(crate) trait Lit {
    /// The Postgres type of the value (of its innermost element, for arrays).
    const TYPE: &'static str;
    /// Array dimensions: 0 for a scalar.
    const DIMS: usize = 0;
    /// Writes the literal, without a cast, to `out`.
    fn value(&self, out: &mut String);
    /// Writes the value as an element of an array literal (`{…}` syntax, before SQL quoting),
    /// so an array travels as one constant however long it is.
    fn elem(&self, out: &mut String);
    /// Writes the literal, cast, to `out`.
    fn lit(&self, out: &mut String) {
        self.value(out);
        cast(Self::TYPE, Self::DIMS, out);
    }
}

/// `::type`, with `[]` per array dimension.
fn cast(base: &str, dims: usize, out: &mut String) {
    out.push_str("::");
    out.push_str(base);
    for _ in 0..dims {
        out.push_str("[]");
    }
}

/// A text literal: `E'…'` with backslashes and quotes escaped, whatever
/// `standard_conforming_strings` says.
fn text(s: &str, out: &mut String) {
    out.push_str("E'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

impl Lit for str {
    const TYPE: &'static str = "text";
    fn value(&self, out: &mut String) {
        text(self, out);
    }
    fn elem(&self, out: &mut String) {
        out.push('"');
        for c in self.chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
}

impl Lit for String {
    const TYPE: &'static str = "text";
    fn value(&self, out: &mut String) {
        self.as_str().value(out);
    }
    fn elem(&self, out: &mut String) {
        self.as_str().elem(out);
    }
}

macro_rules! int_lit {
    ($($t:ty => $pg:literal),*) => {$(
        impl Lit for $t {
            const TYPE: &'static str = $pg;
            fn value(&self, out: &mut String) {
                // Negative ones quoted: `-N::int4` casts `N` before negating it (the minimum
                // overflows), and `-N` is typed by `N`, not by a routine's parameter.
                let _ = if *self < 0 { write!(out, "'{self}'") } else { write!(out, "{self}") };
            }
            fn elem(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
int_lit!(i32 => "int4", i64 => "int8");

impl Lit for bool {
    const TYPE: &'static str = "bool";
    fn value(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
    fn elem(&self, out: &mut String) {
        out.push(if *self { 't' } else { 'f' });
    }
}

impl Lit for f64 {
    const TYPE: &'static str = "float8";
    fn value(&self, out: &mut String) {
        out.push('\'');
        self.elem(out);
        out.push('\'');
    }
    fn elem(&self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if *self > 0.0 { "Infinity" } else { "-Infinity" });
        } else {
            // `{:?}` is the shortest text that reads back as the same f64.
            let _ = write!(out, "{self:?}");
        }
    }
}

impl<T: Lit> Lit for Option<T> {
    const TYPE: &'static str = T::TYPE;
    const DIMS: usize = T::DIMS;
    fn value(&self, out: &mut String) {
        match self {
            Some(v) => v.value(out),
            None => out.push_str("NULL"),
        }
    }
    fn elem(&self, out: &mut String) {
        match self {
            Some(v) => v.elem(out),
            None => out.push_str("NULL"),
        }
    }
}

impl<T: Lit + ?Sized> Lit for &T {
    const TYPE: &'static str = T::TYPE;
    const DIMS: usize = T::DIMS;
    fn value(&self, out: &mut String) {
        (**self).value(out);
    }
    fn elem(&self, out: &mut String) {
        (**self).elem(out);
    }
}

impl<T: Lit> Lit for [T] {
    const TYPE: &'static str = T::TYPE;
    const DIMS: usize = T::DIMS + 1;
    fn value(&self, out: &mut String) {
        let mut array = String::new();
        self.elem(&mut array);
        text(&array, out);
    }
    fn elem(&self, out: &mut String) {
        out.push('{');
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            v.elem(out);
        }
        out.push('}');
    }
}

impl<T: Lit> Lit for Vec<T> {
    const TYPE: &'static str = T::TYPE;
    const DIMS: usize = T::DIMS + 1;
    fn value(&self, out: &mut String) {
        self.as_slice().value(out);
    }
    fn elem(&self, out: &mut String) {
        self.as_slice().elem(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit<T: Lit>(v: T) -> String {
        let mut out = String::new();
        v.lit(&mut out);
        out
    }

    #[test]
    fn literals_are_typed_and_escaped() {
        assert_eq!(lit("it's a \\ test"), r"E'it''s a \\ test'::text");
        assert_eq!(lit(String::new()), "E''::text");
        assert_eq!(lit(i64::MIN), "'-9223372036854775808'::int8");
        assert_eq!(lit(i32::MIN), "'-2147483648'::int4");
        assert_eq!(lit(7i32), "7::int4");
        assert_eq!(lit(true), "true::bool");
        assert_eq!(lit(None::<&str>), "NULL::text");
        assert_eq!(lit(Some(5i64)), "5::int8");
        assert_eq!(lit(vec!["a", "b"]), r#"E'{"a","b"}'::text[]"#);
        assert_eq!(lit(Vec::<i64>::new()), "E'{}'::int8[]");
        assert_eq!(lit(vec![Some("x"), None]), r#"E'{"x",NULL}'::text[]"#);
        assert_eq!(
            lit(vec![r#"q"u\o't"#, "NULL", ""]),
            r#"E'{"q\\"u\\\\o''t","NULL",""}'::text[]"#
        );
        assert_eq!(lit(vec![Some(1i64), None]), "E'{1,NULL}'::int8[]");
        assert_eq!(lit(vec![true, false]), "E'{t,f}'::bool[]");
        assert_eq!(lit(None::<Vec<String>>), "NULL::text[]");
        assert_eq!(lit(0.1f64), "'0.1'::float8");
        assert_eq!(lit(f64::NAN), "'NaN'::float8");
        assert_eq!(lit(f64::NEG_INFINITY), "'-Infinity'::float8");
    }

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
}

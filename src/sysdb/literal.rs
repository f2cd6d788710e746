//! SQL literals: a value written as text a statement can carry inline (the transport behind a
//! transaction pooler, `postgres/exec.rs`), with the type a driver would have bound it as. Owns
//! the rendering of each bindable type; it never renders a type it does not know (each
//! implements [`Lit`]). Neutral: it names no backend, though the types are Postgres's, whose
//! inline statements are the only ones that take literals.

use std::fmt::Write as _;

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
pub(crate) fn cast(base: &str, dims: usize, out: &mut String) {
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
}

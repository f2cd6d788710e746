//! Database URLs: which backend a URL names (by its scheme, refusing every other), and the form
//! of a URL that may be printed (no password, in any place sqlx reads one from).
//!
//! It must never print a URL that did not parse: a password may sit anywhere in it. Errors
//! about such a URL name the part that was wrong instead.
//!
//! Only `postgres://`, `postgresql://` and `sqlite:` are taken. A URL that does not parse is never
//! printed (its scheme and the reason are); a printed URL has its user password and any
//! `*pass*`/`*secret*`/`*token*`/`*pwd*` query value as `***`. `Error::Connect` keeps the driver
//! error as its `source()` and its message without Postgres's "at line N".

use crate::error::Error;

/// The backends a URL can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Postgres,
    Sqlite,
}

const ACCEPTED: &str = "stead accepts postgres://…, postgresql://… and sqlite:… URLs";

/// The backend `url` names, or [`Error::InvalidUrl`] naming the scheme (never the URL).
pub(crate) fn scheme(url: &str) -> Result<Scheme, Error> {
    let Some((scheme, rest)) = url.split_once(':').filter(|(s, _)| is_scheme(s)) else {
        return Err(invalid(
            "(none)",
            format!(
                "it does not start with a scheme (a key=value string is not a URL); {ACCEPTED}"
            ),
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" => Ok(Scheme::Sqlite),
        "postgres" | "postgresql" if rest.starts_with("//") => Ok(Scheme::Postgres),
        "postgres" | "postgresql" => Err(invalid(
            scheme,
            format!("the scheme must be followed by `//` (`{scheme}://host/db`)"),
        )),
        _ => Err(invalid(scheme, format!("unknown scheme; {ACCEPTED}"))),
    }
}

/// An [`Error::InvalidUrl`] showing only the scheme (or a placeholder) and why.
pub(crate) fn invalid(scheme: &str, reason: impl Into<String>) -> Error {
    Error::InvalidUrl {
        url: format!("{scheme}:…"),
        reason: reason.into(),
    }
}

/// A URL scheme: a letter, then letters, digits, `+`, `-` or `.` (RFC 3986), kept short.
fn is_scheme(s: &str) -> bool {
    s.len() <= 32
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `url` fit for messages and logs: the password of its user info and the value of any query
/// parameter that may hold a secret (`password`, `sslpassword`, ...) become `***`. A URL that
/// does not parse is shown as its scheme only.
pub(crate) fn printable(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        let scheme = url.split_once(':').map_or("(none)", |(s, _)| s);
        return if is_scheme(scheme) {
            format!("{scheme}:…")
        } else {
            "(unparsable URL)".to_owned()
        };
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret(&k) { "***".into() } else { v };
                (k.into_owned(), v.into_owned())
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.set_fragment(None);
    parsed.to_string()
}

fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token", "pwd"]
        .iter()
        .any(|word| key.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_the_password_wherever_sqlx_reads_one() {
        assert_eq!(
            printable("postgres://bob:s3cret@db.example:5432/app?sslmode=require"),
            "postgres://bob:***@db.example:5432/app?sslmode=require"
        );
        assert_eq!(
            printable("postgres://db:5433/app?user=u&password=s3cret"),
            "postgres://db:5433/app?user=u&password=***"
        );
        // Percent-encoded keys are decoded by sqlx, so here too.
        assert!(
            !printable("postgres://db/app?pass%77ord=s3cret&sslpassword=s3cret").contains("s3cret")
        );
        assert_eq!(printable("postgres://bob@db/app"), "postgres://bob@db/app");
        assert_eq!(printable("postgres://db/a@b"), "postgres://db/a@b");
        assert_eq!(printable("not a url password=s3cret"), "(unparsable URL)");
    }

    #[test]
    fn only_known_schemes_name_a_backend() {
        assert_eq!(scheme("postgres://db/app").unwrap(), Scheme::Postgres);
        assert_eq!(scheme("postgresql://db/app").unwrap(), Scheme::Postgres);
        assert_eq!(scheme("sqlite://app.sqlite").unwrap(), Scheme::Sqlite);
        assert_eq!(scheme("sqlite::memory:").unwrap(), Scheme::Sqlite);
        for bad in [
            "mysql://u:s3cret@db/app",
            "http://db/app",
            "postgress://u:s3cret@db/app",
            "postgres:u:s3cret@db/app",
            "host=db user=u password=s3cret",
            "",
        ] {
            let e = scheme(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{bad}: {e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        let e = scheme("mysql://db").unwrap_err().to_string();
        assert!(e.contains("mysql") && e.contains("postgres://"), "{e}");
    }
}

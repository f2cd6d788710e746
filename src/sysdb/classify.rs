//! Every database error, classified once: [`DbError::Transient`] (the same call may succeed later:
//! retried by the database port, `engine/db.rs`), [`DbError::Refused`] (the database will always
//! refuse these values: a durable call fails with it, typed, and is never retried),
//! [`DbError::MissingReference`], or [`DbError::Query`] (the statement failed for another permanent
//! reason).
//!
//! It must never retry or decide what a caller does with the answer; it only sorts.
//!
//! **The classes** (hostile input, issue 15). *Transient*: Postgres classes 08, 53, 58,
//! serialization failure and deadlock, lock not available, query cancelled, server shutting down
//! (SQLSTATE 08*, 57P0*, 40001, 40P01, 53300, ...); SQLite BUSY, LOCKED, NOMEM, IOERR, FULL.
//! Retried by the database port only. *Refused*: class 22 data exception (incl. NUL bytes and
//! NOTIFY payloads over 8,000 bytes), 23 integrity, 54 program limits (incl. index row size);
//! SQLite CONSTRAINT, TOOBIG, MISMATCH, RANGE. *Missing reference*: 23503, SQLite 787. *Failed*
//! (`Query`): syntax, undefined objects, anything else. The last three are permanent: a durable
//! call that meets one fails with `Error::Database(..)`, which the workflow sees and may handle; it
//! never crashes the run, so the body is not re-run and the recovery budget is not spent. A refused
//! outcome is recorded as `ERROR` with the refusal; recorded steps that cannot be read end the run
//! `ERROR`. What each face shows for bad input is listed in `names.rs`.

use sqlx::postgres::PgDatabaseError;

use crate::error::DbError;

impl From<sqlx::Error> for DbError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                let kind = if db.try_downcast_ref::<PgDatabaseError>().is_some() {
                    postgres_kind(&code)
                } else {
                    code.parse().map_or(Kind::Failed, sqlite_kind)
                };
                // `message()`, not `Display`: Postgres's adds the server's source line.
                let reason = db.message().to_owned();
                let hint = startup_hint(&reason);
                if !hint.is_empty() {
                    // The same startup is refused every time: not a retry.
                    return DbError::Query(format!("{reason} ({code}){hint}"));
                }
                classify(kind, &code, reason, || db.constraint().map(str::to_owned))
            }
            sqlx::Error::Encode(cause) => DbError::Refused {
                code: "encode".into(),
                reason: cause.to_string(),
            },
            _ if transport_failure(&e) => DbError::Transient(e.to_string()),
            _ => DbError::Query(e.to_string()),
        }
    }
}

/// Connection-level failures: they go away on reconnect.
fn transport_failure(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
    )
}

/// The error of `kind`, naming the database's `code` and message.
fn classify(
    kind: Kind,
    code: &str,
    reason: String,
    constraint: impl FnOnce() -> Option<String>,
) -> DbError {
    match kind {
        Kind::Transient => DbError::Transient(format!("{reason} ({code})")),
        Kind::MissingReference => DbError::MissingReference {
            constraint: constraint().unwrap_or_default(),
        },
        Kind::Refused => DbError::Refused {
            code: code.to_owned(),
            reason,
        },
        Kind::Failed => DbError::Query(format!("{reason} ({code}){}", pooler_hint(code))),
    }
}

/// A startup parameter a pooler refused (PgBouncer refuses those it does not know, such as
/// `extra_float_digits`): the URL should say which pooler is in front.
pub(crate) fn startup_hint(message: &str) -> &'static str {
    if message.contains("unsupported startup parameter") {
        ": a pooler is in front of the server; add pooler=session or pooler=transaction \
         (for PgBouncer's pool_mode) to the database URL"
    } else {
        ""
    }
}

/// A prepared statement another client made, or one that vanished: the server connection
/// changed under this client between statements, as behind a transaction pooler.
fn pooler_hint(code: &str) -> &'static str {
    match code {
        "42P05" | "26000" => {
            ": the server looks like a transaction pooler (PgBouncer in transaction mode); \
             add pooler=transaction to the database URL"
        }
        _ => "",
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Transient,
    MissingReference,
    Refused,
    Failed,
}

/// Postgres SQLSTATEs (appendix A of its manual), by class and then by code.
fn postgres_kind(code: &str) -> Kind {
    match code {
        // A foreign key: the caller names what is missing (a message to an unknown workflow).
        "23503" => Kind::MissingReference,
        // Serialization failure, deadlock, statement completion unknown; lock not available;
        // object in use; query cancelled (by an operator or a timeout); the server shutting
        // down or not yet accepting connections; idle session timeout.
        "40001" | "40P01" | "40003" | "55P03" | "55006" | "57014" | "57P01" | "57P02" | "57P03"
        | "57P05" => Kind::Transient,
        _ => match code.get(..2) {
            // Connection exceptions; insufficient resources (disk full, out of memory, too many
            // connections); system errors (I/O).
            Some("08" | "53" | "58") => Kind::Transient,
            // Data exceptions (a NUL byte, a NOTIFY payload too long, a value out of range),
            // integrity constraints, program limits (an index row too big).
            Some("22" | "23" | "54") => Kind::Refused,
            _ => Kind::Failed,
        },
    }
}

/// SQLite extended result codes; the primary code is the low byte.
fn sqlite_kind(code: i32) -> Kind {
    const FOREIGN_KEY: i32 = 787;
    match code {
        FOREIGN_KEY => Kind::MissingReference,
        _ => match code & 0xff {
            // BUSY, LOCKED, NOMEM, IOERR, FULL, PROTOCOL.
            5 | 6 | 7 | 10 | 13 | 15 => Kind::Transient,
            // TOOBIG, CONSTRAINT, MISMATCH, RANGE.
            18 | 19 | 20 | 25 => Kind::Refused,
            _ => Kind::Failed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_statement_clash_names_the_pooler_setting() {
        for code in ["42P05", "26000"] {
            let e = classify(
                postgres_kind(code),
                code,
                "prepared statement".into(),
                || None,
            );
            assert!(
                matches!(&e, DbError::Query(m) if m.contains("add pooler=transaction")),
                "{e:?}"
            );
        }
    }

    #[test]
    fn postgres_codes_sort_into_the_four_kinds() {
        for transient in [
            "08006", "40001", "40P01", "53300", "53100", "57P01", "57014",
        ] {
            assert_eq!(postgres_kind(transient), Kind::Transient, "{transient}");
        }
        // NUL byte, NOTIFY payload too long, string too long, check, unique, index row size.
        for refused in ["22021", "22023", "22001", "23514", "23505", "54000"] {
            assert_eq!(postgres_kind(refused), Kind::Refused, "{refused}");
        }
        assert_eq!(postgres_kind("23503"), Kind::MissingReference);
        // Syntax error, undefined table, the database dropped: retrying cannot help.
        for failed in ["42601", "42P01", "57P04", "XX000"] {
            assert_eq!(postgres_kind(failed), Kind::Failed, "{failed}");
        }
    }

    #[test]
    fn sqlite_codes_sort_into_the_four_kinds() {
        // BUSY, BUSY_SNAPSHOT, LOCKED, IOERR_WRITE, FULL.
        for transient in [5, 517, 6, 778, 13] {
            assert_eq!(sqlite_kind(transient), Kind::Transient, "{transient}");
        }
        // TOOBIG, CONSTRAINT_CHECK, CONSTRAINT_UNIQUE, CONSTRAINT_TRIGGER, MISMATCH.
        for refused in [18, 275, 2067, 1811, 20] {
            assert_eq!(sqlite_kind(refused), Kind::Refused, "{refused}");
        }
        assert_eq!(sqlite_kind(787), Kind::MissingReference);
        // Generic error (syntax), read-only, corrupt.
        for failed in [1, 8, 11] {
            assert_eq!(sqlite_kind(failed), Kind::Failed, "{failed}");
        }
    }

    #[test]
    fn pool_and_io_errors_are_transient_others_are_not() {
        assert!(DbError::from(sqlx::Error::PoolTimedOut).is_transient());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(DbError::from(sqlx::Error::Io(io)).is_transient());
        assert!(!DbError::from(sqlx::Error::RowNotFound).is_transient());
    }

    #[test]
    fn refusals_keep_the_code_and_the_message() {
        let e = classify(
            Kind::Refused,
            "22021",
            "invalid byte sequence".into(),
            || None,
        );
        assert_eq!(
            e,
            DbError::Refused {
                code: "22021".into(),
                reason: "invalid byte sequence".into()
            }
        );
        assert!(!e.is_transient());
    }
}

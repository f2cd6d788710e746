//! A recorded payload as a read returned it: owned text, or a SQLite driver row that holds it,
//! read in place. A large output replayed on SQLite is then decoded straight from the driver's
//! copy, not from a `String` copied out of it first (W8's replay held the driver's copy, the
//! `String` and the decoded value at once, each 10 MB, on three threads' allocator arenas).
//!
//! It owns that choice and nothing else. It must never hold a column that is not valid text:
//! a row's column is checked when it is held, and a driver row never changes after that.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use sqlx::sqlite::SqliteRow;
use sqlx::Row;

/// Text at least this long is held in its row rather than copied out.
const HOLD_FROM: usize = 64 << 10;

/// A payload's text: derefs to `str`, compares and prints as its text.
#[derive(Clone)]
pub(crate) struct Text(Repr);

#[derive(Clone)]
enum Repr {
    Owned(String),
    /// Column `.1` of the row, checked to be text when held.
    Held(Arc<SqliteRow>, usize),
}

impl Text {
    /// Column `i` of `row` (`None` when NULL): the row kept to hold it when it is long, the
    /// text copied (and the row dropped) when not.
    pub(crate) fn from_sqlite(row: SqliteRow, i: usize) -> Result<Option<Text>, sqlx::Error> {
        match row.try_get::<Option<&str>, _>(i)? {
            None => return Ok(None),
            Some(text) if text.len() < HOLD_FROM => return Ok(Some(Text::from(text))),
            Some(_) => {}
        }
        Ok(Some(Text(Repr::Held(Arc::new(row), i))))
    }

    /// The text as an owned `String` (a copy when held).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn into_string(self) -> String {
        match self.0 {
            Repr::Owned(text) => text,
            Repr::Held(..) => self.as_str().to_owned(),
        }
    }

    fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Owned(text) => text,
            // Checked as text when held, and a driver row is immutable: this cannot fail.
            Repr::Held(row, i) => row
                .try_get::<&str, _>(*i)
                .expect("a held column was checked to be text"),
        }
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        Text(Repr::Owned(text))
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        Text(Repr::Owned(text.to_owned()))
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqlitePoolOptions;

    use super::*;

    async fn row(sql: &str) -> SqliteRow {
        let pool = SqlitePoolOptions::new()
            .connect("sqlite::memory:")
            .await
            .unwrap();
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        sqlx::query(sql).fetch_one(&pool).await.unwrap()
    }

    #[tokio::test]
    async fn long_text_is_held_in_its_row_and_reads_the_same() {
        let sql = format!("SELECT '{}', 'é短', NULL", "ab".repeat(HOLD_FROM));
        let long = Text::from_sqlite(row(&sql).await, 0).unwrap().unwrap();
        assert!(matches!(long.0, Repr::Held(_, 0)));
        assert_eq!(long.len(), 2 * HOLD_FROM);
        assert_eq!(long, Text::from("ab".repeat(HOLD_FROM)));
        let short = Text::from_sqlite(row(&sql).await, 1).unwrap().unwrap();
        assert!(matches!(short.0, Repr::Owned(_)));
        assert_eq!(&*short, "é短");
        assert_eq!(Text::from_sqlite(row(&sql).await, 2).unwrap(), None);
        assert_eq!(long.clone().into_string(), "ab".repeat(HOLD_FROM));
    }

    #[tokio::test]
    async fn a_column_that_is_not_text_is_refused_when_held() {
        let sql = "SELECT 42, x'ff'";
        assert!(Text::from_sqlite(row(sql).await, 0).is_err());
        // Bytes that are not UTF-8 are never held.
        assert!(Text::from_sqlite(row(sql).await, 1).is_err());
    }
}

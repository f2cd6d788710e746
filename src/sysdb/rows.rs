//! Reading a row of either backend by column position, so each row shape that both backends
//! return is decoded in one place.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Postgres, Row, Sqlite, Type};

/// A value both drivers decode.
pub(crate) trait Value:
    for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>
{
}

impl<T> Value for T where
    T: for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>
{
}

/// A row of either backend.
pub(crate) trait AnyRow {
    /// The value in column `i`.
    fn at<T: Value>(&self, i: usize) -> Result<T, sqlx::Error>;
}

impl AnyRow for PgRow {
    fn at<T: Value>(&self, i: usize) -> Result<T, sqlx::Error> {
        self.try_get(i)
    }
}

impl AnyRow for SqliteRow {
    fn at<T: Value>(&self, i: usize) -> Result<T, sqlx::Error> {
        self.try_get(i)
    }
}

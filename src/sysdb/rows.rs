//! Rows and parameters of either backend: a row shape both backends return is decoded in one
//! place, and a parameter list both backends take is bound in one place.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Decode, Encode, Postgres, Row, Sqlite, Type};

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

/// A parameter both drivers encode, borrowed for `'q`.
pub(crate) trait Param<'q>:
    Encode<'q, Postgres> + Type<Postgres> + Encode<'q, Sqlite> + Type<Sqlite> + Send + 'q
{
}

impl<'q, T> Param<'q> for T where
    T: Encode<'q, Postgres> + Type<Postgres> + Encode<'q, Sqlite> + Type<Sqlite> + Send + 'q
{
}

/// A statement of either backend taking its parameters, so a parameter list both backends
/// share is bound in one place.
pub(crate) trait Bind<'q>: Sized {
    /// Binds the next parameter.
    fn arg<T: Param<'q>>(self, value: T) -> Self;
}

macro_rules! bind_for {
    ($($ty:ty),*) => {$(
        impl<'q, O> Bind<'q> for sqlx::query::QueryScalar<'q, $ty, O, <$ty as sqlx::Database>::Arguments> {
            fn arg<T: Param<'q>>(self, value: T) -> Self {
                self.bind(value)
            }
        }

        impl<'q> Bind<'q> for sqlx::query::Query<'q, $ty, <$ty as sqlx::Database>::Arguments> {
            fn arg<T: Param<'q>>(self, value: T) -> Self {
                self.bind(value)
            }
        }
    )*};
}

bind_for!(Postgres, Sqlite);

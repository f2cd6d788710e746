//! How a statement travels: prepared (the default: named, cached per connection, parameters
//! bound in binary), or inline, for a transaction pooler (`pooler=transaction`): sent with the
//! simple query protocol, its parameters rendered as typed literals, in one round trip and with no
//! prepared statement at all (as pgx's `QueryExecModeSimpleProtocol`). A transaction pooler
//! gives each transaction whichever server connection is free, where a prepared statement of
//! another may or may not exist. Once warm, an inline statement is sent as a call of its stored
//! routine instead (`routines.rs`), which the server plans once per connection.
//!
//! It owns the choice of transport; the literals come from `sysdb/literal.rs` (it must never
//! render a value whose type it does not know: each bindable type implements [`Lit`]) and the
//! substitution from `lex.rs`, so nothing spliced is text that did not come from a statement
//! template or a rendered literal.

use std::sync::Arc;

use futures::TryStreamExt;
use sqlx::postgres::{PgQueryResult, PgRow};
use sqlx::{AssertSqlSafe, Executor, Postgres, Row, SqlStr};

use super::lex::inline;
use super::routines::{ParamType, Routines};
use super::sql::PgQuery;
use crate::sysdb::literal::cast;
pub(crate) use crate::sysdb::literal::Lit;

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

//! The statement table: each concept module's statement templates, with the schema spliced in
//! once per store, on first use. Private to the Postgres backend; it knows no statement itself,
//! so the concept modules import it and it imports none of them.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use sqlx::postgres::PgArguments;
use sqlx::{AssertSqlSafe, SqlStr};

use super::exec::Stmt;
use super::routines::Routines;

/// A statement with its parameters bound so far.
pub(super) type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, PgArguments>;

pub(super) struct Sql {
    pub(super) schema: String,
    /// Statements go inline (simple protocol, literals), carried by these routines once warm:
    /// the URL names a transaction pooler.
    pub(super) inline: Option<Arc<Routines>>,
    /// Spliced statements by their template's address and length (templates are `'static`).
    built: RwLock<HashMap<(usize, usize), SqlStr>>,
}

impl Sql {
    /// The statements of `schema`, a name `sysdb::validate_schema` accepted.
    pub(super) fn new(schema: &str, inline: Option<Arc<Routines>>) -> Sql {
        Sql {
            schema: schema.to_owned(),
            inline,
            built: RwLock::default(),
        }
    }

    /// The statement `template` for this schema, sent as this store sends statements.
    pub(super) fn query<'q>(&self, template: &'static str) -> Stmt<'q> {
        Stmt::new(self.get(template), self.inline.as_ref())
    }

    /// `template` (with `{s}` where the schema goes) for this schema.
    pub(super) fn get(&self, template: &'static str) -> SqlStr {
        let key = (template.as_ptr() as usize, template.len());
        if let Some(built) = self.built.read().ok().and_then(|b| b.get(&key).cloned()) {
            return built;
        }
        let text: Arc<str> = template
            .replace("{s}", &format!("\"{}\"", self.schema))
            .into();
        // Safe: the only spliced value is a schema name validated as a plain identifier.
        let built = sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text));
        if let Ok(mut cache) = self.built.write() {
            cache.insert(key, built.clone());
        }
        built
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_schema_qualified_and_built_once() {
        static TEMPLATE: &str = "SELECT 1 FROM {s}.operation_outputs";
        let sql = Sql::new("tenant_a", None);
        let first = sql.get(TEMPLATE);
        assert_eq!(
            first.as_str(),
            "SELECT 1 FROM \"tenant_a\".operation_outputs"
        );
        assert!(std::ptr::eq(first.as_str(), sql.get(TEMPLATE).as_str()));
    }
}

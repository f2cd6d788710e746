//! The statement table: each concept module's statement templates, with the schema spliced in
//! once per store, on first use. Private to the Postgres backend; it knows no statement itself,
//! so the concept modules import it and it imports none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// The schema is Citus's (`shards.rs`): statements Citus cannot run as written are sent in
    /// their Citus form ([`Sql::dialect`]).
    citus: AtomicBool,
}

impl Sql {
    /// The statements of `schema`, a name `sysdb::validate_schema` accepted.
    pub(super) fn new(schema: &str, inline: Option<Arc<Routines>>) -> Sql {
        Sql {
            schema: schema.to_owned(),
            inline,
            built: RwLock::default(),
            citus: AtomicBool::new(false),
        }
    }

    /// Marks the schema as Citus's, or not.
    pub(super) fn set_citus(&self, citus: bool) {
        self.citus.store(citus, Ordering::Release);
    }

    /// Whether the schema is Citus's.
    pub(super) fn is_citus(&self) -> bool {
        self.citus.load(Ordering::Acquire)
    }

    /// `plain` on Postgres; on Citus, `citus`: the same statement (same parameters, same
    /// columns) in a form Citus runs on one node, a call of one of the functions the sharded
    /// migration installs (`migrations/postgres/citus.sql`).
    pub(super) fn dialect(&self, plain: &'static str, citus: &'static str) -> &'static str {
        if self.is_citus() {
            citus
        } else {
            plain
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

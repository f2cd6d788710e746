//! Stored routines behind a transaction pooler. An inline statement is parsed and planned on
//! every call (no prepared statement survives a transaction pooler), which costs the server more
//! than running it. So once a statement has returned rows a few times, it is wrapped in a
//! PL/pgSQL function of its own (`stead_q_<hash of the statement>`, in stead's schema) whose
//! plan each server connection caches as it would a prepared statement's, and later calls send
//! the function's name with the literals. Lanes' routines carry the lanes' session settings
//! (`session.rs`) as the function's own, since no session setting lasts behind the pooler.
//!
//! It owns the routines' names, their creation and the choice between routine and inline. It
//! must never wrap a statement that has not returned rows (`RETURN QUERY` needs them), never
//! create a routine inside a caller's transaction (creation runs on its own pool connection, in
//! the background, while the statement keeps going inline), and never let a vanished routine
//! fail a call for good: such a failure is reported as a lost connection, and the retry goes
//! inline.

use std::fmt::Write as _;
use std::sync::Arc;

use dashmap::DashMap;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{AssertSqlSafe, Column, Row, SqlStr, TypeInfo};

use crate::base::hash::fnv1a;

/// Inline runs of a statement before it gets a routine: one-off statements stay inline.
const WARM_UP: u32 = 4;
/// Failed creations of one statement's routine before it stays inline for good.
const ATTEMPTS: u32 = 3;
/// Postgres's limit on a function's arguments (`FUNC_MAX_ARGS`).
const MAX_ARGS: usize = 100;
/// The body's dollar quote; a statement containing it stays inline.
const QUOTE: &str = "$stead_routine$";
/// Result column types a routine may declare: Postgres's own, by the names sqlx reports.
const COLUMN_TYPES: [&str; 15] = [
    "BOOL",
    "INT2",
    "INT4",
    "INT8",
    "FLOAT4",
    "FLOAT8",
    "NUMERIC",
    "TEXT",
    "VARCHAR",
    "NAME",
    "BYTEA",
    "JSON",
    "JSONB",
    "UUID",
    "TIMESTAMPTZ",
];

/// One parameter's type: its base type and array dimensions (`Lit::TYPE`, `Lit::DIMS`).
pub(crate) type ParamType = (&'static str, usize);

/// The routines of one kind of connection (lanes or the pool) of one store.
pub(crate) struct Routines {
    schema: String,
    /// The function's `SET` clauses: the settings its callers' sessions would have had.
    settings: String,
    pool: PgPool,
    /// By the statement text's address and length (built once per store, `sql.rs`).
    entries: DashMap<(usize, usize), Entry>,
}

#[derive(Clone)]
enum Entry {
    /// Run inline `runs` times; `failures` creations failed.
    Warming {
        runs: u32,
        failures: u32,
    },
    Creating,
    Ready(Arc<Routine>),
    /// Stays inline: not wrappable, or its creation kept failing.
    Inline,
}

struct Routine {
    name: String,
    params: Vec<ParamType>,
    /// `) AS t("col" type, …)`: the column definition list a `SETOF record` call needs.
    columns: String,
    failures: u32,
}

impl Routines {
    /// Routines in `schema` (a validated identifier) created through `pool`, run with
    /// `settings` (fixed names and values, never user input).
    pub(crate) fn new(schema: &str, settings: &[(&str, &str)], pool: PgPool) -> Routines {
        Routines {
            schema: schema.to_owned(),
            settings: settings
                .iter()
                .map(|(k, v)| format!(" SET {k} = {v}"))
                .collect(),
            pool,
            entries: DashMap::new(),
        }
    }

    /// The call of `sql`'s routine with `args`, once it exists and takes these parameter types.
    pub(crate) fn call(
        &self,
        sql: &SqlStr,
        params: &[ParamType],
        args: &[String],
    ) -> Option<String> {
        let routine = match self.entries.get(&key(sql))?.value() {
            Entry::Ready(routine) if routine.params == params => routine.clone(),
            _ => return None,
        };
        let mut call = String::with_capacity(
            64 + routine.columns.len() + args.iter().map(|a| a.len() + 1).sum::<usize>(),
        );
        let _ = write!(call, "SELECT * FROM \"{}\".{}(", self.schema, routine.name);
        for (i, arg) in args.iter().enumerate() {
            if i > 0 {
                call.push(',');
            }
            call.push_str(arg);
        }
        call.push_str(&routine.columns);
        Some(call)
    }

    /// Counts an inline run of `sql` that returned `row` first; after the warm-up, starts
    /// creating its routine.
    pub(crate) fn ran(self: &Arc<Self>, sql: &SqlStr, params: &[ParamType], row: Option<&PgRow>) {
        let Some(row) = row else { return };
        let key = key(sql);
        {
            let mut entry = self.entries.entry(key).or_insert(Entry::Warming {
                runs: 0,
                failures: 0,
            });
            let Entry::Warming { runs, .. } = entry.value_mut() else {
                return;
            };
            *runs += 1;
            if *runs < WARM_UP {
                return;
            }
        }
        let Some(columns) = wrappable(sql.as_str(), params, row) else {
            self.entries.insert(key, Entry::Inline);
            return;
        };
        let failures = {
            let Some(mut entry) = self.entries.get_mut(&key) else {
                return;
            };
            // Another caller may have started it meanwhile.
            let Entry::Warming { failures, .. } = *entry.value() else {
                return;
            };
            *entry = Entry::Creating;
            failures
        };
        let routines = self.clone();
        let sql = sql.clone();
        let params = params.to_vec();
        tokio::spawn(async move {
            routines.create(sql, params, columns, failures).await;
        });
    }

    /// What a failed routine call reports: a routine that vanished or no longer fits its
    /// statement (dropped with the schema, a column added) sends the statement inline again,
    /// and the failure is reported as transient so the caller's retry takes that path.
    pub(crate) fn failed(&self, sql: &SqlStr, e: sqlx::Error) -> sqlx::Error {
        let code = match &e {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        // Undefined function; a result that no longer matches the declared columns.
        if !matches!(code.as_deref(), Some("42883" | "42804")) {
            return e;
        }
        if let Some(mut entry) = self.entries.get_mut(&key(sql)) {
            if let Entry::Ready(routine) = entry.value() {
                let failures = routine.failures + 1;
                tracing::warn!(routine = %routine.name, error = %e, "a stored routine failed; its statement goes inline");
                *entry = if failures >= ATTEMPTS {
                    Entry::Inline
                } else {
                    Entry::Warming { runs: 0, failures }
                };
            }
        }
        sqlx::Error::Protocol(format!("a stored routine of stead's failed ({e}); retry"))
    }

    async fn create(&self, sql: SqlStr, params: Vec<ParamType>, columns: String, failures: u32) {
        let name = name(sql.as_str(), &params, &columns, &self.settings);
        let result = self.ensure(&name, sql.as_str(), &params).await;
        let next = match result {
            Ok(()) => Entry::Ready(Arc::new(Routine {
                name,
                params,
                columns,
                failures,
            })),
            Err(e) => {
                tracing::debug!(routine = %name, error = %e, "could not create a stored routine; the statement stays inline");
                if failures + 1 >= ATTEMPTS {
                    Entry::Inline
                } else {
                    Entry::Warming {
                        runs: 0,
                        failures: failures + 1,
                    }
                }
            }
        };
        self.entries.insert(key(&sql), next);
    }

    /// Creates the routine unless it exists (another process, or an earlier run, made it):
    /// replacing a function other sessions use would make each of them recompile it.
    async fn ensure(&self, name: &str, sql: &str, params: &[ParamType]) -> Result<(), sqlx::Error> {
        let exists = format!(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = '{}' AND p.proname = '{name}')",
            self.schema
        );
        let found = sqlx::raw_sql(AssertSqlSafe(exists))
            .fetch_one(&self.pool)
            .await?;
        if found.try_get::<bool, _>(0)? {
            return Ok(());
        }
        let mut args = String::new();
        for (i, (base, dims)) in params.iter().enumerate() {
            if i > 0 {
                args.push_str(", ");
            }
            args.push_str(base);
            args.push_str(&"[]".repeat(*dims));
        }
        // One implicit transaction: the lock serialises two processes creating the same one.
        let create = format!(
            "SELECT pg_advisory_xact_lock({lock});\n\
             CREATE OR REPLACE FUNCTION \"{schema}\".{name}({args}) RETURNS SETOF record \
             LANGUAGE plpgsql{settings} AS {QUOTE}\nBEGIN RETURN QUERY\n{sql}\n;\nEND\n{QUOTE}",
            lock = lock_key(name),
            schema = self.schema,
            settings = self.settings,
            sql = sql.trim_end().trim_end_matches(';'),
        );
        sqlx::raw_sql(AssertSqlSafe(create))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

fn key(sql: &SqlStr) -> (usize, usize) {
    (sql.as_str().as_ptr() as usize, sql.as_str().len())
}

/// The column definition list for `row`'s columns, if the statement can become a routine: a
/// query or a data-modifying statement returning rows, with few enough parameters, columns of
/// known types, and no text that would end the routine's body. A name repeated keeps its last
/// occurrence (the one a lookup by name finds); earlier ones get their position appended.
fn wrappable(sql: &str, params: &[ParamType], row: &PgRow) -> Option<String> {
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()?
        .to_ascii_uppercase();
    if !matches!(
        first.as_str(),
        "SELECT" | "WITH" | "INSERT" | "UPDATE" | "DELETE"
    ) || params.len() > MAX_ARGS
        || sql.contains(QUOTE)
        || row.columns().is_empty()
    {
        return None;
    }
    let columns = row.columns();
    let mut list = String::from(") AS t(");
    for (i, column) in columns.iter().enumerate() {
        let type_name = column.type_info().name();
        let base = type_name.strip_suffix("[]").unwrap_or(type_name);
        if !COLUMN_TYPES.contains(&base) {
            return None;
        }
        if i > 0 {
            list.push_str(", ");
        }
        let name = column.name().replace('"', "\"\"");
        let repeated = columns[i + 1..].iter().any(|c| c.name() == column.name());
        if repeated {
            let _ = write!(list, "\"{name}#{i}\" {type_name}");
        } else {
            let _ = write!(list, "\"{name}\" {type_name}");
        }
    }
    list.push(')');
    Some(list)
}

/// `stead_q_` and 128 bits of the statement, its parameter and column types and settings: the
/// same statement gets the same routine in every process of the fleet.
fn name(sql: &str, params: &[ParamType], columns: &str, settings: &str) -> String {
    let mut text = String::from(sql);
    for (base, dims) in params {
        let _ = write!(text, "\0{base}/{dims}");
    }
    text.push('\0');
    text.push_str(columns);
    text.push('\0');
    text.push_str(settings);
    format!(
        "stead_q_{:016x}{:016x}",
        fnv1a(text.bytes()),
        fnv1a(b"stead routine\0".iter().copied().chain(text.bytes()))
    )
}

/// The advisory lock creating routine `name` takes (its hash's first 63 bits, negated so it
/// never meets the migrations' positive key).
fn lock_key(name: &str) -> i64 {
    let bits = u64::from_str_radix(&name[8..24], 16).unwrap_or(0) >> 1;
    -(bits as i64) - 1
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::{Connection, PgConnection};

    use super::*;
    use crate::sysdb::postgres::exec::Stmt;
    use crate::sysdb::suite::TestDb;

    #[test]
    fn names_are_stable_and_distinguish_what_the_routine_depends_on() {
        let a = name("SELECT $1", &[("text", 0)], ") AS t(\"x\" TEXT)", "");
        assert_eq!(
            a,
            name("SELECT $1", &[("text", 0)], ") AS t(\"x\" TEXT)", "")
        );
        assert_eq!(a.len(), 8 + 32);
        assert_ne!(
            a,
            name("SELECT $1", &[("text", 1)], ") AS t(\"x\" TEXT)", "")
        );
        assert_ne!(
            a,
            name("SELECT $1", &[("text", 0)], ") AS t(\"y\" TEXT)", "")
        );
        assert_ne!(
            a,
            name(
                "SELECT $1",
                &[("text", 0)],
                ") AS t(\"x\" TEXT)",
                " SET a = b"
            )
        );
        assert!(lock_key(&a) < 0);
    }

    /// Awkward values: quotes, backslashes, the word NULL, braces, commas, non-ASCII, empty.
    fn texts() -> Vec<Option<String>> {
        [
            "it's",
            r#"a "quoted" \ back\slash"#,
            "NULL",
            "{x,y}",
            "ünï ✓",
            "",
        ]
        .iter()
        .map(|s| Some(s.to_string()))
        .chain([None])
        .collect()
    }

    const ECHO: &str = "SELECT u.t, u.n, $3::bool AS flag, $4::float8 AS x, \
        array_length($1::text[], 1) AS n \
        FROM UNNEST($1::text[], $2::int8[]) AS u(t, n) ORDER BY u.n";

    fn echo(routines: &Arc<Routines>, sql: &SqlStr, texts: &[Option<String>]) -> Stmt<'static> {
        let ns: Vec<i64> = (0..texts.len() as i64).map(|n| n - 3).collect();
        Stmt::new(sql.clone(), Some(routines))
            .bind(texts.to_vec())
            .bind(ns)
            .bind(true)
            .bind(-0.1f64)
    }

    async fn routine_count(pool: &PgPool) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM pg_proc WHERE proname LIKE 'stead_q_%'")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// Rows as text, so inline and routine answers compare whatever their columns' names.
    fn shape(rows: &[PgRow]) -> Vec<(Option<String>, i64, bool, f64, i32)> {
        rows.iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect()
    }

    /// A fresh database with an empty `dbos` schema, and a pool on it.
    async fn scratch() -> (TestDb, PgPool) {
        let db = TestDb::new().await;
        let pool = PgPool::connect(&db.url).await.unwrap();
        sqlx::query("CREATE SCHEMA dbos")
            .execute(&pool)
            .await
            .unwrap();
        (db, pool)
    }

    #[tokio::test]
    async fn a_warm_statement_runs_as_a_routine_with_the_same_answers_and_a_dropped_one_goes_inline(
    ) {
        let (_db, pool) = scratch().await;
        let routines = Arc::new(Routines::new(
            "dbos",
            &[("enable_seqscan", "off")],
            pool.clone(),
        ));
        let sql = SqlStr::from_static(ECHO);
        let texts = texts();

        let mut inline = Vec::new();
        for _ in 0..WARM_UP {
            inline = echo(&routines, &sql, &texts)
                .fetch_all(&pool)
                .await
                .unwrap();
        }
        assert_eq!(inline.len(), texts.len());
        let expected = shape(&inline);
        assert_eq!(expected[0].0.as_deref(), Some("it's"));
        assert_eq!(expected[1].0.as_deref(), Some(r#"a "quoted" \ back\slash"#));
        assert_eq!(
            expected[2].0.as_deref(),
            Some("NULL"),
            "the text NULL, not a NULL"
        );
        assert_eq!(expected[6].0, None);
        assert_eq!((expected[0].1, expected[0].3), (-3, -0.1));

        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while routines.call(&sql, &echo_params(), &[]).is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no routine was made"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(routine_count(&pool).await, 1);
        let config: Vec<String> = sqlx::query_scalar(
            "SELECT unnest(proconfig) FROM pg_proc WHERE proname LIKE 'stead_q_%'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(config, ["enable_seqscan=off"]);
        let routed = echo(&routines, &sql, &texts)
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(shape(&routed), expected);
        let one = echo(&routines, &sql, &texts[..1])
            .fetch_optional(&pool)
            .await
            .unwrap();
        assert_eq!(one.map(|r| r.get::<String, _>(0)).as_deref(), Some("it's"));

        // Another store (another process) finds the routine and makes no second one.
        let other = Arc::new(Routines::new(
            "dbos",
            &[("enable_seqscan", "off")],
            pool.clone(),
        ));
        for _ in 0..WARM_UP + 2 {
            echo(&other, &sql, &texts).fetch_all(&pool).await.unwrap();
        }
        assert_eq!(routine_count(&pool).await, 1);

        // Dropped under it: one transient failure, then inline again, then a new routine.
        let name: String =
            sqlx::query_scalar("SELECT proname::text FROM pg_proc WHERE proname LIKE 'stead_q_%'")
                .fetch_one(&pool)
                .await
                .unwrap();
        sqlx::raw_sql(AssertSqlSafe(format!("DROP FUNCTION dbos.{name}")))
            .execute(&pool)
            .await
            .unwrap();
        let err = echo(&routines, &sql, &texts)
            .fetch_all(&pool)
            .await
            .unwrap_err();
        assert!(
            matches!(
                crate::error::DbError::from(err),
                crate::error::DbError::Transient(_)
            ),
            "a vanished routine is worth a retry"
        );
        let again = echo(&routines, &sql, &texts)
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(shape(&again), expected);
    }

    fn echo_params() -> Vec<ParamType> {
        vec![("text", 1), ("int8", 1), ("bool", 0), ("float8", 0)]
    }

    #[tokio::test]
    async fn statements_that_cannot_be_routines_stay_inline() {
        let (db, pool) = scratch().await;
        let routines = Arc::new(Routines::new("dbos", &[], pool.clone()));
        // A type outside the list, a statement returning nothing, and repeated names (which
        // is wrappable: the last keeps its name, as a lookup by name finds it).
        let odd = SqlStr::from_static("SELECT now()::date AS d, $1::int8 AS n");
        let empty = SqlStr::from_static("SELECT 1 AS one WHERE $1::int8 < 0");
        let twice = SqlStr::from_static("SELECT 1::int8 AS n, $1::int8 AS n");
        for _ in 0..WARM_UP * 2 {
            for sql in [&odd, &empty] {
                Stmt::new(sql.clone(), Some(&routines))
                    .bind(5i64)
                    .fetch_all(&pool)
                    .await
                    .unwrap();
            }
            let row = Stmt::new(twice.clone(), Some(&routines))
                .bind(7i64)
                .fetch_one(&pool)
                .await
                .unwrap();
            assert_eq!(
                row.get::<i64, _>("n"),
                7,
                "by name, the last of the repeated"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            routine_count(&pool).await,
            1,
            "only the repeated-names statement"
        );
        assert!(routines.call(&odd, &[("int8", 0)], &[]).is_none());
        assert!(routines.call(&empty, &[("int8", 0)], &[]).is_none());
        assert!(routines.call(&twice, &[("int8", 0)], &[]).is_some());
        let mut conn = PgConnection::connect(&db.url).await.unwrap();
        let row = Stmt::new(twice.clone(), Some(&routines))
            .bind(9i64)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!((row.get::<i64, _>(0), row.get::<i64, _>("n")), (1, 9));
    }
}

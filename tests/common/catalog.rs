//! Catalog snapshots: every fact about a schema that a catalog query can see, as text lines.
//!
//! Two schemas with equal snapshots are interchangeable for any client: same tables, column
//! order, types, defaults, nullability, constraints, indexes (with their predicates),
//! functions (signature, settings and body), triggers, comments, owners and grants. The
//! schema's own name is written `<s>`, so a schema can be compared with one of another name.

use sqlx::{AssertSqlSafe, PgConnection, PgPool};

/// One query per kind of object. Each yields a `line` column; `$1` is the schema name.
const QUERIES: &[&str] = &[
    // The schema itself.
    "SELECT format('schema owner=%s acl=%s', pg_get_userbyid(n.nspowner), n.nspacl) AS line
     FROM pg_namespace n WHERE n.nspname = $1",
    // Every relation: tables, indexes, sequences, views, composite types.
    "SELECT format('relation %s kind=%s persistence=%s owner=%s acl=%s options=%s rls=%s',
                   c.relname, c.relkind, c.relpersistence, pg_get_userbyid(c.relowner),
                   c.relacl, c.reloptions, c.relrowsecurity) AS line
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
    // Columns, by logical position among the live ones (a dropped column leaves a gap in
    // attnum that no client sees).
    "SELECT format('column %s #%s %s %s notnull=%s default=%s identity=%s generated=%s \
                    collation=%s storage=%s',
                   c.relname,
                   row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                   a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                   pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
                   co.collname, a.attstorage) AS line
     FROM pg_attribute a
     JOIN pg_class c ON c.oid = a.attrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     LEFT JOIN pg_collation co ON co.oid = a.attcollation
     WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped
       AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
    // Constraints of every kind, with their definitions.
    "SELECT format('constraint %s on %s type=%s def=%s deferrable=%s deferred=%s validated=%s',
                   k.conname, c.relname, k.contype, pg_get_constraintdef(k.oid),
                   k.condeferrable, k.condeferred, k.convalidated) AS line
     FROM pg_constraint k
     JOIN pg_namespace n ON n.oid = k.connamespace
     LEFT JOIN pg_class c ON c.oid = k.conrelid
     WHERE n.nspname = $1",
    // Indexes, including constraint-backed ones.
    "SELECT format('index %s: %s primary=%s valid=%s ready=%s clustered=%s',
                   ic.relname, pg_get_indexdef(x.indexrelid), x.indisprimary, x.indisvalid,
                   x.indisready, x.indisclustered) AS line
     FROM pg_index x
     JOIN pg_class ic ON ic.oid = x.indexrelid
     JOIN pg_namespace n ON n.oid = ic.relnamespace
     WHERE n.nspname = $1",
    // Functions: signature with defaults, result, and everything that changes how they run.
    "SELECT format('function %s(%s) returns %s kind=%s language=%s volatility=%s strict=%s \
                    security_definer=%s leakproof=%s parallel=%s cost=%s rows=%s config=%s \
                    owner=%s acl=%s',
                   p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                   p.prokind, l.lanname, p.provolatile, p.proisstrict, p.prosecdef,
                   p.proleakproof, p.proparallel, p.procost, p.prorows, p.proconfig,
                   pg_get_userbyid(p.proowner), p.proacl) AS line
     FROM pg_proc p
     JOIN pg_namespace n ON n.oid = p.pronamespace
     JOIN pg_language l ON l.oid = p.prolang
     WHERE n.nspname = $1",
    // Function bodies, verbatim: a changed body changes what a caller gets.
    "SELECT format('function body %s(%s): %s', p.proname, pg_get_function_identity_arguments(p.oid),
                   p.prosrc) AS line
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1",
    // Comments on the schema's relations, columns and functions (tools show them).
    "SELECT format('comment on %s %s #%s: %s', d.classoid::regclass,
                   coalesce(c.relname, p.proname), d.objsubid, d.description) AS line
     FROM pg_description d
     LEFT JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
     LEFT JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
     JOIN pg_namespace n ON n.oid = coalesce(c.relnamespace, p.pronamespace)
     WHERE n.nspname = $1",
    // User triggers (foreign keys' internal triggers are covered by the constraints).
    "SELECT format('trigger %s on %s: %s enabled=%s', t.tgname, c.relname,
                   pg_get_triggerdef(t.oid), t.tgenabled) AS line
     FROM pg_trigger t
     JOIN pg_class c ON c.oid = t.tgrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND NOT t.tgisinternal",
    // Types of their own (enums, domains, ...), not the row and array types of tables.
    "SELECT format('type %s kind=%s', t.typname, t.typtype) AS line
     FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = $1 AND t.typrelid = 0
       AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid)",
    // Rules, policies and extended statistics: none expected, but they would change behaviour.
    "SELECT format('rule %s on %s', r.rulename, r.tablename) AS line
     FROM pg_rules r WHERE r.schemaname = $1",
    "SELECT format('policy %s on %s', p.policyname, p.tablename) AS line
     FROM pg_policies p WHERE p.schemaname = $1",
    "SELECT format('statistics %s', s.stxname) AS line
     FROM pg_statistic_ext s JOIN pg_namespace n ON n.oid = s.stxnamespace
     WHERE n.nspname = $1",
];

/// The prefix of stead's own tables (and their indexes and constraints).
pub const STEAD_OWN: &str = "stead_";

/// How the lines of function bodies start (see `QUERIES`).
const BODY: &str = "function body ";

/// `lines` without function bodies. stead writes its own SQL for DBOS's functions, so their
/// bodies differ from DBOS's by design; everything else about a function still compares.
pub fn without_bodies(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.starts_with(BODY))
        .cloned()
        .collect()
}

/// The snapshot of `schema`: sorted lines, the schema's name written `<s>`. Empty when the
/// schema does not exist.
pub async fn snapshot(pool: &PgPool, schema: &str) -> Vec<String> {
    let mut conn = pool.acquire().await.expect("connect for the snapshot");
    snapshot_on(&mut conn, schema).await
}

/// [`snapshot`] on one connection, e.g. inside a transaction that changes the schema. stead's
/// own table beside DBOS's (`stead_executors`, the fleet's roster) is left out: it is not part
/// of the layout the two share (`tests/integration/schema/layout.rs` checks it on its own).
pub async fn snapshot_on(conn: &mut PgConnection, schema: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for query in QUERIES {
        // Definitions name this schema's objects qualified (e.g. `dbos.workflow_status`);
        // function bodies may quote the name even where it needs no quotes.
        let sql = format!(
            "SELECT replace(replace(q.line, quote_ident($1) || '.', '<s>.'), '\"' || $1 || '\".', '<s>.')
             FROM ({query}) q"
        );
        let rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(schema)
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("catalog query failed: {e}\n{query}"));
        lines.extend(rows.into_iter().filter(|l| !l.contains(STEAD_OWN)));
    }
    lines.sort();
    lines
}

/// The non-system schemas of the database, sorted.
pub async fn user_schemas(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace
         WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("list schemas")
}

/// The rows of `<schema>.dbos_migrations`, sorted.
pub async fn migration_rows(pool: &PgPool, schema: &str) -> Vec<i64> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM \"{schema}\".dbos_migrations ORDER BY 1"
    )))
    .fetch_all(pool)
    .await
    .expect("read dbos_migrations")
}

/// Asserts two snapshots are equal, showing only the lines that differ.
pub fn assert_same(left: &[String], right: &[String], what: &str) {
    if left == right {
        return;
    }
    let only_left: Vec<&String> = left.iter().filter(|l| !right.contains(l)).collect();
    let only_right: Vec<&String> = right.iter().filter(|l| !left.contains(l)).collect();
    panic!(
        "{what}: snapshots differ\n--- only in the first ({}):\n{}\n--- only in the second ({}):\n{}",
        only_left.len(),
        join(&only_left),
        only_right.len(),
        join(&only_right)
    );
}

fn join(lines: &[&String]) -> String {
    lines
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The snapshot of a SQLite system database: per table its columns (position, name, type,
/// nullability, default, key), foreign keys and indexes (columns, uniqueness, predicate), plus
/// the recorded migration version. Sorted, so two files with equal snapshots are
/// interchangeable for any client.
pub async fn sqlite_snapshot(url: &str) -> Vec<String> {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::SqliteConnection::connect(url)
        .await
        .expect("open the SQLite file");
    let objects = sqlx::query(
        "SELECT type, name, tbl_name, sql FROM sqlite_master \
         WHERE name NOT LIKE 'sqlite_%' AND name NOT LIKE 'stead\\_%' ESCAPE '\\' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .expect("read sqlite_master");
    let mut lines = Vec::new();
    for object in &objects {
        let (kind, name): (String, String) = (object.get(0), object.get(1));
        if kind == "index" {
            let sql: Option<String> = object.get(3);
            // The predicate of a partial index is only in its SQL.
            let predicate = sql
                .as_deref()
                .and_then(|s| s.split_once(" WHERE ").map(|(_, w)| w.to_owned()));
            lines.push(format!(
                "index {name} on {} where {predicate:?}",
                object.get::<String, _>(2)
            ));
            continue;
        }
        if kind != "table" {
            lines.push(format!("{kind} {name}"));
            continue;
        }
        let pragma = |p: &str| format!("SELECT * FROM pragma_{p}('{name}')");
        for row in sqlx::query(AssertSqlSafe(pragma("table_info")))
            .fetch_all(&mut conn)
            .await
            .expect("table_info")
        {
            lines.push(format!(
                "column {name} #{} {} {} notnull={} default={:?} pk={}",
                row.get::<i64, _>(0),
                row.get::<String, _>(1),
                row.get::<String, _>(2),
                row.get::<i64, _>(3),
                row.get::<Option<String>, _>(4),
                row.get::<i64, _>(5)
            ));
        }
        for row in sqlx::query(AssertSqlSafe(pragma("foreign_key_list")))
            .fetch_all(&mut conn)
            .await
            .expect("foreign_key_list")
        {
            lines.push(format!(
                "foreign key {name}.{} -> {}.{:?} update={} delete={}",
                row.get::<String, _>(3),
                row.get::<String, _>(2),
                row.get::<Option<String>, _>(4),
                row.get::<String, _>(5),
                row.get::<String, _>(6)
            ));
        }
        for index in sqlx::query(AssertSqlSafe(pragma("index_list")))
            .fetch_all(&mut conn)
            .await
            .expect("index_list")
        {
            let index_name: String = index.get(1);
            let columns: Vec<String> = sqlx::query(AssertSqlSafe(format!(
                "SELECT name, desc FROM pragma_index_xinfo('{index_name}') WHERE key = 1 ORDER BY seqno"
            )))
            .fetch_all(&mut conn)
            .await
            .expect("index_xinfo")
            .iter()
            .map(|c| {
                let desc: i64 = c.get(1);
                format!("{}{}", c.get::<Option<String>, _>(0).unwrap_or_default(), if desc == 1 { " DESC" } else { "" })
            })
            .collect();
            // Automatic indexes are named by position, which depends on declaration order only.
            lines.push(format!(
                "index {index_name} of {name} unique={} origin={} partial={} ({})",
                index.get::<i64, _>(2),
                index.get::<String, _>(3),
                index.get::<i64, _>(4),
                columns.join(", ")
            ));
        }
    }
    let version: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM dbos_migrations")
        .fetch_one(&mut conn)
        .await
        .ok()
        .flatten();
    lines.push(format!("dbos_migrations {version:?}"));
    lines.sort();
    lines
}

//! A sharded layout's record and making (`shards.rs` says what the layout is): the home's
//! `stead_sharding` row, the checks that the database is Citus, distributing a bucket schema,
//! and splitting a script into the single statements Citus takes.

use sqlx::{AssertSqlSafe, PgConnection, Row};

use crate::error::DbError;
use crate::sysdb::migrate::{MigrationReport, DBOS_SCHEMA_VERSION};
use crate::sysdb::postgres::shards::Sharding;

/// The layout's bucket count recorded in `home`, if it is sharded. Simple-protocol statements
/// (no prepared statement to meet behind a transaction pooler); `home` is a validated identifier.
pub(super) async fn read(conn: &mut PgConnection, home: &str) -> Result<Option<u16>, DbError> {
    let table = format!("\"{home}\".stead_sharding");
    let row = sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT to_regclass('{}') IS NOT NULL",
        table.replace('\'', "''")
    )))
    .fetch_one(&mut *conn)
    .await?;
    if !row.try_get::<bool, _>(0)? {
        return Ok(None);
    }
    let row = sqlx::raw_sql(AssertSqlSafe(format!("SELECT max(buckets) FROM {table}")))
        .fetch_one(&mut *conn)
        .await?;
    let n: Option<i32> = row.try_get(0)?;
    Ok(n.and_then(|n| u16::try_from(n).ok()).filter(|n| *n >= 1))
}

/// How many buckets a migration keeps or makes: the recorded count, which a different request
/// may not change; else the requested one; else one (unsharded).
pub(super) fn decide(found: Option<u16>, asked: Sharding) -> Result<u16, DbError> {
    match (found, asked.shards()) {
        (Some(n), Some(want)) if n != want => Err(DbError::Query(format!(
            "the system database is sharded into {n} buckets, and shards={want} asks for \
             another count: the count is fixed when the layout is made (export and import the \
             workflows into a new layout to change it)"
        ))),
        (Some(n), _) => Ok(n),
        (None, Some(want)) => Ok(want),
        (None, None) => Ok(1),
    }
}

/// Refuses to make a sharded layout where the `citus` extension is missing.
pub(super) async fn require_citus(conn: &mut PgConnection) -> Result<(), DbError> {
    let version: Option<String> =
        sqlx::query_scalar("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
            .fetch_optional(&mut *conn)
            .await?;
    match version {
        Some(_) => Ok(()),
        None => Err(DbError::Query(
            "sharding=citus needs the citus extension in this database (CREATE EXTENSION \
             citus, on a Citus coordinator with its workers added)"
                .into(),
        )),
    }
}

/// Whether this connection is to the cluster's coordinator (the node that takes DDL).
pub(super) async fn on_coordinator(conn: &mut PgConnection) -> Result<bool, DbError> {
    let row = sqlx::raw_sql("SELECT citus_is_coordinator()")
        .fetch_one(&mut *conn)
        .await?;
    Ok(row.try_get(0)?)
}

/// A migration through a worker: the layout must be made and current already (made through the
/// coordinator), else a typed refusal saying so.
pub(super) async fn checked(
    conn: &mut PgConnection,
    home: &str,
    found: Option<u16>,
) -> Result<MigrationReport, DbError> {
    let quoted = format!("\"{home}\"");
    let version = super::read_version(conn, home, &quoted).await?;
    match (found, version) {
        (Some(_), Some(v)) if v >= DBOS_SCHEMA_VERSION => Ok(MigrationReport {
            schema: home.to_owned(),
            found_version: Some(v),
            version: v,
            applied: false,
        }),
        _ => Err(DbError::Query(
            "this node is a Citus worker, which takes no schema change: migrate through the \
             coordinator first (stead migrate, or one executor connected to it)"
                .into(),
        )),
    }
}

/// Records the layout in `home` (once: a layout's count never changes). The table is made in
/// the home schema, which is distributed by then, so it lives beside the home's other tables.
pub(super) async fn write(
    conn: &mut PgConnection,
    home: &str,
    buckets: u16,
) -> Result<(), DbError> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS \"{home}\".stead_sharding (
             one boolean PRIMARY KEY DEFAULT true CHECK (one),
             buckets integer NOT NULL,
             made_at bigint NOT NULL DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint)"
    )))
    .execute(&mut *conn)
    .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO \"{home}\".stead_sharding (buckets) VALUES ({buckets}) ON CONFLICT DO NOTHING"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Makes `schema` a distributed schema if it is not one yet (a schema made before the
/// database was sharded, such as an unsharded home being moved into sharded mode).
pub(super) async fn distribute(conn: &mut PgConnection, schema: &str) -> Result<(), DbError> {
    let distributed: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_schema d \
         JOIN pg_catalog.pg_namespace n ON n.oid = d.schemaid WHERE n.nspname = $1)",
    )
    .bind(schema)
    .fetch_one(&mut *conn)
    .await?;
    if !distributed {
        sqlx::query("SELECT citus_schema_distribute($1::regnamespace)")
            .bind(format!("\"{schema}\""))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_keeps_its_count_and_a_request_makes_one() {
        let citus = |n| Sharding::Citus { shards: n };
        assert_eq!(decide(None, Sharding::Unset).unwrap(), 1);
        assert_eq!(decide(None, citus(8)).unwrap(), 8);
        assert_eq!(decide(Some(4), Sharding::Unset).unwrap(), 4);
        assert_eq!(decide(Some(4), citus(4)).unwrap(), 4);
        let err = decide(Some(4), citus(8)).unwrap_err().to_string();
        assert!(err.contains("sharded into 4 buckets"), "{err}");
    }
}

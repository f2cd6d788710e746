//! Transactional steps' table on a Postgres application database: `<schema>.datasource_outputs`
//! and `<schema>.dbos_datasource_migrations`, as DBOS 3.4 creates them (its migration lock key
//! included, so a DBOS Python datasource and stead migrate the same database one at a time).

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Row, Transaction};

use crate::sysdb::datasource::{AppSql, Isolation, RecordRow, Recorded, DATASOURCE_SCHEMA_VERSION};

/// DBOS's migration 1, verbatim but for the schema.
fn migration_1(schema: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".datasource_outputs (
            workflow_id TEXT NOT NULL,
            step_id INT4 NOT NULL,
            output TEXT,
            error TEXT,
            serialization TEXT,
            created_at BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())*1000)::bigint,
            PRIMARY KEY (workflow_id, step_id)
        )"
    )
}

async fn version_in(
    tx: &mut Transaction<'static, Postgres>,
    schema: &str,
) -> Result<i64, sqlx::Error> {
    let exists = sqlx::query(
        "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 \
         AND tablename = 'dbos_datasource_migrations'",
    )
    .bind(schema)
    .fetch_optional(&mut **tx)
    .await?
    .is_some();
    if !exists {
        return Ok(0);
    }
    let sql = format!("SELECT version FROM \"{schema}\".dbos_datasource_migrations");
    let row = sqlx::query(AssertSqlSafe(sql))
        .fetch_optional(&mut **tx)
        .await?;
    row.map_or(Ok(0), |r| r.try_get::<i64, _>(0))
}

#[async_trait]
impl AppSql for Postgres {
    async fn migrate(pool: &PgPool, schema: &str) -> Result<(), sqlx::Error> {
        let mut tx = pool.begin().await?;
        if version_in(&mut tx, schema).await? >= DATASOURCE_SCHEMA_VERSION {
            return tx.commit().await;
        }
        // DBOS's lock: the leading 8 bytes of SHA-256 of this text, big-endian, signed.
        sqlx::query("SET LOCAL idle_in_transaction_session_timeout = '30s'")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "SELECT pg_advisory_xact_lock(('x' || substr(encode(sha256(convert_to($1, 'UTF8')), \
             'hex'), 1, 16))::bit(64)::bigint)",
        )
        .bind(format!("dbos.datasource_migrations.{schema}"))
        .execute(&mut *tx)
        .await?;
        let current = version_in(&mut tx, schema).await?;
        if current >= DATASOURCE_SCHEMA_VERSION {
            return tx.commit().await;
        }
        let has_schema = sqlx::query("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1")
            .bind(schema)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if !has_schema {
            let sql = format!("CREATE SCHEMA \"{schema}\"");
            sqlx::query(AssertSqlSafe(sql)).execute(&mut *tx).await?;
        }
        if current == 0 {
            let sql = format!(
                "CREATE TABLE IF NOT EXISTS \"{schema}\".dbos_datasource_migrations \
                 (version BIGINT NOT NULL PRIMARY KEY)"
            );
            sqlx::query(AssertSqlSafe(sql)).execute(&mut *tx).await?;
        }
        sqlx::query(AssertSqlSafe(migration_1(schema)))
            .execute(&mut *tx)
            .await?;
        let sql = if current == 0 {
            format!("INSERT INTO \"{schema}\".dbos_datasource_migrations (version) VALUES ($1)")
        } else {
            format!("UPDATE \"{schema}\".dbos_datasource_migrations SET version = $1")
        };
        sqlx::query(AssertSqlSafe(sql))
            .bind(DATASOURCE_SCHEMA_VERSION)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    async fn schema_version(pool: &PgPool, schema: &str) -> Result<i64, sqlx::Error> {
        let mut tx = pool.begin().await?;
        let version = version_in(&mut tx, schema).await?;
        tx.commit().await?;
        Ok(version)
    }

    async fn recorded(
        pool: &PgPool,
        schema: &str,
        workflow_id: &str,
        step_id: u32,
    ) -> Result<Option<Recorded>, sqlx::Error> {
        let sql = format!(
            "SELECT output, error, serialization FROM \"{schema}\".datasource_outputs \
             WHERE workflow_id = $1 AND step_id = $2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(workflow_id)
            .bind(step_id as i32)
            .fetch_optional(pool)
            .await?;
        row.map(|r| {
            Ok(Recorded {
                output: r.try_get(0)?,
                error: r.try_get(1)?,
                serialization: r.try_get(2)?,
            })
        })
        .transpose()
    }

    async fn begin(
        pool: &PgPool,
        isolation: Isolation,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        pool.begin_with(match isolation {
            Isolation::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
            Isolation::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            Isolation::ReadCommitted => "BEGIN ISOLATION LEVEL READ COMMITTED",
        })
        .await
    }

    async fn record(
        tx: &mut Transaction<'static, Postgres>,
        schema: &str,
        row: RecordRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "INSERT INTO \"{schema}\".datasource_outputs \
               (workflow_id, step_id, output, error, serialization) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (workflow_id, step_id) DO NOTHING RETURNING workflow_id"
        );
        let inserted = sqlx::query(AssertSqlSafe(sql))
            .bind(row.workflow_id)
            .bind(row.step_id as i32)
            .bind(row.output)
            .bind(row.error)
            .bind(row.serialization)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(inserted.is_some())
    }

    async fn delete(
        tx: &mut Transaction<'static, Postgres>,
        schema: &str,
        workflow_id: &str,
        from_step: u32,
    ) -> Result<u64, sqlx::Error> {
        let sql = format!(
            "DELETE FROM \"{schema}\".datasource_outputs WHERE workflow_id = $1 AND step_id >= $2"
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(workflow_id)
            .bind(from_step as i32)
            .execute(&mut **tx)
            .await?;
        Ok(done.rows_affected())
    }

    fn is_retriable(error: &sqlx::Error) -> bool {
        match error {
            // 40001 serialization failure, 40P01 deadlock; as DBOS, also 08 (connection), 53
            // (insufficient resources), 57P0 (shutdown), 25P03 (idle transaction ended).
            sqlx::Error::Database(db) => db.code().is_some_and(|c| {
                ["40001", "40P01", "25P03"].contains(&&*c)
                    || c.starts_with("08")
                    || c.starts_with("53")
                    || c.starts_with("57P0")
            }),
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => true,
            _ => false,
        }
    }
}

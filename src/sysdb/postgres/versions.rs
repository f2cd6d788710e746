//! Application versions on Postgres.

use async_trait::async_trait;

use super::Postgres;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::rows::{all, version_from_row};
use crate::sysdb::versions::Versions;
use crate::sysdb::AppVersion;

const REGISTER: &str = r#"
INSERT INTO {s}.application_versions (version_id, version_name, version_timestamp, created_at,
    application_name)
SELECT gen_random_uuid()::text, $1, $3, $3, $2
WHERE NOT EXISTS (SELECT 1 FROM {s}.application_versions
                  WHERE version_name = $1 AND application_name IS NOT DISTINCT FROM $2)
ON CONFLICT DO NOTHING
"#;

const LIST: &str = "SELECT version_name, application_name, version_timestamp, created_at \
    FROM {s}.application_versions WHERE application_name IS NOT DISTINCT FROM $1 \
    ORDER BY version_timestamp DESC, version_name";

const PROMOTE: &str = "UPDATE {s}.application_versions SET version_timestamp = $3 \
    WHERE version_name = $1 AND application_name IS NOT DISTINCT FROM $2";

#[async_trait]
/// Versions are read from the home; on a sharded layout every bucket holds a copy, which its
/// claims read (written to each, the home first).
impl Versions for Postgres {
    async fn register_version(&self, name: &str, app: Option<&str>) -> Result<(), DbError> {
        for sql in self.buckets().iter() {
            sql.query(REGISTER)
                .bind(name)
                .bind(app)
                .bind(now_ms())
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    async fn list_versions(&self, app: Option<&str>) -> Result<Vec<AppVersion>, DbError> {
        let rows = self.sql.query(LIST).bind(app).fetch_all(&self.pool).await?;
        all(&rows, version_from_row)
    }

    async fn promote_version(&self, name: &str, app: Option<&str>) -> Result<bool, DbError> {
        let mut promoted = false;
        for (b, sql) in self.buckets().iter().enumerate() {
            let done = sql
                .query(PROMOTE)
                .bind(name)
                .bind(app)
                .bind(now_ms())
                .execute(&self.pool)
                .await?;
            promoted |= b == 0 && done.rows_affected() > 0;
        }
        Ok(promoted)
    }
}

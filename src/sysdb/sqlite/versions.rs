//! Application versions on SQLite.

use async_trait::async_trait;

use super::Sqlite;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::rows::{all, version_from_row};
use crate::sysdb::versions::Versions;
use crate::sysdb::AppVersion;

#[async_trait]
impl Versions for Sqlite {
    async fn register_version(&self, name: &str, app: Option<&str>) -> Result<(), DbError> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO application_versions (version_id, version_name, version_timestamp, \
                 created_at, application_name) \
             SELECT ?3, ?1, ?4, ?4, ?2 \
             WHERE NOT EXISTS (SELECT 1 FROM application_versions \
                               WHERE version_name = ?1 AND application_name IS ?2) \
             ON CONFLICT DO NOTHING",
        )
        .bind(name)
        .bind(app)
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn list_versions(&self, app: Option<&str>) -> Result<Vec<AppVersion>, DbError> {
        let rows = sqlx::query(
            "SELECT version_name, application_name, version_timestamp, created_at \
             FROM application_versions WHERE application_name IS ?1 \
             ORDER BY version_timestamp DESC, version_name",
        )
        .bind(app)
        .fetch_all(self.reader())
        .await?;
        all(&rows, version_from_row)
    }

    async fn promote_version(&self, name: &str, app: Option<&str>) -> Result<bool, DbError> {
        let mut tx = self.write().await?;
        let done = sqlx::query(
            "UPDATE application_versions SET version_timestamp = ?3 \
             WHERE version_name = ?1 AND application_name IS ?2",
        )
        .bind(name)
        .bind(app)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }
}

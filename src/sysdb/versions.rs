//! Application versions (`application_versions`): which versions of an application exist and
//! which is the latest (the one that may run workflows enqueued without a version).
//!
//! **App version** defaults to `DBOS__APPVERSION`, else an FNV-1a hash of the sorted workflow names
//! (`runtime/builder.rs`). A runtime registers its version here at launch (a new version is the
//! latest); `set_latest_app_version` promotes another. Work from a client carries no version
//! (unless given one); a `NULL`-versioned row is claimed only by executors of the latest version
//! (an uncorrelated `NOT EXISTS` in the claim, evaluated once per claim), as DBOS does.

use async_trait::async_trait;

use crate::error::DbError;

/// A registered application version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppVersion {
    pub name: String,
    pub app_name: Option<String>,
    /// Epoch ms; the latest version has the greatest.
    pub timestamp_ms: i64,
    pub created_at_ms: i64,
}

#[async_trait]
pub(crate) trait Versions: Send + Sync {
    /// Records version `name` of application `app`; the first launch of a version makes it the
    /// latest, a later one changes nothing.
    async fn register_version(&self, name: &str, app: Option<&str>) -> Result<(), DbError>;

    /// The versions of application `app`, latest first.
    async fn list_versions(&self, app: Option<&str>) -> Result<Vec<AppVersion>, DbError>;

    /// Makes version `name` the latest; false when it is not registered.
    async fn promote_version(&self, name: &str, app: Option<&str>) -> Result<bool, DbError>;
}

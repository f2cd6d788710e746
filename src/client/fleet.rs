//! `impl Client` for the fleet: the executors (live or dead, with their `PENDING` work), the
//! stranded workflows (a dead executor's work no live executor can run) and moving them onto a
//! version. Reads and moves only through the store; never runs workflow code.
//!
//! **Stranded work** is `PENDING` work of dead, quiet roster executors whose version no live roster
//! executor of the application serves (a deploy that retired it). It is counted in
//! `stead_workflows_stranded` and logged (WARN) on every change by each executor's scan, listed by
//! `Client::stranded_workflows`, `stead workflow stranded` and `GET /api/stranded`, and moved by
//! `Client::move_stranded(version)` / `stead workflow stranded --move-to <version>` / `POST
//! /api/stranded/move`: each goes back on its queue `ENQUEUED` under the new version, under its
//! dead executor's lock, and replays its checkpoints there. `ENQUEUED` rows of a retired version
//! are not stranded in this sense (DBOS's rules: they wait for an executor of their version; `stead
//! workflow fork --app-version` moves one). A workflow whose name no live executor of its version
//! registered is not reported either (same version, same names, in practice).

use super::manage::{ListWorkflows, WorkflowInfo};
use super::Client;
use crate::base::status::Status;
use crate::error::Result;
use crate::sysdb::ExecutorInfo;
impl Client {
    /// The stead executors that have used this database (of this client's application, or
    /// all when it has none), live ones first, with the workflows each has `PENDING`. On
    /// SQLite the list is empty: a file serves one executor, whose liveness is its file lock.
    pub async fn list_executors(&self) -> Result<Vec<ExecutorInfo>> {
        let app = self.shared().config.app_name.clone();
        Ok(self
            .shared()
            .db
            .call_with(app, |db, app| async move {
                db.list_executors(app.as_deref()).await
            })
            .await?)
    }

    /// Workflows left `PENDING` by dead executors that no live executor can run (none serves
    /// their application version), oldest first. Move them onto a version that runs with
    /// [`Client::move_stranded`] (`stead workflow stranded --move-to <version>`).
    pub async fn stranded_workflows(&self) -> Result<Vec<WorkflowInfo>> {
        let ids = self.stranded_ids().await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.list_workflows(ListWorkflows::new().ids(ids).status(Status::Pending))
            .await
    }

    /// Moves every stranded workflow onto application version `version`: each is resumed
    /// from its checkpoints on its queue (the internal one for a direct start) for executors
    /// of that version to claim. Returns how many moved.
    pub async fn move_stranded(&self, version: &str) -> Result<u64> {
        crate::names::validate_name(version, "application version")?;
        let ids = self.stranded_ids().await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let version = version.to_owned();
        Ok(self
            .shared()
            .db
            .call_with((ids, version), |db, (ids, version)| async move {
                db.move_stranded(&ids, &version).await
            })
            .await?)
    }

    async fn stranded_ids(&self) -> Result<Vec<String>> {
        let app = self.shared().config.app_name.clone();
        Ok(self
            .shared()
            .db
            .call_with(
                app,
                |db, app| async move { db.stranded(app.as_deref()).await },
            )
            .await?)
    }
}

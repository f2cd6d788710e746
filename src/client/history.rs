//! Exporting histories (feature `testing`): a workflow's status row and recorded calls, on a
//! [`Client`], as the portable history format (`testing::history`, documented there) that
//! `testing::files` replays without a database and `stead workflow export` prints.
//!
//! It reads only, and builds no SQL: the listing and the step rows come from the store.

use crate::client::manage::{ListWorkflows, WorkflowInfo};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::testing::history::{History, HistoryStep, HistoryWorkflow};

impl Client {
    /// Exports one workflow's history (its status row and every recorded call), to keep as a
    /// file ([`History::write`]) and replay against later code with
    /// [`stead::testing::replay_file`](crate::testing::replay_file).
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub async fn export_history(&self, id: &str) -> Result<History> {
        let mut found = self
            .export_histories(ListWorkflows::new().ids([id]))
            .await?;
        found.pop().ok_or_else(|| Error::NotFound(id.to_owned()))
    }

    /// Exports the history of every workflow `which` selects (by id, name, status, the newest
    /// N, ...), one read of its calls per workflow.
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub async fn export_histories(&self, which: ListWorkflows) -> Result<Vec<History>> {
        let runs = self.recorded_runs(which).await?;
        let histories = runs.into_iter().map(|(info, steps)| {
            let steps = steps.into_iter().map(HistoryStep::from_row).collect();
            History::new(workflow(info), steps)
        });
        Ok(histories.collect())
    }
}

fn workflow(info: WorkflowInfo) -> HistoryWorkflow {
    let s = info.status;
    HistoryWorkflow {
        id: s.id,
        name: s.name,
        status: s
            .stored_status
            .unwrap_or_else(|| s.status.as_str().to_owned()),
        app_name: s.app_name,
        app_version: s.app_version,
        executor_id: s.executor_id,
        queue_name: s.queue_name,
        created_at_ms: s.created_at_ms,
        updated_at_ms: s.updated_at_ms,
        parent_workflow_id: s.parent_workflow_id,
        forked_from: s.forked_from,
        attributes: s.attributes,
        serialization: info.serialization,
        input: info.input,
        output: info.output,
        // A struct of strings and JSON values always serializes.
        error: info.error.and_then(|e| serde_json::to_value(e).ok()),
    }
}

//! Dispatch outside claims: recovery of this executor's unfinished workflows, taking back a
//! crashed queue actor's workflows, and counting crash restarts against the recovery budget.

use async_trait::async_trait;

use super::claim::Claimed;
use crate::error::DbError;

/// Who this executor is, as the claim and recovery filters see it.
#[derive(Debug, Clone)]
pub(crate) struct Executor<'a> {
    pub executor_id: &'a str,
    pub app_version: &'a str,
    pub app_name: Option<&'a str>,
}

#[async_trait]
pub(crate) trait Dispatch: Send + Sync {
    /// Puts this executor's `PENDING` workflows (of its version and application) back on their
    /// queue, the internal one when they had none, so the queue actors claim them again;
    /// `any_executor`: those of every executor id (an embedded database, which one executor
    /// serves at a time). Returns how many were recovered.
    async fn recover(&self, me: &Executor<'_>, any_executor: bool) -> Result<u64, DbError>;

    /// Takes back the `PENDING` workflows of `queue` that this executor owns but runs no actor
    /// for (a crashed queue actor's, or a claim whose answer was lost): each gets a fresh owner
    /// token and one more recovery attempt. `running` are the ones it did run at `decided_ms`
    /// (this process's clock), when the take-back was decided; rows started or claimed since
    /// (`updated_at` later) are left alone, as runs the snapshot could not know. `with_direct`
    /// also takes direct starts (no queue), which the internal queue runs. In dispatch order.
    async fn redispatch(
        &self,
        me: &Executor<'_>,
        queue: &str,
        with_direct: bool,
        running: &[String],
        decided_ms: i64,
    ) -> Result<Vec<Claimed>, DbError>;

    /// Counts a crash restart of a running workflow; `None` when it is no longer ours.
    async fn bump_attempts(&self, id: &str, owner: &str) -> Result<Option<i64>, DbError>;

    /// Marks the row of a running workflow stored in another format (`PENDING` under `owner`)
    /// `portable_json`, so its outcome is read in the format stead writes it, and rewrites its
    /// inputs as the portable envelope `inputs` wherever they are stored (`workflow_input`,
    /// else the status row); `None` leaves inputs stead could not read as they are
    /// (`base::codec`, "A workflow enqueued in another format"). False when it is not ours.
    async fn adopt_inputs(
        &self,
        id: &str,
        owner: &str,
        inputs: Option<&str>,
    ) -> Result<bool, DbError>;
}

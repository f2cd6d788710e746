//! Rewinding a finished workflow under its own id (DBOS 3.4's `rewind_workflow`); the work
//! is the store's `rewind`.
//!
//! **Rewind** is one transaction per backend: events restored from `workflow_events_history`,
//! consumed and unread messages deleted, the stream close marker dropped, then `ENQUEUED` on the
//! internal queue with no owner; refusals are typed (`NotFound`, `StillActive`).

use crate::base::queue::INTERNAL_QUEUE;
use crate::client::Client;
use crate::engine::handle::WorkflowHandle;
use crate::engine::start;
use crate::error::{Error, Result};
use crate::sysdb::{Rewind, Rewound};

impl Client {
    /// Runs finished (or failed, or cancelled) workflow `id` again from call `from_step`
    /// (1-based) under the same id: its recorded calls before `from_step` replay, the rest run
    /// again. The calls dropped take their effects in the system database with them (events
    /// they published revert, messages they consumed are deleted, as are unread ones). Unlike
    /// [`Client::fork`], no new workflow is made.
    ///
    /// A workflow still running is refused ([`Error::StillActive`]: cancel it first); an
    /// unknown id is [`Error::NotFound`]. Transactional steps' records are deleted when their
    /// workflow finishes, so a rewind runs them again; a workflow that was cancelled in the
    /// middle may keep some: delete them first with [`crate::durable::Datasource::delete_records`].
    pub async fn rewind(&self, id: &str, from_step: u32) -> Result<WorkflowHandle> {
        if from_step < 1 {
            return Err(Error::InvalidArgument(format!(
                "from_step must be at least 1, got {from_step}"
            )));
        }
        let shared = self.shared();
        start::check_running(shared)?;
        let rewind = Rewind {
            id: id.to_owned(),
            from_step,
            queue: INTERNAL_QUEUE.to_owned(),
            app_version: None,
        };
        let found = shared
            .db
            .call_with(rewind, |db, r| async move { db.rewind(&r).await })
            .await?;
        match found {
            Rewound::Requeued => {
                start::wake(shared, INTERNAL_QUEUE);
                Ok(self.handle(id))
            }
            Rewound::NotFound => Err(Error::NotFound(id.to_owned())),
            Rewound::Active { status } => Err(Error::StillActive {
                id: id.to_owned(),
                status,
            }),
        }
    }
}

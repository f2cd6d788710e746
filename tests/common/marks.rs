//! A process-wide set of workflow ids a test marks, for a workflow body (a plain `fn`, with no
//! way to be handed state) to ask: "is this its second launch?" Both backends' runs of a test
//! share the process, so the ids must differ between them.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// Ids marked so far; a `static` of a test module.
pub struct Marks(OnceLock<Mutex<HashSet<String>>>);

impl Marks {
    pub const fn new() -> Marks {
        Marks(OnceLock::new())
    }

    pub fn mark(&self, id: &str) {
        self.set().insert(id.to_owned());
    }

    pub fn has(&self, id: &str) -> bool {
        self.set().contains(id)
    }

    /// A step named "gate" that holds the first launch of a run (sleeping past any test's
    /// patience) and passes once the run's id is marked: a crash point the test then relaunches
    /// past.
    pub async fn gate(&'static self, ctx: &stead::Context) -> stead::Result<()> {
        let id = ctx.workflow_id().to_owned();
        ctx.step("gate", || async move {
            if !self.has(&id) {
                tokio::time::sleep(std::time::Duration::from_secs(300)).await;
            }
            Ok(())
        })
        .await
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

//! The runtime: the handle an embedding service holds. It is a [`Client`] that also runs
//! workflows: it starts and enqueues registered workflows, hands out queue actor refs, and owns
//! the actor tree built in `launch`. Every client operation is available on it through `Deref`.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use ractor::DerivedActorRef;
use serde::Serialize;

use crate::actors::restart::RestartPolicy;
use crate::builder::RuntimeBuilder;
use crate::client::Client;
use crate::codec;
use crate::dispatch::QueueRequest;
use crate::error::Result;
use crate::handle::WorkflowHandle;
use crate::launch::{self, Declared, Part};
use crate::queue::QueueMessage;
use crate::registry::Registry;
use crate::shared::Config;
use crate::start::{self, Target, WorkflowOptions};
use crate::sysdb::Store;

/// Faults a test can inject (see `Runtime::inject_fault`).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Fault {
    /// The database actor panics.
    PanicDatabase,
    /// The named queue's actor panics (`_dbos_internal_queue` runs direct starts).
    PanicQueue(String),
}

/// A running stead runtime, embedded in a service. Cloning shares it; dropping the last clone
/// without [`Client::shutdown`] kills its actors at once (workflows stay `PENDING` and are
/// recovered by the next launch).
#[derive(Clone)]
pub struct Runtime {
    client: Client,
}

impl Deref for Runtime {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    pub(crate) async fn launch(
        config: Config,
        registry: Registry,
        declared: Declared,
        sys: Arc<dyn Store>,
        db_retry_timeout: Duration,
        restart: RestartPolicy,
    ) -> Result<Runtime> {
        let part = Part::Executor(declared);
        let tree = launch::launch(config, registry, part, sys, db_retry_timeout, restart).await?;
        Ok(Runtime {
            client: Client {
                tree: Arc::new(tree),
            },
        })
    }

    /// Starts a registered workflow now, in this process. Starting an id that exists returns a
    /// handle on the existing workflow (its result, not a second run).
    ///
    /// Dropping the returned future does not call it off: once begun, the workflow is created
    /// (and runs) as if it had been awaited.
    pub async fn start<I: Serialize>(
        &self,
        workflow: &str,
        input: I,
        options: WorkflowOptions,
    ) -> Result<WorkflowHandle> {
        let json = codec::encode(&input, &format!("the input of workflow {workflow:?}"))?;
        start::submit(self.shared(), Target::Direct, workflow, &json, options).await
    }

    /// The actor of `queue` in this process, for other actors to enqueue through
    /// ([`QueueMessage`]). A restarted queue actor has a new ref: fetch it again.
    pub fn queue_ref(&self, queue: &str) -> Result<DerivedActorRef<QueueMessage>> {
        self.client.tree.queue_ref(queue)
    }

    /// This runtime's executor id.
    pub fn executor_id(&self) -> &str {
        &self.shared().config.executor_id
    }

    /// This runtime's application version.
    pub fn app_version(&self) -> &str {
        &self.shared().config.app_version
    }

    /// Fault injection for tests: makes an actor panic as if its state were poisoned.
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: Fault) -> bool {
        let shared = self.shared();
        match fault {
            Fault::PanicDatabase => shared.db.inject_panic(),
            Fault::PanicQueue(name) => {
                let queue = shared.queues.get(&name).map(|q| q.clone());
                queue.is_some_and(|q| q.send_message(QueueRequest::Panic).is_ok())
            }
        }
    }
}

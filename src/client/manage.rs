//! Workflow management, on a [`Client`] (a runtime's too, through `Runtime::client`): list
//! workflows (their steps: `client::steps`), resume, fork, delete, move a delay, and choose the
//! latest application version. The same operations DBOS's client and CLI offer, over the same
//! rows.
//!
//! It runs no workflow code and builds no SQL: it calls the store (`sysdb::manage`).

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::base::attributes::Attributes;
use crate::base::clock::{millis, now_ms};
use crate::base::codec;
use crate::base::queue::INTERNAL_QUEUE;
use crate::base::status::{Status, WorkflowStatus};
use crate::client::Client;
use crate::durable::context::{Begun, Call, Context};
use crate::engine::handle::WorkflowHandle;
use crate::engine::start;
use crate::error::{Error, PortableError, Result};
use crate::sysdb::{AppVersion, Fork, ListQuery, ListedRow};

/// Which workflows [`Client::list_workflows`] returns. Every filter is optional; results come in
/// creation order (oldest first unless [`ListWorkflows::newest_first`]).
///
/// ```no_run
/// # async fn demo(client: stead::Client) -> stead::Result<()> {
/// use stead::{client::ListWorkflows, Status};
/// let failed = client
///     .list_workflows(ListWorkflows::new().status(Status::Error).name("checkout").limit(20))
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ListWorkflows {
    pub(super) query: ListQuery,
}

impl ListWorkflows {
    /// Every workflow, oldest first, without payloads.
    pub fn new() -> Self {
        ListWorkflows::default()
    }

    /// Only these ids.
    pub fn ids<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.query.ids = Some(ids.into_iter().map(Into::into).collect());
        self
    }

    /// Only workflows in `status` (call again to accept several).
    pub fn status(mut self, status: Status) -> Self {
        let statuses = self.query.statuses.get_or_insert_with(Vec::new);
        statuses.push(status.as_str().to_owned());
        self
    }

    /// Only workflows of this name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.query.name = Some(name.into());
        self
    }

    /// Only workflows enqueued on this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.query.queue = Some(queue.into());
        self
    }

    /// Only workflows of this application version.
    pub fn app_version(mut self, version: impl Into<String>) -> Self {
        self.query.app_version = Some(version.into());
        self
    }

    /// Only workflows of this application.
    pub fn app_name(mut self, app: impl Into<String>) -> Self {
        self.query.app_name = Some(app.into());
        self
    }

    /// Only workflows created at or after `time`.
    pub fn created_after(mut self, time: SystemTime) -> Self {
        self.query.created_from = Some(epoch_ms(time));
        self
    }

    /// Only workflows created before `time`.
    pub fn created_before(mut self, time: SystemTime) -> Self {
        self.query.created_until = Some(epoch_ms(time));
        self
    }

    /// Only children of this workflow.
    pub fn parent(mut self, parent_id: impl Into<String>) -> Self {
        self.query.parent = Some(parent_id.into());
        self
    }

    /// Only forks of this workflow.
    pub fn forked_from(mut self, id: impl Into<String>) -> Self {
        self.query.forked_from = Some(id.into());
        self
    }

    /// Only workflows last dispatched to this executor.
    pub fn executor(mut self, executor_id: impl Into<String>) -> Self {
        self.query.executor = Some(executor_id.into());
        self
    }

    /// Only workflows whose attributes contain every top-level pair of `attributes` (Postgres:
    /// JSON containment, `@>`, so an object value matches a stored object holding at least its
    /// pairs; SQLite: each key's stored value equals the given one as JSON text). An empty map
    /// filters nothing.
    pub fn attributes(mut self, attributes: Attributes) -> Self {
        self.query.attributes =
            (!attributes.is_empty()).then(|| Value::Object(attributes).to_string());
        self
    }

    /// At most `n` workflows.
    pub fn limit(mut self, n: u32) -> Self {
        self.query.limit = Some(i64::from(n));
        self
    }

    /// Skips the first `n` matches (for pages, with [`ListWorkflows::limit`]).
    pub fn offset(mut self, n: u32) -> Self {
        self.query.offset = i64::from(n);
        self
    }

    /// Newest first.
    pub fn newest_first(mut self) -> Self {
        self.query.newest_first = true;
        self
    }

    /// Also load each workflow's input, output and error.
    pub fn with_payloads(mut self) -> Self {
        self.query.payloads = true;
        self
    }
}

/// A listed workflow. Payloads are present when the listing asked for them and stead reads them
/// (portable JSON, DBOS's `py_pickle` and `js_superjson`; `serialization` says which format
/// they are stored in). Serializes as one flat object: the status record's fields, then the
/// payloads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct WorkflowInfo {
    #[serde(flatten)]
    pub status: WorkflowStatus,
    pub serialization: Option<String>,
    /// The input, as the workflow receives it.
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub error: Option<PortableError>,
}

impl WorkflowInfo {
    fn from_row(row: ListedRow) -> WorkflowInfo {
        let format = row.serialization.as_deref();
        WorkflowInfo {
            input: row
                .inputs
                .and_then(|t| codec::read_inputs(format, &t).ok())
                .map(|inputs| inputs.value),
            output: row
                .output
                .and_then(|t| codec::read(format, Some(&t), "the output").ok()),
            error: row.error.as_deref().map(|e| codec::read_error(format, e)),
            serialization: row.serialization,
            status: row.status,
        }
    }
}

/// How [`Client::fork`] copies a workflow.
#[derive(Debug, Clone, Default)]
pub struct ForkOptions {
    id: Option<String>,
    app_version: Option<String>,
    queue: Option<String>,
}

impl ForkOptions {
    /// A fork with a fresh id, the original's version, on the internal queue.
    pub fn new() -> Self {
        ForkOptions::default()
    }

    /// The id of the copy (default: a new UUID). Forking again with the same id is a no-op.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Runs the copy on executors of this version (e.g. one with a bug fixed).
    pub fn app_version(mut self, version: impl Into<String>) -> Self {
        self.app_version = Some(version.into());
        self
    }

    /// Enqueues the copy on this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
}

pub(super) fn epoch_ms(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => millis(d),
        Err(e) => -millis(e.duration()),
    }
}

impl Client {
    /// Workflows matching `filter`.
    pub async fn list_workflows(&self, filter: ListWorkflows) -> Result<Vec<WorkflowInfo>> {
        let query = filter.query;
        check_filter(&query)?;
        let rows = self
            .shared()
            .db
            .call_with(
                query,
                |db, query| async move { db.list_workflows(&query).await },
            )
            .await?;
        Ok(rows.into_iter().map(WorkflowInfo::from_row).collect())
    }

    /// Workflows waiting on or running from a queue (`ENQUEUED`, `DELAYED` or `PENDING`).
    pub async fn list_queued_workflows(&self, filter: ListWorkflows) -> Result<Vec<WorkflowInfo>> {
        let mut filter = filter;
        filter.query.queued_only = true;
        self.list_workflows(filter).await
    }

    /// Resumes workflow `id` from its last checkpoint. A paused workflow
    /// ([`Client::pause_workflow`]) is unpaused and continues on its own queue from where it
    /// stopped (nothing else changes). A cancelled, parked or stuck workflow is enqueued on the
    /// internal queue and runs again, without repeating its finished steps; an execution still
    /// running it (anywhere) is stopped first. A finished workflow is left as it is.
    pub async fn resume(&self, id: &str) -> Result<WorkflowHandle> {
        let shared = self.shared();
        start::check_running(shared)?;
        crate::names::validate_name(id, "workflow id")?;
        match self.unpause_workflow(id).await? {
            None => return Err(Error::NotFound(id.to_owned())),
            Some(true) => return Ok(self.handle(id)),
            Some(false) => {}
        }
        let target = id.to_owned();
        let resumed = shared
            .db
            .call_with(target, move |db, target| async move {
                db.resume(&target, INTERNAL_QUEUE).await
            })
            .await?;
        if !resumed.exists {
            return Err(Error::NotFound(id.to_owned()));
        }
        if let Some(owner) = resumed.previous_owner.as_deref() {
            shared.cancel_local(id, Some(owner));
        }
        if resumed.requeued {
            start::wake(shared, INTERNAL_QUEUE);
        }
        Ok(self.handle(id))
    }

    /// Copies workflow `id` into a new workflow that replays the original's calls before
    /// `from_step` and runs the rest (`from_step` 1 starts over). Returns the copy.
    pub async fn fork(
        &self,
        id: &str,
        from_step: u32,
        options: ForkOptions,
    ) -> Result<WorkflowHandle> {
        let new_id = options.id.clone().unwrap_or_else(start::new_workflow_id);
        fork_as(self.shared(), id, &new_id, from_step, options).await?;
        Ok(self.handle(new_id))
    }

    /// Deletes workflow `id` and every row that belongs to it; its children stay. A run of it in
    /// this process stops; elsewhere, its next write finds the workflow gone and stops.
    pub async fn delete(&self, id: &str) -> Result<()> {
        self.delete_tree(id, false).await
    }

    /// Deletes workflow `id` and every workflow it started, recursively.
    pub async fn delete_with_children(&self, id: &str) -> Result<()> {
        self.delete_tree(id, true).await
    }

    async fn delete_tree(&self, id: &str, cascade: bool) -> Result<()> {
        crate::names::validate_name(id, "workflow id")?;
        let shared = self.shared();
        let target = id.to_owned();
        let deleted = shared
            .db
            .call_with(target, move |db, target| async move {
                db.delete_workflow(&target, cascade).await
            })
            .await?;
        if deleted.is_empty() {
            return Err(Error::NotFound(id.to_owned()));
        }
        for gone in &deleted {
            shared.cancel_local(gone, None);
        }
        Ok(())
    }

    /// Moves the due time of `DELAYED` workflow `id` to `delay` from now.
    pub async fn set_delay(&self, id: &str, delay: Duration) -> Result<()> {
        crate::names::validate_name(id, "workflow id")?;
        let until = now_ms().saturating_add(millis(delay));
        let target = id.to_owned();
        let found = self
            .shared()
            .db
            .call_with(target, move |db, target| async move {
                db.set_delay(&target, until).await
            })
            .await?;
        let Some(found) = found else {
            return Err(Error::NotFound(id.to_owned()));
        };
        match found.status.as_deref() {
            Some("DELAYED") => {
                // The queue's actor here may wait for the old due time: wake it (on Postgres
                // the statement's NOTIFY also does; SQLite has none).
                if let Some(queue) = &found.queue {
                    start::wake(self.shared(), queue);
                }
                Ok(())
            }
            other => Err(Error::InvalidArgument(format!(
                "workflow {id:?} is {}, not DELAYED: only a delayed workflow's delay can change",
                other.unwrap_or("without a status")
            ))),
        }
    }

    /// The registered versions of this application, latest first.
    pub async fn app_versions(&self) -> Result<Vec<AppVersion>> {
        let app = self.shared().config.app_name.clone();
        Ok(self
            .shared()
            .db
            .call_with(app, move |db, app| async move {
                db.list_versions(app.as_deref()).await
            })
            .await?)
    }

    /// Makes `version` the latest: workflows enqueued without a version go to its executors.
    pub async fn set_latest_app_version(&self, version: &str) -> Result<()> {
        let app = self.shared().config.app_name.clone();
        let name = version.to_owned();
        let promoted = self
            .shared()
            .db
            .call_with((app, name), move |db, (app, name)| async move {
                db.promote_version(&name, app.as_deref()).await
            })
            .await?;
        if promoted {
            Ok(())
        } else {
            Err(Error::UnknownAppVersion(version.to_owned()))
        }
    }
}

/// Refuses filter values no stored row can hold (a NUL byte, an over-long name), so a bad
/// filter is the caller's error rather than the database's.
pub(super) fn check_filter(q: &ListQuery) -> Result<()> {
    for id in q.ids.iter().flatten() {
        crate::names::validate_name(id, "workflow id")?;
    }
    let texts = [
        (&q.name, "workflow name"),
        (&q.queue, "queue name"),
        (&q.app_version, "application version"),
        (&q.app_name, "application name"),
        (&q.parent, "parent workflow id"),
        (&q.forked_from, "workflow id"),
        (&q.executor, "executor id"),
    ];
    for (value, what) in texts {
        if let Some(value) = value {
            crate::names::validate_text(value, what)?;
        }
    }
    if let Some(attributes) = &q.attributes {
        crate::base::attributes::check_encoded(attributes)?;
    }
    Ok(())
}

async fn fork_as(
    shared: &crate::engine::shared::SharedRef,
    id: &str,
    new_id: &str,
    from_step: u32,
    options: ForkOptions,
) -> Result<()> {
    start::check_running(shared)?;
    crate::names::validate_name(id, "workflow id")?;
    crate::names::validate_name(new_id, "a fork's id")?;
    if from_step == 0 {
        return Err(Error::InvalidArgument(
            "fork step 0: steps count from 1 (1 starts over)".into(),
        ));
    }
    let from = i32::try_from(from_step).map_err(|_| {
        Error::InvalidArgument(format!("step {from_step} is beyond any workflow's steps"))
    })?;
    let fork = Fork {
        id: id.to_owned(),
        new_id: new_id.to_owned(),
        queue: options.queue.unwrap_or_else(|| INTERNAL_QUEUE.to_owned()),
        app_version: options.app_version,
        from_step: from,
    };
    let queue = fork.queue.clone();
    let forked = shared
        .db
        .call_with(fork, |db, fork| async move { db.fork(&fork).await })
        .await?;
    if !forked.exists {
        return Err(Error::NotFound(id.to_owned()));
    }
    start::wake(shared, &queue);
    Ok(())
}

impl Context {
    /// Forks workflow `id` from `from_step` (see [`Client::fork`]) as a durable call: the copy's
    /// id is `<this workflow>-<call>`, so a replay returns the same copy instead of forking again.
    pub fn fork_workflow<'c>(
        &'c self,
        id: &'c str,
        from_step: u32,
        options: ForkOptions,
    ) -> impl Future<Output = Result<WorkflowHandle>> + Send + 'c {
        const NAME: &str = "stead.fork";
        let function_id = self.next_function_id();
        async move {
            let busy = match self.begin(function_id, NAME).await? {
                Begun::Recorded(row) => {
                    let new_id: String = codec::decode(row.output.as_deref(), "a recorded fork")?;
                    return Ok(WorkflowHandle::new(new_id, self.shared().clone()));
                }
                Begun::Fresh(busy) => busy,
            };
            let started = now_ms();
            let new_id = options
                .id
                .clone()
                .unwrap_or_else(|| format!("{}-{function_id}", self.workflow_id()));
            fork_as(self.shared(), id, &new_id, from_step, options).await?;
            drop(busy);
            let output = codec::encode(&new_id, "a fork's id")?;
            self.record(Call::new(function_id, NAME, started).output(output))
                .await?;
            Ok(WorkflowHandle::new(new_id, self.shared().clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::codec::PORTABLE_JSON;

    #[test]
    fn filters_accumulate_statuses_and_keep_the_rest() {
        let f = ListWorkflows::new()
            .status(Status::Error)
            .status(Status::Cancelled)
            .name("n")
            .limit(5)
            .offset(10)
            .newest_first();
        assert_eq!(
            f.query.statuses,
            Some(vec!["ERROR".to_owned(), "CANCELLED".to_owned()])
        );
        assert_eq!(f.query.name.as_deref(), Some("n"));
        assert_eq!((f.query.limit, f.query.offset), (Some(5), 10));
        assert!(f.query.newest_first && !f.query.payloads);
    }

    #[test]
    fn times_before_the_epoch_are_negative() {
        assert_eq!(epoch_ms(UNIX_EPOCH + Duration::from_millis(1500)), 1500);
        assert_eq!(epoch_ms(UNIX_EPOCH - Duration::from_millis(20)), -20);
    }

    #[test]
    fn payloads_are_read_in_their_format_and_others_not_guessed() {
        let row = |ser: &str, inputs: &str, output: &str| ListedRow {
            status: WorkflowStatus {
                id: "w".into(),
                name: "n".into(),
                status: Status::Success,
                executor_id: None,
                app_version: None,
                app_name: None,
                queue_name: None,
                recovery_attempts: 0,
                created_at_ms: 0,
                updated_at_ms: 0,
                started_at_ms: None,
                completed_at_ms: None,
                parent_workflow_id: None,
                forked_from: None,
                timeout_ms: None,
                deadline_ms: None,
                priority: 0,
                deduplication_id: None,
                partition_key: None,
                delay_until_ms: None,
                attributes: None,
                paused_at_ms: None,
                continued_from: None,
                continued_as: None,
                stored_status: None,
            },
            inputs: Some(inputs.into()),
            output: Some(output.into()),
            error: None,
            serialization: Some(ser.into()),
        };
        let envelope = r#"{"positionalArgs":[7],"namedArgs":{}}"#;
        let portable = WorkflowInfo::from_row(row(PORTABLE_JSON, envelope, "42"));
        assert_eq!(portable.input, Some(Value::from(7)));
        assert_eq!(portable.output, Some(Value::from(42)));
        // pickle.dumps({'args': (7,), 'kwargs': {}}) and pickle.dumps(42), protocol 4.
        let inputs = "gASVGwAAAAAAAAB9lCiMBGFyZ3OUSweFlIwGa3dhcmdzlH2UdS4=";
        let pickled = WorkflowInfo::from_row(row("py_pickle", inputs, "gARLKi4="));
        assert_eq!(
            (pickled.input, pickled.output),
            (Some(7.into()), Some(42.into()))
        );
        // JSON text under a name stead does not read is not guessed at.
        let custom = WorkflowInfo::from_row(row("custom_serializer", envelope, "42"));
        assert_eq!((custom.input, custom.output), (None, None));
    }
}

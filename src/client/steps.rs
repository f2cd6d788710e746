//! A workflow's recorded calls, on a [`Client`]: all of them ([`Client::steps`]), a page of them
//! with or without their outputs ([`Client::list_steps`]), or one with its output
//! ([`Client::step`]). The CLI, the admin API and the dashboard's timeline read them here.
//!
//! **Steps listed without their outputs.** A history can be large (a step returning 10 MB, a
//! workflow of 100,000 steps; DBOS users ran out of memory listing a 180 MB one), so a listing
//! can leave outputs and errors out, reporting only their sizes, and comes in pages:
//! [`ListSteps`] starts a page after a function id (keyset on the primary key, so the last page
//! costs what the first does) and [`StepPage::next`] is the following page's start. A page
//! reads one call past its limit to know whether another follows (as `stead workflow list`
//! does; with outputs, that call's output too), so `next` is `None` exactly on the last page.
//! One call with its output is the page of one after the id before it: the same statement,
//! answered from the primary key. [`Client::steps`] keeps its meaning: every call, with its
//! output.
//!
//! It builds no SQL: it calls the store (`sysdb::manage`).

use serde::Serialize;
use serde_json::Value;

use crate::base::codec;
use crate::client::manage::{ListWorkflows, WorkflowInfo};
use crate::client::Client;
use crate::error::{PortableError, Result};
use crate::sysdb::{StepListing, StepQuery, StepRow};

/// Which of a workflow's recorded calls [`Client::list_steps`] returns, in function id order:
/// every one with its output unless told otherwise.
///
/// ```no_run
/// # async fn demo(client: stead::Client) -> stead::Result<()> {
/// use stead::client::ListSteps;
/// let pages = ListSteps::new().without_outputs().limit(1000);
/// let mut page = client.list_steps("order-1", pages).await?;
/// while let Some(last) = page.next {
///     page = client.list_steps("order-1", pages.after(last)).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ListSteps {
    query: StepQuery,
}

impl Default for ListSteps {
    fn default() -> Self {
        ListSteps {
            query: StepQuery::ALL,
        }
    }
}

impl ListSteps {
    /// Every call, with its output.
    pub fn new() -> Self {
        ListSteps::default()
    }

    /// Leaves outputs and errors out, unread by the database; their sizes stay
    /// ([`StepInfo::output_bytes`], [`StepInfo::error_bytes`]).
    pub fn without_outputs(mut self) -> Self {
        self.query.outputs = false;
        self
    }

    /// Only calls after function id `function_id` (a page's [`StepPage::next`]).
    pub fn after(mut self, function_id: i32) -> Self {
        self.query.after = function_id;
        self
    }

    /// At most `n` calls (at least one).
    pub fn limit(mut self, n: u32) -> Self {
        self.query.limit = Some(i64::from(n.max(1)));
        self
    }
}

/// A page of a workflow's recorded calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct StepPage {
    pub steps: Vec<StepInfo>,
    /// When more calls follow, the function id this page ends at: the next page is
    /// [`ListSteps::after`] it.
    pub next: Option<i32>,
}

/// One recorded durable call of a workflow: a step, a sleep, a send, a child start...
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct StepInfo {
    /// Its position in the workflow (from 1).
    pub function_id: i32,
    pub name: String,
    /// Present when it has one in a format stead reads (portable JSON, DBOS's pickle or
    /// SuperJSON, read as JSON) and the listing loaded outputs.
    pub output: Option<Value>,
    /// Present when it failed and the listing loaded outputs.
    pub error: Option<PortableError>,
    /// The stored output's size in bytes, loaded or not; `None` when it has none.
    pub output_bytes: Option<u64>,
    /// The stored error's size in bytes, loaded or not; `None` when it has none.
    pub error_bytes: Option<u64>,
    /// The child workflow it started, if any.
    pub child_workflow_id: Option<String>,
    pub started_at_ms: Option<i64>,
    pub completed_at_ms: Option<i64>,
}

impl From<StepListing> for StepInfo {
    fn from(s: StepListing) -> StepInfo {
        let format = s.serialization.as_deref();
        let bytes = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
        StepInfo {
            function_id: s.function_id,
            name: s.name,
            output: s
                .output
                .and_then(|t| codec::read(format, Some(&t), "the output").ok()),
            error: s.error.as_deref().map(|e| codec::read_error(format, e)),
            output_bytes: bytes(s.output_bytes),
            error_bytes: bytes(s.error_bytes),
            child_workflow_id: s.child_workflow_id,
            started_at_ms: s.started_at,
            completed_at_ms: s.completed_at,
        }
    }
}

impl Client {
    /// The recorded durable calls of workflow `id`, in order, with their outputs: all of them
    /// at once (for a long history, [`Client::list_steps`] pages).
    pub async fn steps(&self, id: &str) -> Result<Vec<StepInfo>> {
        Ok(self.list_steps(id, ListSteps::new()).await?.steps)
    }

    /// A page of workflow `id`'s recorded calls (none for an unknown workflow).
    pub async fn list_steps(&self, id: &str, listing: ListSteps) -> Result<StepPage> {
        let limit = listing.query.limit;
        // One call past the page says whether another follows.
        let past = StepQuery {
            limit: limit.map(|n| n.saturating_add(1)),
            ..listing.query
        };
        let mut rows = self.query_steps(id, past).await?;
        let shown = limit.and_then(|n| usize::try_from(n).ok());
        let next = match shown {
            Some(n) if rows.len() > n => {
                rows.truncate(n);
                rows.last().map(|s| s.function_id)
            }
            _ => None,
        };
        let steps = rows.into_iter().map(StepInfo::from).collect();
        Ok(StepPage { steps, next })
    }

    /// Recorded call `function_id` of workflow `id`, with its output and error; `None` when
    /// there is no such call.
    pub async fn step(&self, id: &str, function_id: i32) -> Result<Option<StepInfo>> {
        let Some(before) = function_id.checked_sub(1) else {
            return Ok(None);
        };
        let one = StepQuery {
            outputs: true,
            after: before,
            limit: Some(1),
        };
        let rows = self.query_steps(id, one).await?;
        let found = rows.into_iter().find(|s| s.function_id == function_id);
        Ok(found.map(StepInfo::from))
    }

    /// The workflows `which` selects, each with its payloads and its recorded calls as stored:
    /// the histories verification replays and `export_histories` writes.
    pub(crate) async fn recorded_runs(
        &self,
        which: ListWorkflows,
    ) -> Result<Vec<(WorkflowInfo, Vec<StepRow>)>> {
        let listed = self.list_workflows(which.with_payloads()).await?;
        let mut runs = Vec::with_capacity(listed.len());
        for info in listed {
            let steps = self.shared().db.load_steps(&info.status.id).await?;
            runs.push((info, steps));
        }
        Ok(runs)
    }

    async fn query_steps(&self, id: &str, query: StepQuery) -> Result<Vec<StepListing>> {
        crate::names::validate_name(id, "workflow id")?;
        let target = id.to_owned();
        Ok(self
            .shared()
            .db
            .call_with(target, move |db, target| async move {
                db.list_steps(&target, &query).await
            })
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::codec::PORTABLE_JSON;

    #[test]
    fn a_listing_is_everything_until_narrowed() {
        assert_eq!(ListSteps::new().query, StepQuery::ALL);
        let page = ListSteps::new().without_outputs().after(7).limit(0).query;
        assert_eq!(
            page,
            StepQuery {
                outputs: false,
                after: 7,
                limit: Some(1),
            }
        );
    }

    #[test]
    fn sizes_come_without_outputs_and_other_formats_are_not_guessed() {
        let listed = |output: Option<&str>, serialization: &str| StepListing {
            function_id: 1,
            name: "s".into(),
            output: output.map(str::to_owned),
            error: None,
            child_workflow_id: None,
            started_at: None,
            completed_at: None,
            serialization: Some(serialization.into()),
            output_bytes: Some(2),
            error_bytes: None,
        };
        let loaded = StepInfo::from(listed(Some("42"), PORTABLE_JSON));
        assert_eq!(
            (loaded.output, loaded.output_bytes),
            (Some(42.into()), Some(2))
        );
        let bare = StepInfo::from(listed(None, PORTABLE_JSON));
        assert_eq!((bare.output, bare.output_bytes), (None, Some(2)));
        let pickled = StepInfo::from(listed(Some("gARLKi4="), "py_pickle"));
        assert_eq!(pickled.output, Some(42.into()), "pickle.dumps(42)");
        let custom = StepInfo::from(listed(Some("42"), "custom_serializer"));
        assert_eq!(custom.output, None);
    }
}

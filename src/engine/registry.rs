//! Registered workflows: typed `async fn(Context, I) -> Result<O, E>` erased to one shape the
//! workflow actor can run, keyed by name.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::base::codec;
use crate::base::limits::HistoryLimits;
use crate::base::metrics::WorkflowMetrics;
use crate::base::user_error::{short_type_name, UserErrors};
use crate::durable::context::Context;
use crate::error::{Error, PortableError};

/// What a workflow's run produces: its output as portable JSON, or its error.
pub(crate) type Outcome = Result<String, PortableError>;
type RunFn = Arc<dyn Fn(Context, Value) -> BoxFuture<'static, Outcome> + Send + Sync>;
type CheckFn = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// A workflow body: an `async fn(Context, I) -> Result<O, E>` (or a closure of that shape)
/// with a serde `I` and `O` and any error convertible to a boxed error. Implemented for every
/// such function; sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a workflow taking `{I}` and returning `{O}`",
    label = "expected an `async fn(Context, {I}) -> Result<{O}, E>`"
)]
pub trait WorkflowFn<I, O>: Send + Sync + 'static + sealed::Sealed<I, O> {
    /// The body's error.
    type Error: Into<Box<dyn StdError + Send + Sync>> + Send + 'static;
    /// The run.
    type Future: Future<Output = Result<O, Self::Error>> + Send + 'static;
    /// Starts a run.
    fn call(&self, ctx: Context, input: I) -> Self::Future;
}

impl<F, Fut, I, O, E> WorkflowFn<I, O> for F
where
    F: Fn(Context, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + Send + 'static,
{
    type Error = E;
    type Future = Fut;

    fn call(&self, ctx: Context, input: I) -> Fut {
        self(ctx, input)
    }
}

mod sealed {
    pub trait Sealed<I, O> {}

    impl<F, Fut, I, O, E> Sealed<I, O> for F
    where
        F: Fn(crate::durable::context::Context, I) -> Fut,
        Fut: std::future::Future<Output = Result<O, E>>,
    {
    }
}

/// Per-workflow settings given at registration.
#[derive(Debug, Clone)]
pub struct WorkflowConfig {
    pub(crate) max_recovery_attempts: u32,
    pub(crate) history_limits: Option<HistoryLimits>,
}

impl Default for WorkflowConfig {
    /// DBOS's default: 100 recovery attempts; the runtime's history limits.
    fn default() -> Self {
        WorkflowConfig {
            max_recovery_attempts: 100,
            history_limits: None,
        }
    }
}

impl WorkflowConfig {
    /// How often a crashed run may be restarted (recovered, or replayed after a panic) before the
    /// workflow is parked as `MAX_RECOVERY_ATTEMPTS_EXCEEDED`.
    pub fn max_recovery_attempts(mut self, attempts: u32) -> Self {
        self.max_recovery_attempts = attempts;
        self
    }

    /// How much history one run of this workflow may record, instead of the runtime's
    /// ([`RuntimeBuilder::history_limits`](crate::RuntimeBuilder::history_limits)).
    pub fn history_limits(mut self, limits: HistoryLimits) -> Self {
        self.history_limits = Some(limits);
        self
    }
}

/// One registered workflow.
pub(crate) struct Entry {
    pub name: String,
    pub config: WorkflowConfig,
    metrics: OnceLock<Arc<WorkflowMetrics>>,
    run: RunFn,
    check_input: CheckFn,
}

impl Entry {
    /// Starts the workflow body; the future is the whole run.
    pub(crate) fn run(&self, ctx: Context, input: Value) -> BoxFuture<'static, Outcome> {
        (self.run)(ctx, input)
    }

    /// This workflow's metric handles, registered at first use.
    pub(crate) fn metrics(&self) -> &Arc<WorkflowMetrics> {
        self.metrics
            .get_or_init(|| WorkflowMetrics::new(&self.name))
    }

    /// Checks that `input` (JSON text) deserializes into the workflow's input type.
    pub(crate) fn check_input(&self, input: &str) -> Result<(), Error> {
        (self.check_input)(input).map_err(|reason| Error::Input {
            workflow: self.name.clone(),
            reason,
        })
    }
}

/// The workflows a runtime can run.
#[derive(Default)]
pub(crate) struct Registry {
    entries: BTreeMap<String, Arc<Entry>>,
    /// Error types stored with their serde data (workflow and step errors alike).
    pub errors: UserErrors,
}

impl Registry {
    /// Registers `f` under `name`; a name can be registered once.
    pub(crate) fn add<F, I, O>(
        &mut self,
        name: &str,
        f: F,
        config: WorkflowConfig,
    ) -> Result<(), Error>
    where
        F: WorkflowFn<I, O>,
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
    {
        crate::names::validate_name(name, "workflow name")?;
        if self.entries.contains_key(name) {
            return Err(Error::DuplicateWorkflow(name.to_owned()));
        }
        let f = Arc::new(f);
        let workflow = name.to_owned();
        let run: RunFn = Arc::new(move |ctx, input| {
            let f = f.clone();
            let workflow = workflow.clone();
            let shared = ctx.shared().clone();
            Box::pin(async move {
                let input: I = serde_json::from_value(input).map_err(|e| {
                    PortableError::new(
                        "InputError",
                        format!("input for workflow {workflow:?} does not fit its type: {e}"),
                    )
                })?;
                match f.call(ctx, input).await {
                    Ok(output) => codec::encode(&output, "the workflow's output")
                        .and_then(|text| {
                            let what = || format!("the output of workflow {workflow:?}");
                            shared.config.check_value(&text, what).map(|()| text)
                        })
                        .map_err(|e| e.to_portable()),
                    Err(e) => Err(to_portable::<F::Error>(e.into(), &shared.registry.errors)),
                }
            })
        });
        let check_input: CheckFn = Arc::new(|v| {
            serde_json::from_str::<I>(v)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        self.entries.insert(
            name.to_owned(),
            Arc::new(Entry {
                name: name.to_owned(),
                config,
                metrics: OnceLock::new(),
                run,
                check_input,
            }),
        );
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Entry>> {
        self.entries.get(name)
    }

    /// Registered names, sorted (the default application version is derived from them).
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }
}

/// Turns a workflow's error into the stored form, keeping stead's own errors recognisable and
/// registered error types' data.
fn to_portable<E>(e: Box<dyn StdError + Send + Sync>, errors: &UserErrors) -> PortableError {
    let e = match e.downcast::<PortableError>() {
        Ok(p) => return *p,
        Err(e) => e,
    };
    match e.downcast::<Error>() {
        Ok(stead) => stead.to_portable(),
        Err(other) => errors
            .portable(other.as_ref())
            .unwrap_or_else(|| PortableError::new(short_type_name::<E>(), codec::describe(&other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("card declined")]
    struct PaymentError;

    #[test]
    fn user_errors_are_named_by_their_type() {
        let none = UserErrors::default();
        let p = to_portable::<PaymentError>(Box::new(PaymentError), &none);
        assert_eq!(p, PortableError::new("PaymentError", "card declined"));
        let boxed = to_portable::<Box<dyn StdError + Send + Sync>>("plain".into(), &none);
        assert_eq!(boxed.name, "Error");
    }

    #[test]
    fn portable_errors_pass_through_unchanged() {
        let mine = PortableError {
            code: Some(serde_json::json!(402)),
            ..PortableError::new("Declined", "no funds")
        };
        let none = UserErrors::default();
        assert_eq!(
            to_portable::<PortableError>(Box::new(mine.clone()), &none),
            mine
        );
    }
}

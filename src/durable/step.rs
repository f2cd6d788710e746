//! Steps: a closure run at most once to success per workflow, with retries. Replays return the
//! recorded outcome instead of running it. A fresh step's record is held back in the `Context` when
//! the step returns, and written before the next durable call begins (`Context::begin`), in the
//! background as soon as the body waits on anything else, or with the workflow's outcome.
//!
//! `Context::step` lives here; its builder's type says whether the closure may be called more than
//! once (`FnMut` with retries, `FnOnce` without).
//!
//! **A workflow's last step is recorded with its outcome.** Holding the record back, instead of
//! writing it before the step returns, lets a body that runs on from its last step to its end
//! without waiting hand the record to the finish, which writes both in one statement (Postgres: the
//! checkpoint insert as a CTE, the status update guarded on it; SQLite: one transaction): one
//! commit and one statement less per workflow. Before anything of the next durable call happens (a
//! step's body, an op, a child's start, a transaction, a fork, any record) the held records are
//! written; when the body waits on anything else (the workflow actor polls the body and starts the
//! write on its first `Pending`) they are written in the background. They are written in tasks of
//! their own, so a caller that drops its future (a `select`) loses none; a body that panics has
//! them written before its restart. A crash of the process before that commit runs the step again,
//! as a crash before any checkpoint does; after it, nothing runs again. A step already recorded by
//! another attempt of the same run (`FinishOutcome::StepConflict`) finishes nothing: the run
//! restarts and replays the recorded step. A held record the database refuses for good fails the
//! call that writes it, typed, without a restart: the next durable call, or the outcome (recorded
//! as `ERROR` with the refusal). The step itself has already returned. Eviction never drops a held
//! record: every wait begins with a durable call.
//!
//! **Step closures.** `Context::step` fixes the closure's error type to `BoxError`: `Ok(v)` needs
//! no turbofish and `?` converts any `std::error::Error`. `Context::step_typed` takes the closure's
//! own `E: Into<BoxError>`. Both bound the closure through the sealed marker trait `StepFn<T, E>`
//! rather than an `Fn*` bound: an `FnOnce` bound on `step` would make rustc infer every closure
//! passed to it as `FnOnce` (closure kinds follow the expected bound), and `.retry(..)` could then
//! never accept one. Each builder state's `IntoFuture` is one `Box::pin` of the same `run` (replay
//! or attempts, then the record).
//!
//! **Step timeouts** (DBOS 3.4's `timeout_seconds`). When the last attempt timed out, the outcome
//! `Error::StepTimeout` is stored in DBOS's shape for `DBOSStepTimeoutError` (`name`, message `DBOS
//! Error 18: Step <name> was cancelled after exceeding its timeout of <s> seconds`, `code` 18,
//! `data` with the attempts), so a replay, and a DBOS step timeout recorded by Python, read back as
//! `Error::StepTimeout`. DBOS wraps an exhausted retry in `DBOSMaxStepRetriesExceeded`; stead keeps
//! the last attempt's kind, which is what a caller matches on. Past the workflow's deadline, once
//! the actor has cancelled the run, a running step drops its body's future and returns `Cancelled`
//! (nothing is recorded).

use std::error::Error as StdError;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use crate::base::backoff::Backoff;
use crate::base::clock::now_ms;
use crate::base::codec;
use crate::base::user_error::UserErrors;
use crate::durable::context::{Begun, Call, Context};
use crate::error::{Error, Result, StepError, StepTimeout};
use crate::sysdb::StepRow;

/// The error type a step's closure may fail with: anything convertible to a boxed error.
pub type BoxError = Box<dyn StdError + Send + Sync>;
type RetryIf = Arc<dyn Fn(&(dyn StdError + Send + Sync + 'static)) -> bool + Send + Sync>;

/// How a failing step is retried. The default runs a step once.
///
/// ```
/// use std::time::Duration;
/// let policy = stead::RetryPolicy::attempts(5)
///     .interval(Duration::from_millis(200))
///     .backoff_rate(2.0)
///     .max_interval(Duration::from_secs(5))
///     .retry_if(|e| !e.to_string().contains("declined"));
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    backoff: Backoff,
    retry_if: Option<RetryIf>,
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy::attempts(1)
    }

    /// Up to `max_attempts` attempts in all, 1 s apart at first, doubling, at most 1 min apart.
    pub fn attempts(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts: max_attempts.max(1),
            backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60)),
            retry_if: None,
        }
    }

    /// The wait before the first retry.
    pub fn interval(mut self, interval: Duration) -> RetryPolicy {
        self.backoff.initial = interval;
        self
    }

    /// The factor between consecutive waits.
    pub fn backoff_rate(mut self, rate: f64) -> RetryPolicy {
        self.backoff.rate = rate;
        self
    }

    /// The longest wait between attempts.
    pub fn max_interval(mut self, max: Duration) -> RetryPolicy {
        self.backoff.max = max;
        self
    }

    /// Retries only errors for which `predicate` is true; others fail the step at once.
    pub fn retry_if(
        mut self,
        predicate: impl Fn(&(dyn StdError + Send + Sync + 'static)) -> bool + Send + Sync + 'static,
    ) -> RetryPolicy {
        self.retry_if = Some(Arc::new(predicate));
        self
    }

    fn should_retry(&self, attempt: u32, error: &(dyn StdError + Send + Sync + 'static)) -> bool {
        attempt < self.max_attempts && self.retry_if.as_ref().is_none_or(|p| p(error))
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .field("retry_if", &self.retry_if.is_some())
            .finish()
    }
}

impl Context {
    /// A durable step: `f` runs at most once to success across crashes; a replay returns the
    /// recorded output (or error) without running it. Await it, optionally after `.retry(..)`.
    ///
    /// `f` is a closure returning a future of `Result<T, BoxError>`: `Ok(v)` needs no type
    /// annotation, and `?` converts any error into a [`BoxError`]. (To keep a function's own
    /// error type, use [`Context::step_typed`].)
    ///
    /// The types enforce how often `f` may be called: without `.retry(..)` it is called once,
    /// so any `FnOnce` closure will do and it may move owned values out of its captures; with
    /// `.retry(policy)` it is called once per attempt, so `.retry` accepts only an `FnMut`
    /// closure (clone what it moves, inside the closure).
    ///
    /// ```no_run
    /// # async fn charge(_: u32, _: &str) -> Result<String, std::io::Error> { Ok("r-1".into()) }
    /// async fn checkout(ctx: stead::Context, order: u32) -> stead::Result<String> {
    ///     let card = ctx.step("card", || async { Ok(format!("card-of-{order}")) }).await?;
    ///     // Retried: called once per attempt, so it borrows `card` instead of moving it.
    ///     let receipt = ctx
    ///         .step("charge", || async { Ok(charge(order, &card).await?) })
    ///         .retry(stead::RetryPolicy::attempts(3))
    ///         .await?;
    ///     // Not retried: called once, so it may move `receipt` into its future.
    ///     ctx.step("log", move || async move { Ok(format!("sent {receipt}")) }).await
    /// }
    /// ```
    ///
    /// A closure that moves its captures does not retry:
    ///
    /// ```compile_fail,E0525
    /// # async fn demo(ctx: stead::Context, receipt: String) -> stead::Result<String> {
    /// ctx.step("log", move || async move { Ok(receipt) })
    ///     .retry(stead::RetryPolicy::attempts(3))
    ///     .await
    /// # }
    /// ```
    pub fn step<'c, F, T>(&'c self, name: &'c str, f: F) -> Step<'c, F>
    where
        F: StepFn<T, BoxError>,
        T: Serialize + DeserializeOwned + Send,
    {
        Step {
            ctx: self,
            name,
            f,
            retry: (),
            timeout: None,
        }
    }

    /// [`Context::step`] for a closure with its own error type `E` (e.g. `|| charge(order)`
    /// where `charge` returns `Result<T, PaymentError>`). The same rules apply; the error is
    /// recorded as [`Context::step`] records it.
    pub fn step_typed<'c, F, T, E>(&'c self, name: &'c str, f: F) -> Step<'c, F>
    where
        F: StepFn<T, E>,
        T: Serialize + DeserializeOwned + Send,
        E: Into<BoxError>,
    {
        Step {
            ctx: self,
            name,
            f,
            retry: (),
            timeout: None,
        }
    }
}

/// A step's body: a `Send` closure, called with no arguments, returning a `Send` future of
/// `Result<T, E>`. Implemented for every such closure; sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a step body returning `Result<{T}, {E}>`",
    label = "expected a closure like `|| async {{ Ok(value) }}`, returning a future of `Result<{T}, {E}>`"
)]
pub trait StepFn<T, E>: sealed::Sealed<T, E> {}

impl<F, Fut, T, E> StepFn<T, E> for F
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = std::result::Result<T, E>> + Send,
{
}

mod sealed {
    pub trait Sealed<T, E> {}

    impl<F, Fut, T, E> Sealed<T, E> for F
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
    }
}

/// A step about to run; `.await` it. Built by [`Context::step`] (or [`Context::step_typed`]).
///
/// `R` is `()` until [`retry`](Step::retry) makes it a [`RetryPolicy`]: the body is then called
/// once per attempt, so it must be `FnMut`; before, once, so `FnOnce` is enough.
#[must_use = "a step does nothing until awaited"]
pub struct Step<'c, F, R = ()> {
    ctx: &'c Context,
    name: &'c str,
    f: F,
    retry: R,
    timeout: Option<Duration>,
}

impl<'c, F, R> Step<'c, F, R> {
    /// Bounds each attempt: past `limit` the body's future is dropped and the attempt fails
    /// with a [`StepTimeout`]; the retry policy then applies as to any failure (each attempt
    /// gets the full `limit`; waits between attempts do not count). When the last attempt
    /// timed out, the step fails with [`Error::StepTimeout`]. A zero `limit` is refused
    /// ([`Error::InvalidArgument`]) before the body runs.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Takes the step's number, here in program order so concurrent steps replay identically,
    /// and parts the step into its context, limit, body and retry policy.
    fn numbered(self) -> (&'c Context, Limit<'c>, F, R) {
        let limit = Limit {
            name: self.name,
            function_id: self.ctx.next_function_id(),
            timeout: self.timeout,
            errors: &self.ctx.shared().registry.errors,
        };
        (self.ctx, limit, self.f, self.retry)
    }
}

impl<'c, F> Step<'c, F> {
    /// Retries failures as `policy` says. The body is called once per attempt, so it must be
    /// callable more than once (`FnMut`).
    pub fn retry<Fut>(self, policy: RetryPolicy) -> Step<'c, F, RetryPolicy>
    where
        F: FnMut() -> Fut,
    {
        Step {
            ctx: self.ctx,
            name: self.name,
            f: self.f,
            retry: policy,
            timeout: self.timeout,
        }
    }
}

impl<'c, F, Fut, T, E> IntoFuture for Step<'c, F>
where
    F: FnOnce() -> Fut + Send + 'c,
    Fut: Future<Output = std::result::Result<T, E>> + Send + 'c,
    T: Serialize + DeserializeOwned + Send + 'c,
    E: Into<BoxError> + Send + 'c,
{
    type Output = Result<T>;
    type IntoFuture = BoxFuture<'c, Result<T>>;

    fn into_future(self) -> Self::IntoFuture {
        let (ctx, limit, f, ()) = self.numbered();
        let (name, function_id) = (limit.name, limit.function_id);
        Box::pin(run(ctx, name, function_id, once(limit, f)))
    }
}

impl<'c, F, Fut, T, E> IntoFuture for Step<'c, F, RetryPolicy>
where
    F: FnMut() -> Fut + Send + 'c,
    Fut: Future<Output = std::result::Result<T, E>> + Send + 'c,
    T: Serialize + DeserializeOwned + Send + 'c,
    E: Into<BoxError> + Send + 'c,
{
    type Output = Result<T>;
    type IntoFuture = BoxFuture<'c, Result<T>>;

    fn into_future(self) -> Self::IntoFuture {
        let (ctx, limit, f, retry) = self.numbered();
        let (name, function_id) = (limit.name, limit.function_id);
        let attempts = attempts(ctx, limit, f, retry);
        Box::pin(run(ctx, name, function_id, attempts))
    }
}

/// Replays the step, or runs `attempts` (the body's one call, or its retry loop) and records
/// its outcome. `attempts` is not polled on a replay.
///
/// The attempts' own error is a [`StepError`] or, for a timeout, an [`Error::StepTimeout`].
pub(crate) async fn run<T, E, A>(
    ctx: &Context,
    name: &str,
    function_id: u32,
    attempts: A,
) -> Result<T>
where
    T: Serialize + DeserializeOwned + Send,
    E: Into<Error>,
    A: Future<Output = Result<std::result::Result<T, E>>> + Send,
{
    // Checked before the body runs: a name the database cannot hold fails the call at once.
    crate::names::validate_text(name, "step name")?;
    let _busy = match ctx.begin(function_id, name).await? {
        Begun::Recorded(row) => return replay(&row, name, function_id),
        Begun::Fresh(busy) => busy,
    };
    let started_at = now_ms();
    let clock = Instant::now();
    // A DEBUG span: at INFO one span per step cost W2 a fifth of its CPU (the workflow's INFO
    // span is its parent). It covers the attempts, where user code runs and logs, not the
    // checkpoint write: a span costs per poll it is entered.
    let span = tracing::debug_span!("step", function_id, name, otel.name = tracing::field::Empty);
    #[cfg(feature = "otel")]
    crate::base::otel::describe(&span, name, "step", ctx.workflow_id());
    let result = within_deadline(ctx, attempts.instrument(span))
        .await?
        .map_err(Into::into);
    ctx.metrics().step_finished(result.is_ok(), clock.elapsed());
    let (output, error) = match &result {
        Ok(value) => {
            let what = OutputOf(name, function_id);
            let output = codec::encode(value, &what)?;
            ctx.check_value(&output, || what.to_string())?;
            (Some(output), None)
        }
        Err(e) => (None, Some(codec::encode_error(&e.to_portable()))),
    };
    let call = Call {
        function_id,
        name,
        output,
        error,
        child: None,
        started_at,
        completed_at: None,
    };
    // Written by the next durable call, or with the workflow's outcome when this step was its
    // last (one commit for both).
    ctx.defer(call)?;
    result
}

/// Awaits the step's attempts, unless the workflow's deadline passes first: then, once the
/// workflow actor has cancelled the run, the attempts (and the body in flight) are dropped. A
/// body never begins past the deadline (a run recovered after it is cancelled before its next
/// step). A cancel before the deadline does not interrupt a running body (it stops at the next
/// call).
async fn within_deadline<X>(ctx: &Context, attempts: impl Future<Output = Result<X>>) -> Result<X> {
    let Some(deadline) = ctx.deadline() else {
        return attempts.await;
    };
    let expired = async {
        crate::base::clock::sleep_until_ms(deadline).await;
        ctx.aborted().await;
    };
    let cancelled = || {
        Err(ctx.check_abort().err().unwrap_or_else(|| Error::Cancelled {
            id: ctx.workflow_id().to_owned(),
        }))
    };
    if deadline <= now_ms() {
        expired.await;
        return cancelled();
    }
    tokio::select! {
        biased;
        outcome = attempts => outcome,
        () = expired => cancelled(),
    }
}

/// What bounds one attempt: the step's timeout; and what its error carries: the names, and
/// the error types stored with their data.
struct Limit<'a> {
    name: &'a str,
    function_id: u32,
    timeout: Option<Duration>,
    errors: &'a UserErrors,
}

impl Limit<'_> {
    /// Refuses a zero timeout, which would fail every attempt before its body could run.
    fn check(&self) -> Result<()> {
        match self.timeout {
            Some(limit) if limit.is_zero() => Err(Error::InvalidArgument(format!(
                "step {:?} has a zero timeout",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// One attempt: the body's future, dropped with a [`StepTimeout`] past the timeout.
    async fn attempt<T, E>(
        &self,
        body: impl Future<Output = std::result::Result<T, E>>,
    ) -> std::result::Result<T, BoxError>
    where
        E: Into<BoxError>,
    {
        let Some(limit) = self.timeout else {
            return body.await.map_err(Into::into);
        };
        match tokio::time::timeout(limit, body).await {
            Ok(outcome) => outcome.map_err(Into::into),
            Err(_) => Err(Box::new(StepTimeout {
                step: self.name.to_owned(),
                function_id: self.function_id,
                timeout: limit,
                attempts: Vec::new(),
            })),
        }
    }

    /// The step's failure after `attempts`: a timeout when the last attempt timed out.
    fn failed(&self, last: &BoxError, attempts: Vec<String>) -> Error {
        match last.downcast_ref::<StepTimeout>() {
            Some(timeout) => Error::StepTimeout(StepTimeout {
                attempts,
                ..timeout.clone()
            }),
            None => Error::Step(StepError {
                error: self.errors.portable(last.as_ref()).map(Box::new),
                ..failed(self.name, self.function_id, attempts)
            }),
        }
    }
}

/// Calls the body once; its error is the step's outcome.
async fn once<F, Fut, T, E>(limit: Limit<'_>, f: F) -> Result<std::result::Result<T, Error>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: Into<BoxError>,
{
    limit.check()?;
    Ok(limit
        .attempt(f())
        .await
        .map_err(|e| limit.failed(&e, vec![codec::describe(&e)])))
}

/// Calls the body until it succeeds or the policy gives up; the inner error is the step's
/// outcome, the outer one stops the workflow (cancelled, taken over).
async fn attempts<F, Fut, T, E>(
    ctx: &Context,
    limit: Limit<'_>,
    mut f: F,
    retry: RetryPolicy,
) -> Result<std::result::Result<T, Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: Into<BoxError>,
{
    limit.check()?;
    let mut failures = Vec::new();
    loop {
        match limit.attempt(f()).await {
            Ok(value) => return Ok(Ok(value)),
            Err(e) => {
                failures.push(codec::describe(&e));
                let attempt = failures.len() as u32;
                if !retry.should_retry(attempt, e.as_ref()) {
                    return Ok(Err(limit.failed(&e, failures)));
                }
                ctx.metrics().step_retried();
                let delay = retry.backoff.delay(attempt - 1);
                // The ids are fields, not only the spans': the step span is DEBUG.
                tracing::warn!(workflow_id = %ctx.workflow_id(), workflow = %ctx.workflow_name(),
                    step = limit.name, function_id = limit.function_id, attempt, retry_in = ?delay,
                    error = %failures[failures.len() - 1], "step attempt failed; retrying");
                crate::base::clock::sleep(delay).await;
                ctx.live().await?;
            }
        }
    }
}

/// A step failure with these attempts (and no typed error).
pub(crate) fn failed(name: &str, function_id: u32, attempts: Vec<String>) -> StepError {
    StepError {
        step: name.to_owned(),
        function_id,
        attempts,
        error: None,
    }
}

/// "the output of step `name` (call #`function_id`)", formatted only when an error names it:
/// a step's path pays no `format!`.
struct OutputOf<'a>(&'a str, u32);

impl std::fmt::Display for OutputOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the output of step {:?} (call #{})", self.0, self.1)
    }
}

fn replay<T: DeserializeOwned>(row: &StepRow, name: &str, function_id: u32) -> Result<T> {
    decode(
        row.serialization.as_deref(),
        row.output.as_deref(),
        row.error.as_deref(),
        name,
        function_id,
    )
}

/// A recorded step's outcome, stored in format `serialization`: its output, or its error as
/// the step's failure.
pub(crate) fn decode<T: DeserializeOwned>(
    serialization: Option<&str>,
    output: Option<&str>,
    error: Option<&str>,
    name: &str,
    function_id: u32,
) -> Result<T> {
    match error {
        Some(error) => {
            // A format stead does not read is refused here too, not read as a message.
            codec::check_format(
                serialization,
                format_args!("the recorded outcome of step {name:?} (call #{function_id})"),
            )?;
            let error = codec::read_error(serialization, error);
            Err(crate::error::step_failure(&error, name, function_id))
        }
        None => codec::read(
            serialization,
            output,
            format_args!("the recorded output of step {name:?} (call #{function_id})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_stop_at_max_attempts_and_respect_the_predicate() {
        let io = std::io::Error::other("declined");
        let p = RetryPolicy::attempts(3);
        assert!(p.should_retry(1, &io));
        assert!(p.should_retry(2, &io));
        assert!(!p.should_retry(3, &io));
        let p = p.retry_if(|e| !e.to_string().contains("declined"));
        assert!(!p.should_retry(1, &io));
        assert!(!RetryPolicy::none().should_retry(1, &io));
    }
}

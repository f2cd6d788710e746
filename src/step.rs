//! Steps: a closure run at most once to success per workflow, with retries, whose outcome is
//! checkpointed before the workflow goes on. Replays return the checkpoint instead of running it.

use std::error::Error as StdError;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::clock::now_ms;
use crate::codec;
use crate::context::{Call, Context};
use crate::error::{Error, Result, StepError};
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

/// A step about to run; `.await` it. Built by [`Context::step`].
#[must_use = "a step does nothing until awaited"]
pub struct Step<'c, F> {
    ctx: &'c Context,
    name: &'c str,
    f: F,
    retry: RetryPolicy,
}

impl<'c, F> Step<'c, F> {
    pub(crate) fn new(ctx: &'c Context, name: &'c str, f: F, retry: RetryPolicy) -> Self {
        Step {
            ctx,
            name,
            f,
            retry,
        }
    }

    /// Retries failures as `policy` says.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }
}

impl<'c, F, Fut, T, E> IntoFuture for Step<'c, F>
where
    F: FnMut() -> Fut + Send + 'c,
    Fut: Future<Output = std::result::Result<T, E>> + Send + 'c,
    T: Serialize + DeserializeOwned + Send + 'c,
    E: Into<BoxError> + Send + 'c,
{
    type Output = Result<T>;
    type IntoFuture = BoxFuture<'c, Result<T>>;

    fn into_future(self) -> Self::IntoFuture {
        // The number is taken here, in program order, so concurrent steps replay identically.
        let function_id = self.ctx.next_function_id();
        Box::pin(run(self, function_id))
    }
}

async fn run<F, Fut, T, E>(step: Step<'_, F>, function_id: u32) -> Result<T>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = std::result::Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: Into<BoxError> + Send,
{
    let Step {
        ctx,
        name,
        mut f,
        retry,
    } = step;
    ctx.check_live()?;
    if let Some(row) = ctx.recorded(function_id, name)? {
        return replay(row, name, function_id);
    }
    let started_at = now_ms();
    let clock = Instant::now();
    // A DEBUG span: at INFO one span per step cost W2 a fifth of its CPU (the workflow's INFO
    // span is its parent). It covers the attempts, where user code runs and logs, not the
    // checkpoint write: a span costs per poll it is entered.
    let span = tracing::debug_span!("step", function_id, name);
    let result = attempts(ctx, name, function_id, &mut f, &retry)
        .instrument(span)
        .await?;
    ctx.metrics().step_finished(result.is_ok(), clock.elapsed());
    let (output, error) = match &result {
        Ok(value) => (Some(codec::encode(value, "step output")?), None),
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
    match ctx.record(call).await? {
        None => result.map_err(Error::Step),
        // A competing execution recorded this call first: its outcome is the one that counts.
        Some((output, error)) => decode(output.as_deref(), error.as_deref(), name, function_id),
    }
}

/// Runs the closure until it succeeds or the policy gives up; the inner error is the step's
/// outcome, the outer one stops the workflow (cancelled, taken over).
async fn attempts<F, Fut, T, E>(
    ctx: &Context,
    name: &str,
    function_id: u32,
    f: &mut F,
    retry: &RetryPolicy,
) -> Result<std::result::Result<T, StepError>>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = std::result::Result<T, E>> + Send,
    E: Into<BoxError> + Send,
{
    let mut failures = Vec::new();
    loop {
        match f().await {
            Ok(value) => return Ok(Ok(value)),
            Err(e) => {
                let e: BoxError = e.into();
                failures.push(e.to_string());
                let attempt = failures.len() as u32;
                if !retry.should_retry(attempt, e.as_ref()) {
                    return Ok(Err(StepError {
                        step: name.to_owned(),
                        function_id,
                        attempts: failures,
                    }));
                }
                ctx.metrics().step_retried();
                tracing::debug!(attempt, error = %e, "step failed; retrying");
                tokio::time::sleep(retry.backoff.delay(attempt - 1)).await;
                ctx.check_live()?;
            }
        }
    }
}

fn replay<T: DeserializeOwned>(row: &StepRow, name: &str, function_id: u32) -> Result<T> {
    codec::check_format(
        row.serialization.as_deref(),
        &format!("the recorded outcome of step {name:?} (call #{function_id})"),
    )?;
    decode(
        row.output.as_deref(),
        row.error.as_deref(),
        name,
        function_id,
    )
}

fn decode<T: DeserializeOwned>(
    output: Option<&str>,
    error: Option<&str>,
    name: &str,
    function_id: u32,
) -> Result<T> {
    match error {
        Some(error) => Err(Error::Step(StepError::from_portable(
            &codec::decode_error(error),
            name,
            function_id,
        ))),
        None => codec::decode(
            output,
            &format!("the recorded output of step {name:?} (call #{function_id})"),
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

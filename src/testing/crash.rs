//! The crash matrix (feature `testing`): a workflow run once to learn its durable calls, then
//! once per call boundary with the run stopped dead there and recovered by a fresh runtime on
//! the same embedded database, each checked against the uncrashed run: the same outcome, and
//! each side effect as many times as before (an effect declared idempotent may repeat).
//!
//! It owns the scenarios and their report; the crash itself is the engine's (`engine::crash`):
//! boundary `k` is "the first `k` calls are recorded, nothing after them is": the run stops at
//! the start of call `k + 1`, once the records before it are written (or, for the last boundary,
//! before its outcome is written), the way a killed process leaves it. The code between two
//! calls has run by then, so an effect done outside a step shows up as repeated. It must never
//! touch a database but the temporary SQLite files it creates and removes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::engine::crash::CrashPlan;
use crate::engine::request::WorkflowOptions;
use crate::runtime::builder::RuntimeBuilder;
use crate::runtime::Runtime;
use crate::testing::error::KitError;

/// Side effects a workflow under test counts, by name: share one between the workflow (capture
/// a clone in its closure) and the [`CrashMatrix`].
#[derive(Debug, Clone, Default)]
pub struct Effects(Arc<Mutex<BTreeMap<String, u32>>>);

impl Effects {
    /// No effects yet.
    pub fn new() -> Effects {
        Effects::default()
    }

    /// Counts one occurrence of effect `name` (call it where the effect happens, e.g. inside
    /// the step that charges a card).
    pub fn hit(&self, name: &str) {
        *self.counts_mut().entry(name.to_owned()).or_default() += 1;
    }

    /// How often `name` happened.
    pub fn count(&self, name: &str) -> u32 {
        self.counts_mut().get(name).copied().unwrap_or(0)
    }

    /// Every effect's count.
    pub fn counts(&self) -> BTreeMap<String, u32> {
        self.counts_mut().clone()
    }

    fn counts_mut(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reset(&self) {
        self.counts_mut().clear();
    }
}

/// Runs one workflow crashed at each of its call boundaries in turn (see the module docs).
///
/// ```
/// use stead::testing::{CrashMatrix, Effects};
/// use stead::{Context, Runtime};
///
/// async fn pay(ctx: Context, amount: u32, fx: Effects) -> stead::Result<String> {
///     ctx.step("reserve", || async { fx.hit("reserve"); Ok(()) }).await?;
///     let id: String = ctx.step("charge", || async { fx.hit("charge"); Ok(format!("ch-{amount}")) }).await?;
///     ctx.step("receipt", || async { fx.hit("email"); Ok(()) }).await?;
///     Ok(id)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stead::testing::KitError> {
/// let fx = Effects::new();
/// let build = {
///     let fx = fx.clone();
///     move || Runtime::builder().workflow("pay", {
///         let fx = fx.clone();
///         move |ctx, amount| pay(ctx, amount, fx.clone())
///     })
/// };
/// let report = CrashMatrix::new(build).effects(&fx).run("pay", 12).await?;
/// assert_eq!(report.calls, ["reserve", "charge", "receipt"]);
/// assert!(report.is_ok(), "{report}");
/// # Ok(()) }
/// ```
pub struct CrashMatrix<B> {
    build: B,
    effects: Option<Effects>,
    idempotent: BTreeSet<String>,
    timeout: Duration,
}

/// One boundary's scenario: where it crashed and what broke.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Boundary {
    /// How many calls were recorded when the run stopped (0: before the first).
    pub index: usize,
    /// The last call recorded before the crash.
    pub after: Option<String>,
    /// The call the crash came before (`None`: the outcome).
    pub before: Option<String>,
    /// What the recovered run did differently; empty when it matched.
    pub problems: Vec<Problem>,
}

/// What a recovered run did differently from the uncrashed one.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Problem {
    /// The crashed run never reached this boundary (it ended first, or waited past the
    /// timeout): its calls differ from the first run's.
    NotReached,
    /// The recovered run's outcome differs.
    Outcome { expected: String, found: String },
    /// An effect happened another number of times (an idempotent one: fewer).
    Effect {
        name: String,
        expected: u32,
        found: u32,
    },
    /// The recovered run did not finish within the matrix's timeout.
    Stuck,
}

/// The matrix's findings: the first run's calls and outcome, and one scenario per boundary.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The durable calls of the uncrashed run, by name, in order.
    pub calls: Vec<String>,
    /// Its outcome: the output as JSON, or the error.
    pub outcome: String,
    /// The effects it counted.
    pub effects: BTreeMap<String, u32>,
    /// One per boundary, `calls.len() + 1` in all.
    pub boundaries: Vec<Boundary>,
}

impl Report {
    /// True when every boundary's recovery matched the uncrashed run.
    pub fn is_ok(&self) -> bool {
        self.boundaries.iter().all(|b| b.problems.is_empty())
    }

    /// The first boundary whose recovery broke.
    pub fn first_failure(&self) -> Option<&Boundary> {
        self.boundaries.iter().find(|b| !b.problems.is_empty())
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotReached => write!(f, "the crashed run never reached this boundary"),
            Problem::Outcome { expected, found } => {
                write!(f, "the outcome was {found}, not {expected}")
            }
            Problem::Effect {
                name,
                expected,
                found,
            } => write!(
                f,
                "effect {name:?} happened {found} time(s), not {expected}"
            ),
            Problem::Stuck => write!(f, "the recovered run did not finish in time"),
        }
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "boundary {}", self.index)?;
        match (&self.after, &self.before) {
            (None, Some(next)) => write!(f, " (before call #1 {next:?})"),
            (Some(last), Some(next)) => write!(
                f,
                " (after call #{} {last:?}, before call #{} {next:?})",
                self.index,
                self.index + 1
            ),
            (Some(last), None) => write!(
                f,
                " (after call #{} {last:?}, before the outcome)",
                self.index
            ),
            (None, None) => write!(f, " (before the outcome)"),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let broken = self.boundaries.iter().filter(|b| !b.problems.is_empty());
        let count = broken.clone().count();
        writeln!(
            f,
            "crash matrix: {} call(s), {} boundaries, {count} broken",
            self.calls.len(),
            self.boundaries.len()
        )?;
        for b in broken {
            for p in &b.problems {
                writeln!(f, "  {b}: {p}")?;
            }
        }
        Ok(())
    }
}

/// How long a shutdown waits for runs still in flight (a crashed run has none).
const GRACE: Duration = Duration::from_secs(1);
/// The id every scenario gives the workflow (each runs on a file of its own).
const WORKFLOW_ID: &str = "crash-matrix";

impl<B: Fn() -> RuntimeBuilder> CrashMatrix<B> {
    /// A matrix over the runtimes `build` makes: it registers the workflow under test (and
    /// whatever it calls); its database settings are replaced by a temporary SQLite file per
    /// scenario (do not give it a pool).
    pub fn new(build: B) -> Self {
        CrashMatrix {
            build,
            effects: None,
            idempotent: BTreeSet::new(),
            timeout: Duration::from_secs(30),
        }
    }

    /// The effects the workflow counts; each scenario must count them as the uncrashed run did.
    pub fn effects(mut self, effects: &Effects) -> Self {
        self.effects = Some(effects.clone());
        self
    }

    /// Declares effect `name` idempotent: it may repeat after a crash (never happen less).
    pub fn idempotent(mut self, name: &str) -> Self {
        self.idempotent.insert(name.to_owned());
        self
    }

    /// How long each run may take (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs workflow `name` on `input` uncrashed, then crashed at every boundary.
    pub async fn run<I: Serialize>(self, name: &str, input: I) -> Result<Report, KitError> {
        let input = serde_json::to_value(input)
            .map_err(|e| KitError::Matrix(format!("the input does not serialize as JSON: {e}")))?;
        let dir = std::env::temp_dir().join(format!("stead-crash-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|source| KitError::Io {
            path: dir.clone(),
            source,
        })?;
        let report = self.scenarios(&dir, name, &input).await;
        // A leftover temporary folder is harmless; the report matters more.
        let _ = std::fs::remove_dir_all(&dir);
        report
    }

    async fn scenarios(
        &self,
        dir: &std::path::Path,
        name: &str,
        input: &Value,
    ) -> Result<Report, KitError> {
        self.reset();
        let watch = Arc::new(CrashPlan::new(WORKFLOW_ID, None));
        let rt = self
            .launch(dir.join("clean.sqlite"), Some(watch.clone()))
            .await?;
        let handle = rt
            .start(name, input, WorkflowOptions::with_id(WORKFLOW_ID))
            .await?;
        let outcome = tokio::time::timeout(self.timeout, handle.result::<Value>()).await;
        rt.shutdown(GRACE).await?;
        let outcome = outcome.map_err(|_| {
            KitError::Matrix(format!(
                "{name} did not finish within {:?} uncrashed",
                self.timeout
            ))
        })?;
        let calls = watch.calls();
        let expected = self.counts();
        let outcome = describe(outcome);
        let mut boundaries = Vec::with_capacity(calls.len() + 1);
        for index in 0..=calls.len() {
            let file = dir.join(format!("boundary-{index}.sqlite"));
            let problems = self
                .crash_at(file, index, name, input, &outcome, &expected)
                .await?;
            boundaries.push(Boundary {
                index,
                after: index.checked_sub(1).map(|i| calls[i].clone()),
                before: calls.get(index).cloned(),
                problems,
            });
        }
        Ok(Report {
            calls,
            outcome,
            effects: expected,
            boundaries,
        })
    }

    /// One scenario: crash at `index`, recover on a fresh runtime, compare.
    async fn crash_at(
        &self,
        file: PathBuf,
        index: usize,
        name: &str,
        input: &Value,
        outcome: &str,
        expected: &BTreeMap<String, u32>,
    ) -> Result<Vec<Problem>, KitError> {
        self.reset();
        let plan = Arc::new(CrashPlan::new(WORKFLOW_ID, Some(index)));
        let rt = self.launch(file.clone(), Some(plan.clone())).await?;
        let handle = rt
            .start(name, input, WorkflowOptions::with_id(WORKFLOW_ID))
            .await?;
        let reached = tokio::select! {
            () = plan.struck() => true,
            _ = handle.result::<Value>() => false,
            () = tokio::time::sleep(self.timeout) => false,
        };
        rt.shutdown(GRACE).await?;
        if !reached {
            return Ok(vec![Problem::NotReached]);
        }
        // The next launch on the file recovers the stopped run, as after a killed process.
        let rt = self.launch(file, None).await?;
        let recovered = rt.client().handle(WORKFLOW_ID);
        let found = tokio::time::timeout(self.timeout, recovered.result::<Value>()).await;
        rt.shutdown(GRACE).await?;
        let Ok(found) = found else {
            return Ok(vec![Problem::Stuck]);
        };
        let mut problems = Vec::new();
        let found = describe(found);
        if found != outcome {
            problems.push(Problem::Outcome {
                expected: outcome.to_owned(),
                found,
            });
        }
        problems.extend(self.effect_problems(expected));
        Ok(problems)
    }

    fn effect_problems(&self, expected: &BTreeMap<String, u32>) -> Vec<Problem> {
        let found = self.counts();
        let names: BTreeSet<&String> = expected.keys().chain(found.keys()).collect();
        names
            .into_iter()
            .filter_map(|name| {
                let want = expected.get(name).copied().unwrap_or(0);
                let got = found.get(name).copied().unwrap_or(0);
                let allowed = match self.idempotent.contains(name) {
                    true => got >= want,
                    false => got == want,
                };
                (!allowed).then(|| Problem::Effect {
                    name: name.clone(),
                    expected: want,
                    found: got,
                })
            })
            .collect()
    }

    async fn launch(
        &self,
        file: PathBuf,
        plan: Option<Arc<CrashPlan>>,
    ) -> Result<Runtime, KitError> {
        let url = format!("sqlite://{}", file.display());
        let mut tries = 0;
        let rt = loop {
            match (self.build)().database_url(&url).launch().await {
                // The scenario's first runtime is shut down, but its file lock was seen held a
                // moment longer under load (once, in a CI-like run): look again, briefly.
                Err(crate::Error::Config(m)) if m.contains("in use by another") && tries < 40 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                other => break other?,
            }
        };
        if let Some(plan) = plan {
            // A fresh runtime: its plan is unset, so this cannot fail.
            let _ = rt.client().shared().crash.set(plan);
        }
        Ok(rt)
    }

    fn reset(&self) {
        if let Some(effects) = &self.effects {
            effects.reset();
        }
    }

    fn counts(&self) -> BTreeMap<String, u32> {
        self.effects
            .as_ref()
            .map(Effects::counts)
            .unwrap_or_default()
    }
}

/// An outcome as the report shows it: the output's JSON, or the error.
fn describe(outcome: crate::error::Result<Value>) -> String {
    match outcome {
        Ok(value) => value.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

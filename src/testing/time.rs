//! Virtual time for tests (feature `testing`): [`VirtualClock`], the clock a test moves, and
//! [`TestRuntime`], a runtime on a temporary SQLite file that runs on one.
//!
//! What follows the clock: every timestamp stead records (`ctx.now()`, created and updated
//! times, step times), durable sleeps, `recv`/`get_event` timeouts, workflow timeouts and
//! deadlines, step timeouts and retry backoff, delayed and debounced starts, schedules and
//! eviction. What does not: polls, sweeps, database retries and pool timeouts, which stay on
//! real time so a runtime keeps working while its workflow time stands still. The clock is
//! installed for the current tokio runtime only, so tests in parallel never share one.
//!
//! Auto-skip jumps to the next pending timer whenever the runtime is idle: no database call in
//! flight and nothing happening for one settle window of real time (3 ms by default). A body
//! busy outside stead for longer (a step waiting on a real service) looks idle: give such a
//! test a longer [`VirtualClock::settle`], or move the clock by hand. It must never touch a
//! database but the temporary file it creates and removes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::base::clock::wall_ms;
use crate::base::vclock::{Clock, InstallError};
use crate::runtime::builder::RuntimeBuilder;
use crate::runtime::Runtime;
use crate::testing::error::KitError;

/// A virtual clock for the current tokio runtime: stead's time stands still unless the test
/// [advances](VirtualClock::advance) it or turns [auto-skip](VirtualClock::auto_skip) on.
/// Dropping it restores the wall clock.
///
/// ```
/// use std::time::Duration;
/// use stead::testing::VirtualClock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stead::testing::KitError> {
/// let clock = VirtualClock::install_at(1_767_225_600_000)?; // 2026-01-01T00:00:00Z
/// clock.advance(Duration::from_secs(86_400)).await;
/// assert_eq!(clock.now(), 1_767_312_000_000);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct VirtualClock {
    clock: Arc<Clock>,
    runtime: tokio::runtime::Id,
    skipper: tokio::task::AbortHandle,
}

impl VirtualClock {
    /// Installs a clock for the current tokio runtime, starting at the wall clock's now, in
    /// manual mode.
    pub fn install() -> Result<VirtualClock, KitError> {
        VirtualClock::install_at(wall_ms())
    }

    /// Installs a clock for the current tokio runtime, starting at `epoch_ms` (milliseconds
    /// since the Unix epoch), in manual mode.
    pub fn install_at(epoch_ms: i64) -> Result<VirtualClock, KitError> {
        let clock = Clock::install(epoch_ms).map_err(|e| match e {
            InstallError::NoRuntime => {
                KitError::Clock("install it inside a tokio runtime (e.g. in #[tokio::test])".into())
            }
            InstallError::AlreadyInstalled => {
                KitError::Clock("this tokio runtime already has a virtual clock".into())
            }
        })?;
        let runtime = tokio::runtime::Handle::current().id();
        let skipper = tokio::spawn(clock.clone().skip_loop()).abort_handle();
        Ok(VirtualClock {
            clock,
            runtime,
            skipper,
        })
    }

    /// Virtual now, in milliseconds since the Unix epoch (what `ctx.now()` records).
    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Moves the clock forward by `by`: each timer due on the way fires at its own time, and
    /// the runtime settles after each before the clock moves on.
    pub async fn advance(&self, by: Duration) {
        self.clock.advance(by).await
    }

    /// Turns time-skipping on or off: when on, whenever the runtime is idle the clock jumps to
    /// the next pending timer (a sleep's end, a timeout, a schedule's firing).
    pub fn auto_skip(&self, on: bool) {
        self.clock.set_auto(on)
    }

    /// How long (real time) the runtime must be quiet to count as idle; 3 ms by default.
    pub fn settle(&self, quiet: Duration) {
        self.clock.set_settle(quiet)
    }

    /// Resolves once the runtime is idle (the moment auto-skip would jump).
    pub async fn idle(&self) {
        self.clock.settled().await
    }

    /// The next time (epoch ms) something waits for, if anything does.
    pub fn next_timer(&self) -> Option<i64> {
        self.clock.next_timer()
    }
}

impl Drop for VirtualClock {
    fn drop(&mut self) {
        self.skipper.abort();
        Clock::uninstall(self.runtime);
    }
}

/// A [`Runtime`] on a temporary SQLite file and a [`VirtualClock`] with auto-skip on: a
/// workflow that sleeps 30 days finishes at once. It derefs to the runtime; the file goes when
/// it drops.
///
/// ```
/// use std::time::Duration;
/// use stead::testing::TestRuntime;
/// use stead::{Context, Runtime, WorkflowOptions};
///
/// async fn reminder(ctx: Context, days: u64) -> stead::Result<i64> {
///     let start = ctx.now().await?;
///     ctx.sleep(Duration::from_secs(days * 86_400)).await?;
///     Ok(ctx.now().await? - start)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stead::testing::KitError> {
/// let rt = TestRuntime::launch(Runtime::builder().workflow("reminder", reminder)).await?;
/// let handle = rt.start("reminder", 30, WorkflowOptions::default()).await?;
/// assert_eq!(handle.result::<i64>().await?, 30 * 86_400_000);
/// rt.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct TestRuntime {
    runtime: Runtime,
    clock: VirtualClock,
    dir: PathBuf,
}

/// How long a shutdown waits for runs still in flight.
const GRACE: Duration = Duration::from_secs(1);

impl TestRuntime {
    /// Installs a virtual clock (auto-skip on, starting at the wall clock's now) and launches
    /// `builder` on a fresh temporary SQLite file (its database settings are replaced).
    pub async fn launch(builder: RuntimeBuilder) -> Result<TestRuntime, KitError> {
        let clock = VirtualClock::install()?;
        clock.auto_skip(true);
        TestRuntime::launch_on(clock, builder).await
    }

    /// As [`launch`](TestRuntime::launch), on a clock the test installed and set up (another
    /// start time, auto-skip off, a longer settle window).
    pub async fn launch_on(
        clock: VirtualClock,
        builder: RuntimeBuilder,
    ) -> Result<TestRuntime, KitError> {
        let dir = std::env::temp_dir().join(format!("stead-vtime-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|source| KitError::Io {
            path: dir.clone(),
            source,
        })?;
        let runtime = match open(&dir, builder).await {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        Ok(TestRuntime {
            runtime,
            clock,
            dir,
        })
    }

    /// Stops this runtime with no grace, as a crash would (runs in flight stop unfinished),
    /// and launches `builder` on the same file and clock: the new runtime recovers those runs,
    /// at virtual times consistent with what the first one recorded.
    pub async fn relaunch(&mut self, builder: RuntimeBuilder) -> Result<(), KitError> {
        self.runtime.shutdown(Duration::ZERO).await?;
        self.runtime = open(&self.dir, builder).await?;
        Ok(())
    }

    /// The clock the runtime runs on.
    pub fn clock(&self) -> &VirtualClock {
        &self.clock
    }

    /// Shuts the runtime down (waiting briefly for runs in flight).
    pub async fn shutdown(self) -> Result<(), KitError> {
        Ok(self.runtime.shutdown(GRACE).await?)
    }
}

async fn open(dir: &std::path::Path, builder: RuntimeBuilder) -> Result<Runtime, KitError> {
    let url = format!("sqlite://{}", dir.join("stead.sqlite").display());
    Ok(builder.database_url(url).launch().await?)
}

impl std::ops::Deref for TestRuntime {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

impl Drop for TestRuntime {
    fn drop(&mut self) {
        // A leftover temporary folder is harmless.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

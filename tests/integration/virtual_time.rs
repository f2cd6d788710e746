//! Virtual time (feature `testing`): a 30-day sleep, a one-hour `recv` that expires and one
//! that is answered, an hourly schedule over a virtual day, a debounce window and a step's
//! retry backoff, each in well under a second of real time; a run recovered mid-sleep sees the
//! times its first run recorded. Every test runs on a temporary SQLite file and a clock of its
//! own (`TestRuntime`), so they run in parallel with each other and with the rest.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stead::client::DebounceOptions;
use stead::schedules::{Schedule, ScheduledTime};
use stead::testing::{TestRuntime, VirtualClock};
use stead::{Context, RetryPolicy, Runtime, RuntimeBuilder, WorkflowOptions};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);
/// 2030-01-01T00:00:00Z, a midnight for the schedule test.
const MIDNIGHT: i64 = 1_893_456_000_000;

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// Asserts the scenario's real time (launch and shutdown aside) stayed under ten seconds: each
/// scenario spans hours to days of workflow time, so ten seconds tells virtual time from real
/// time as well as one did, and holds when a loaded machine runs its few statements slowly.
fn quick(began: Instant) {
    let real = began.elapsed();
    assert!(real < Duration::from_secs(10), "took {real:?} of real time");
}

/// Sleeps `days` and answers how much virtual time passed, as `ctx.now()` records it.
async fn sleeper(ctx: Context, days: u64) -> stead::Result<i64> {
    let start = ctx.now().await?;
    ctx.sleep(DAY * days as u32).await?;
    Ok(ctx.now().await? - start)
}

fn sleepers() -> RuntimeBuilder {
    Runtime::builder().workflow("sleeper", sleeper)
}

#[tokio::test]
async fn a_thirty_day_sleep_ends_at_once_and_records_virtual_times() {
    let rt = TestRuntime::launch(sleepers()).await.unwrap();
    let began = Instant::now();
    let launched = rt.clock().now();
    let h = rt
        .start("sleeper", 30u64, WorkflowOptions::with_id("s"))
        .await
        .unwrap();
    assert_eq!(h.result::<i64>().await.unwrap(), ms(DAY * 30));
    assert!(rt.clock().now() >= launched + ms(DAY * 30));
    let status = h.status().await.unwrap();
    assert!(
        status.updated_at_ms >= launched + ms(DAY * 30),
        "the row was finished at virtual time: {status:?}"
    );
    quick(began);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_run_recovered_mid_sleep_sleeps_only_what_is_left() {
    let clock = VirtualClock::install().unwrap();
    let mut rt = TestRuntime::launch_on(clock, sleepers()).await.unwrap();
    let began = Instant::now();
    let h = rt
        .start("sleeper", 30u64, WorkflowOptions::with_id("r"))
        .await
        .unwrap();
    rt.clock().idle().await;
    assert!(rt.clock().next_timer().is_some(), "the sleep waits");
    rt.clock().advance(DAY * 10).await;
    rt.relaunch(sleepers()).await.unwrap();
    rt.clock().auto_skip(true);
    let h = rt.client().handle(h.id().to_owned());
    // The start time is replayed from the first run's record, and the wake-up time too.
    assert_eq!(h.result::<i64>().await.unwrap(), ms(DAY * 30));
    quick(began);
    rt.shutdown().await.unwrap();
}

/// Waits up to an hour for a message; answers it, or `None`, and the virtual time waited.
async fn listener(ctx: Context, _: ()) -> stead::Result<(Option<String>, i64)> {
    let start = ctx.now().await?;
    let got = ctx.recv::<String>(Some("reply"), HOUR).await?;
    Ok((got, ctx.now().await? - start))
}

#[tokio::test]
async fn a_one_hour_recv_times_out_after_one_virtual_hour() {
    let rt = TestRuntime::launch(Runtime::builder().workflow("listener", listener))
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start("listener", (), WorkflowOptions::with_id("l"))
        .await
        .unwrap();
    let (got, waited) = h.result::<(Option<String>, i64)>().await.unwrap();
    assert_eq!(got, None);
    assert!(
        (ms(HOUR)..ms(HOUR) + 1_000).contains(&waited),
        "gave up after {waited} ms"
    );
    quick(began);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_one_hour_recv_answered_after_half_an_hour_gets_the_message() {
    let clock = VirtualClock::install().unwrap();
    let rt = TestRuntime::launch_on(clock, Runtime::builder().workflow("listener", listener))
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start("listener", (), WorkflowOptions::with_id("a"))
        .await
        .unwrap();
    rt.clock().idle().await;
    rt.clock().advance(HOUR / 2).await;
    rt.client().send("a", &"yes", Some("reply")).await.unwrap();
    let (got, waited) = h.result::<(Option<String>, i64)>().await.unwrap();
    assert_eq!(got.as_deref(), Some("yes"));
    assert_eq!(waited, ms(HOUR / 2), "answered at half an hour, virtually");
    quick(began);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_hourly_schedule_fires_24_times_in_a_virtual_day() {
    let fired: Arc<Mutex<Vec<i64>>> = Arc::default();
    let builder = {
        let fired = fired.clone();
        Runtime::builder()
            .workflow("tick", move |_ctx: Context, at: ScheduledTime| {
                let fired = fired.clone();
                async move {
                    fired.lock().unwrap().push(at.scheduled.timestamp_millis());
                    stead::Result::<()>::Ok(())
                }
            })
            .schedule(Schedule::new("hourly", "tick", "0 0 * * * *"))
    };
    let clock = VirtualClock::install_at(MIDNIGHT).unwrap();
    let rt = TestRuntime::launch_on(clock, builder).await.unwrap();
    let began = Instant::now();
    rt.clock().advance(DAY).await;
    let fired = loop {
        let fired = fired.lock().unwrap().clone();
        // The firings run after the advance returns; `quick`'s bound is theirs too.
        if fired.len() >= 24 || began.elapsed() > Duration::from_secs(10) {
            break fired;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let mut fired = fired;
    fired.sort_unstable();
    let hours: Vec<i64> = (1..=24).map(|h| MIDNIGHT + h * ms(HOUR)).collect();
    assert_eq!(fired, hours, "one firing per hour, at its hour");
    quick(began);
    rt.shutdown().await.unwrap();
}

/// Answers its input and the virtual time it started at.
async fn latest(ctx: Context, n: u32) -> stead::Result<(u32, i64)> {
    Ok((n, ctx.now().await?))
}

#[tokio::test]
async fn a_debounce_window_runs_once_an_hour_after_the_last_call() {
    let clock = VirtualClock::install().unwrap();
    let rt = TestRuntime::launch_on(clock, Runtime::builder().workflow("latest", latest))
        .await
        .unwrap();
    let began = Instant::now();
    let mut ids = Vec::new();
    for n in 1..=3u32 {
        let h = rt
            .client()
            .debounce("k", HOUR, "latest", n, DebounceOptions::default())
            .await
            .unwrap();
        ids.push(h.id().to_owned());
        rt.clock().advance(Duration::from_secs(600)).await;
    }
    assert!(ids.iter().all(|id| id == &ids[0]), "one run: {ids:?}");
    let last_call = rt.clock().now() - 600_000;
    let h = rt.client().handle(ids[0].clone());
    rt.clock().advance(Duration::from_secs(2940)).await;
    assert_eq!(
        h.status().await.unwrap().status,
        stead::Status::Delayed,
        "59 virtual minutes after the last call it still waits"
    );
    rt.clock().auto_skip(true);
    let (n, at) = h.result::<(u32, i64)>().await.unwrap();
    assert_eq!(n, 3, "the last call's input");
    assert!(
        at >= last_call + ms(HOUR),
        "ran {} ms after",
        at - last_call
    );
    assert!(
        at < last_call + ms(HOUR) + 60_000,
        "ran {} ms after",
        at - last_call
    );
    quick(began);
    rt.shutdown().await.unwrap();
}

static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// A step that fails three times, retried 10, 20 and 40 virtual minutes apart.
async fn flaky(ctx: Context, _: ()) -> stead::Result<i64> {
    let start = ctx.now().await?;
    ctx.step_typed("flaky", || async {
        match ATTEMPTS.fetch_add(1, Ordering::SeqCst) {
            0..=2 => Err(std::io::Error::other("not yet")),
            _ => Ok(()),
        }
    })
    .retry(
        RetryPolicy::attempts(4)
            .interval(Duration::from_secs(600))
            .backoff_rate(2.0)
            .max_interval(HOUR),
    )
    .await?;
    Ok(ctx.now().await? - start)
}

#[tokio::test]
async fn a_step_retry_backoff_waits_virtual_minutes() {
    let rt = TestRuntime::launch(Runtime::builder().workflow("flaky", flaky))
        .await
        .unwrap();
    let began = Instant::now();
    let h = rt
        .start("flaky", (), WorkflowOptions::with_id("f"))
        .await
        .unwrap();
    let waited = h.result::<i64>().await.unwrap();
    assert_eq!(ATTEMPTS.load(Ordering::SeqCst), 4);
    assert!(
        (ms(Duration::from_secs(4200))..ms(Duration::from_secs(4260))).contains(&waited),
        "10 + 20 + 40 minutes of backoff, not {waited} ms"
    );
    quick(began);
    rt.shutdown().await.unwrap();
}

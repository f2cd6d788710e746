//! Time as the system database stores it (milliseconds since the Unix epoch), and the waits
//! that stand for workflow time: durable sleeps, timeouts, deadlines, retry backoff, schedule
//! and delayed-start timers. With the feature `testing`, both follow a virtual clock when the
//! current tokio runtime has one (`base::vclock`); otherwise they are the wall clock and tokio's
//! timers, at the cost of one branch.
//!
//! It only reads the clock, converts and waits; it never schedules work.

use std::time::Duration;

/// Milliseconds since the Unix epoch, the unit of every timestamp in the schema.
pub(crate) fn now_ms() -> i64 {
    #[cfg(feature = "testing")]
    if let Some(clock) = crate::base::vclock::current() {
        return clock.now();
    }
    wall_ms()
}

/// The wall clock, whatever clock a test installed.
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// `now_ms` as a UTC date-time (what cron timetables read).
pub(crate) fn now_utc() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(now_ms()).unwrap_or_default()
}

/// Waits until `at` (epoch ms) on the runtime's clock.
pub(crate) async fn sleep_until_ms(at: i64) {
    #[cfg(feature = "testing")]
    if let Some(clock) = crate::base::vclock::current() {
        return clock.sleep_until(at).await;
    }
    let left = (at - now_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(left)).await
}

/// Waits `d` of workflow time (a retry's backoff).
pub(crate) async fn sleep(d: Duration) {
    #[cfg(feature = "testing")]
    if let Some(clock) = crate::base::vclock::current() {
        return clock
            .sleep_until(clock.now().saturating_add(millis(d)))
            .await;
    }
    tokio::time::sleep(d).await
}

/// A waiting call's nap: `poll` of real time (its next look), cut short at `until` (epoch ms),
/// the time it gives up.
pub(crate) async fn nap(poll: Duration, until: Option<i64>) {
    #[cfg(feature = "testing")]
    if let Some(clock) = crate::base::vclock::current() {
        let Some(until) = until else {
            return tokio::time::sleep(poll).await;
        };
        return tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = clock.sleep_until(until) => {}
        };
    }
    let nap = match until {
        Some(until) => poll.min(Duration::from_millis((until - now_ms()).max(0) as u64)),
        None => poll,
    };
    tokio::time::sleep(nap).await
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_saturate() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX);
        assert!(now_ms() > 1_700_000_000_000);
        assert!((now_utc().timestamp_millis() - wall_ms()).abs() < 60_000);
    }
}

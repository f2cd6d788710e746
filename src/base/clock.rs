//! Wall-clock time as the system database stores it: milliseconds since the Unix epoch.
//!
//! It only reads the clock and converts; it never sleeps or schedules.

use std::time::Duration;

/// Milliseconds since the Unix epoch, the unit of every timestamp in the schema.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
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
    }
}

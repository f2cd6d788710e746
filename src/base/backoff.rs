//! Exponential backoff, shared by step retries, actor restarts and database-call retries.

use std::time::Duration;

/// Delays that grow by `rate` from `initial` up to `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Backoff {
    /// The delay before the first retry.
    pub initial: Duration,
    /// The factor between consecutive delays (1.0 keeps them constant).
    pub rate: f64,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// A backoff from `initial`, doubling, capped at `max`.
    pub const fn exponential(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            rate: 2.0,
            max,
        }
    }

    /// The delay before retry number `retry` (0-based).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = self.rate.max(0.0).powi(retry.min(64) as i32);
        let secs = self.initial.as_secs_f64() * factor;
        if !secs.is_finite() || secs >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(secs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_rate_and_stops_at_max() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            rate: 3.0,
            max: Duration::from_secs(1),
        };
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(1), Duration::from_millis(300));
        assert_eq!(b.delay(2), Duration::from_millis(900));
        assert_eq!(b.delay(3), Duration::from_secs(1));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }
}

//! A schedule's overlap policy (what a firing does while an earlier run of the same schedule is
//! unfinished: `ENQUEUED`, `DELAYED` or `PENDING`) and its jitter (a deterministic delay derived
//! from the firing's id, so every executor agrees and a re-fire is idempotent). Pure.

use std::time::Duration;

use serde::Serialize;

use crate::base::hash::fnv1a;

/// What a firing does while an earlier run of its schedule is unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Enqueue it anyway (DBOS's behaviour).
    #[default]
    AllowAll,
    /// Do not enqueue it.
    Skip,
    /// Enqueue it unless a firing already waits (`ENQUEUED` or `DELAYED`): at most one waits
    /// behind the running ones. It runs after them only if the queue runs one at a time.
    BufferOne,
    /// Cancel the unfinished runs, then enqueue it.
    CancelOther,
}

impl Overlap {
    /// The text stored in `stead_schedule_policies.overlap_policy`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Overlap::AllowAll => "allow_all",
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::CancelOther => "cancel_other",
        }
    }

    /// The policy stored as `text`; an unknown text (a newer stead's) allows overlap.
    pub(crate) fn parse(text: &str) -> Overlap {
        match text {
            "skip" => Overlap::Skip,
            "buffer_one" => Overlap::BufferOne,
            "cancel_other" => Overlap::CancelOther,
            _ => Overlap::AllowAll,
        }
    }
}

/// The delay in `[0, jitter)` of the firing `id`, in ms: the same for the same firing everywhere.
pub(crate) fn jitter_ms(id: &str, jitter: Duration) -> i64 {
    let span = u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX);
    if span == 0 {
        return 0;
    }
    i64::try_from(fnv1a(id.bytes()) % span).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_bounded_and_the_same_for_the_same_firing() {
        let j = Duration::from_secs(30);
        let a = jitter_ms("sched-r-2025-06-15T09:00:00+00:00", j);
        assert_eq!(a, jitter_ms("sched-r-2025-06-15T09:00:00+00:00", j));
        let all: Vec<i64> = (0..200)
            .map(|n| jitter_ms(&format!("sched-r-{n}"), j))
            .collect();
        assert!(all.iter().all(|d| (0..30_000).contains(d)));
        // Spread, not constant.
        assert!(all.iter().any(|d| *d != all[0]));
        assert_eq!(jitter_ms("x", Duration::ZERO), 0);
    }
}

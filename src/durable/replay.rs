//! The record of one replay-only run: each durable call the code makes, compared with the call
//! recorded at its number. Context writes to it; verification reads it. It names nothing above
//! the store's row types, so the core may hold it without depending on verification.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::sysdb::StepRow;

/// One call where the new code differs from the recorded history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The call number (1-based, as recorded).
    pub function_id: u32,
    /// The name recorded at that number.
    pub recorded: String,
    /// The name the new code calls there; `None` when the code returned without making it.
    pub called: Option<String>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.called {
            Some(called) => write!(
                f,
                "call #{} was recorded as {:?} but the code now calls {:?}",
                self.function_id, self.recorded, called
            ),
            None => write!(
                f,
                "call #{} was recorded as {:?} but the code returns before it",
                self.function_id, self.recorded
            ),
        }
    }
}

/// What a replay-only run met, call by call: the calls that matched, the ones that differ, and
/// where the history ended.
pub(crate) struct ReplayLog {
    /// The recorded names by call number.
    recorded: BTreeMap<u32, String>,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    matched: BTreeSet<u32>,
    divergences: Vec<Divergence>,
}

impl ReplayLog {
    pub(crate) fn new(history: &[StepRow]) -> ReplayLog {
        ReplayLog {
            recorded: history
                .iter()
                .map(|r| (r.function_id, r.name.clone()))
                .collect(),
            seen: Mutex::new(Seen::default()),
        }
    }

    /// Logs the code's call `function_id` named `name` against its recorded row; true when the
    /// replay goes on (the row exists under that name).
    pub(crate) fn visit(&self, function_id: u32, name: &str, row: Option<&StepRow>) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match row {
            Some(row) if row.name == name => {
                seen.matched.insert(function_id);
                true
            }
            Some(row) => {
                seen.divergences.push(Divergence {
                    function_id,
                    recorded: row.name.clone(),
                    called: Some(name.to_owned()),
                });
                false
            }
            // The history ends here: a call it lacks is new work, not a divergence.
            None => false,
        }
    }

    /// The matched count and the divergences by call number; when the body returned on its
    /// own (`returned`), recorded calls it never made are divergences too.
    pub(crate) fn findings(&self, returned: bool) -> (usize, Vec<Divergence>) {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let mut divergences = seen.divergences.clone();
        if returned {
            let differ: BTreeSet<u32> = divergences.iter().map(|d| d.function_id).collect();
            divergences.extend(
                self.recorded
                    .iter()
                    .filter(|(id, _)| !seen.matched.contains(id) && !differ.contains(id))
                    .map(|(&function_id, name)| Divergence {
                        function_id,
                        recorded: name.clone(),
                        called: None,
                    }),
            );
        }
        divergences.sort_by_key(|d| d.function_id);
        (seen.matched.len(), divergences)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(function_id: u32, name: &str) -> StepRow {
        StepRow {
            function_id,
            name: name.into(),
            output: None,
            error: None,
            child_workflow_id: None,
            serialization: None,
        }
    }

    #[test]
    fn a_log_reports_renamed_and_unmade_calls_in_order() {
        let history = [row(1, "a"), row(2, "b"), row(3, "c")];
        let log = ReplayLog::new(&history);
        assert!(log.visit(1, "a", Some(&history[0])));
        assert!(!log.visit(2, "b2", Some(&history[1])));
        assert!(
            !log.visit(4, "d", None),
            "the history ends: stop, no divergence"
        );
        let (matched, found) = log.findings(true);
        assert_eq!(matched, 1);
        let at: Vec<_> = found
            .iter()
            .map(|d| (d.function_id, d.called.clone()))
            .collect();
        assert_eq!(at, vec![(2, Some("b2".into())), (3, None)]);
    }
}

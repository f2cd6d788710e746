//! Continue-as-new's vocabulary: the id of a chain's next run and the output a continued run
//! finishes with. Pure functions; the write is `sysdb::continuations`, the call
//! `Context::continue_as_new`.
//!
//! **The marker.** A continued run ends `SUCCESS` with the output `{"stead.continuedAs":"<next
//! id>"}`, so a DBOS reader sees an ordinary finished workflow whose result names the next run;
//! stead's handles read that output as "follow the chain" (an output of exactly this shape is
//! never a workflow's own result to stead).

use serde_json::Value;

/// The key of the marker object.
pub(crate) const MARKER_KEY: &str = "stead.continuedAs";

/// The id of run `generation` (1 for the first continuation) of the chain that began as `root`:
/// deterministic, so a run replayed after a crash before its commit names the same next run.
pub(crate) fn next_id(root: &str, generation: i64) -> String {
    format!("{root}-can-{generation}")
}

/// The output a run continued as `next` finishes with.
pub(crate) fn marker(next: &str) -> String {
    serde_json::json!({ MARKER_KEY: next }).to_string()
}

/// The next run named by a finished run's stored output, when it is a continuation marker.
pub(crate) fn continued_as(output: Option<&str>) -> Option<String> {
    let text = output?;
    if !text.contains(MARKER_KEY) {
        return None;
    }
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Object(map) if map.len() == 1 => map.get(MARKER_KEY)?.as_str().map(str::to_owned),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_names_the_next_run_and_nothing_else_is_one() {
        assert_eq!(
            continued_as(Some(&marker("a-can-2"))).as_deref(),
            Some("a-can-2")
        );
        assert_eq!(continued_as(Some("{\"stead.continuedAs\":3}")), None);
        assert_eq!(
            continued_as(Some("{\"stead.continuedAs\":\"x\",\"y\":1}")),
            None
        );
        assert_eq!(continued_as(Some("\"stead.continuedAs\"")), None);
        assert_eq!(continued_as(None), None);
        assert_eq!(next_id("a", 3), "a-can-3");
    }
}

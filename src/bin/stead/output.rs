//! How results are shown: aligned text tables and key/value blocks for people, and the JSON
//! value printed instead under `--json`. It formats only; it never talks to the database.

use serde::Serialize;
use serde_json::Value;
use stead::{
    client::BatchProgress, client::ExecutorInfo, client::StepInfo, client::WorkflowInfo,
    queues::QueueLimits, queues::RateLimit, schedules::ScheduleInfo, Queue,
};

/// A command's result in both forms; `main` prints one of them.
pub struct Rendered {
    pub json: Value,
    pub text: String,
    /// A line for the person at the terminal (on stderr, so stdout stays the result).
    pub note: Option<String>,
    /// Files to write instead of printing the text (`workflow export -o FILE`, `export-all`),
    /// each with its contents.
    pub files: Vec<(std::path::PathBuf, String)>,
}

impl Rendered {
    /// A result whose JSON is `value` serialized.
    pub fn new(value: &impl Serialize, text: String) -> Rendered {
        Rendered {
            json: serde_json::to_value(value).unwrap_or(Value::Null),
            text,
            note: None,
            files: Vec::new(),
        }
    }
}

/// Columns padded to their widest cell, separated by two spaces; no trailing spaces.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                let width = |r: &Vec<String>| r.get(c).map_or(0, |s| s.chars().count());
                self.rows.iter().map(width).max().unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(&widths) {
                line.push_str(&format!("{cell:<width$}  "));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Epoch milliseconds as `2026-11-29 12:21:23Z`: UTC, and marked so.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn opt_time(ms: Option<i64>) -> String {
    ms.map_or_else(dash, time)
}

fn dash() -> String {
    "-".to_owned()
}

fn or_dash(text: Option<&str>) -> String {
    text.map_or_else(dash, str::to_owned)
}

/// Compact JSON cut to `max` characters (with `…` when cut), for a table cell.
fn clip(value: &str, max: usize) -> String {
    let one_line = value.replace('\n', " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

pub fn workflows(list: &[WorkflowInfo]) -> String {
    let mut table = Table::new(&[
        "ID", "STATUS", "NAME", "QUEUE", "VERSION", "CREATED", "UPDATED", "ERROR",
    ]);
    for w in list {
        let s = &w.status;
        table.row(vec![
            s.id.clone(),
            s.status_label(),
            s.name.clone(),
            or_dash(s.queue_name.as_deref()),
            or_dash(s.app_version.as_deref()),
            time(s.created_at_ms),
            time(s.updated_at_ms),
            w.error
                .as_ref()
                .map_or_else(dash, |e| clip(&e.to_string(), 48)),
        ]);
    }
    table.render()
}

/// One page of a batch, as a progress line.
pub fn batch_page(action: &str, p: &BatchProgress) -> String {
    let changed = if p.dry_run { "would change" } else { "changed" };
    format!(
        "{action}: page {}: {} matched, {} {changed}, {} skipped",
        p.pages, p.matched, p.changed, p.skipped
    )
}

/// A batch's totals.
pub fn batch_done(action: &str, p: &BatchProgress) -> String {
    let mut text = if p.dry_run {
        format!(
            "dry run: {action} would change {} of {} matching workflow(s); {} skipped",
            p.changed, p.matched, p.skipped
        )
    } else {
        format!(
            "{action}: changed {} of {} matching workflow(s); {} skipped",
            p.changed, p.matched, p.skipped
        )
    };
    if !p.done {
        text.push_str(&format!(
            " (stopped after {} page(s): run it again to go on)",
            p.pages
        ));
    }
    text.push('\n');
    text
}

/// Stranded workflows, and the command that moves them.
pub fn stranded(list: &[WorkflowInfo]) -> String {
    if list.is_empty() {
        return "no stranded workflows\n".into();
    }
    let mut table = Table::new(&["ID", "NAME", "EXECUTOR", "VERSION", "QUEUE", "CREATED"]);
    for w in list {
        let s = &w.status;
        table.row(vec![
            s.id.clone(),
            s.name.clone(),
            or_dash(s.executor_id.as_deref()),
            or_dash(s.app_version.as_deref()),
            or_dash(s.queue_name.as_deref()),
            time(s.created_at_ms),
        ]);
    }
    format!(
        "{}\n{} workflow(s) of dead executors whose version no live executor serves.\n\
         Move them onto a version that runs: stead workflow stranded --move-to <VERSION>\n",
        table.render(),
        list.len()
    )
}

/// The fleet's executors.
pub fn executors(list: &[ExecutorInfo]) -> String {
    let mut table = Table::new(&[
        "EXECUTOR",
        "HOST",
        "PID",
        "VERSION",
        "APP",
        "PENDING",
        "STATE",
        "LAST SEEN",
    ]);
    for e in list {
        table.row(vec![
            e.executor_id.clone(),
            e.host.clone(),
            e.pid.to_string(),
            e.app_version.clone(),
            or_dash(e.app_name.as_deref()),
            e.pending.to_string(),
            if e.live { "live" } else { "dead" }.into(),
            time(e.last_seen_ms),
        ]);
    }
    table.render()
}

/// One workflow as `field  value` lines; optional fields appear only when set.
pub fn workflow(w: &WorkflowInfo) -> String {
    let s = &w.status;
    let json = |v: &Option<Value>| v.as_ref().map(Value::to_string);
    let mut fields: Vec<(&str, Option<String>)> = vec![
        ("id", Some(s.id.clone())),
        ("status", Some(s.status_label())),
        // A pause keeps DBOS's stored status: show it beside.
        (
            "stored status",
            s.is_paused().then(|| s.status.as_str().to_owned()),
        ),
        ("paused", s.paused_at_ms.map(time)),
        ("name", Some(s.name.clone())),
        ("queue", s.queue_name.clone()),
        ("app version", s.app_version.clone()),
        ("app name", s.app_name.clone()),
        ("executor", s.executor_id.clone()),
        ("attempts", Some(s.recovery_attempts.to_string())),
        ("created", Some(time(s.created_at_ms))),
        ("updated", Some(time(s.updated_at_ms))),
        ("started", s.started_at_ms.map(time)),
        ("completed", s.completed_at_ms.map(time)),
        ("parent", s.parent_workflow_id.clone()),
        ("forked from", s.forked_from.clone()),
        ("timeout", s.timeout_ms.map(|ms| format!("{ms} ms"))),
        ("deadline", s.deadline_ms.map(time)),
        ("delayed until", s.delay_until_ms.map(time)),
        (
            "priority",
            (s.priority != 0).then(|| s.priority.to_string()),
        ),
        ("dedup id", s.deduplication_id.clone()),
        ("partition", s.partition_key.clone()),
        ("attributes", json(&s.attributes)),
        ("serialization", w.serialization.clone()),
        ("input", json(&w.input)),
        ("output", json(&w.output)),
        ("error", w.error.as_ref().map(ToString::to_string)),
    ];
    fields.retain(|(_, v)| v.is_some());
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    fields
        .into_iter()
        .map(|(k, v)| format!("{k:<width$}  {}\n", v.unwrap_or_default()))
        .collect()
}

/// Steps; a result that was not loaded (or is in another format) shows as its size.
pub fn steps(list: &[StepInfo]) -> String {
    let mut table = Table::new(&["STEP", "NAME", "RESULT", "CHILD", "STARTED", "COMPLETED"]);
    for s in list {
        let result = match (&s.error, &s.output, s.error_bytes, s.output_bytes) {
            (Some(e), ..) => format!("error: {e}"),
            (None, _, Some(n), _) => format!("error ({n} bytes)"),
            (None, Some(v), None, _) => v.to_string(),
            (None, None, None, Some(n)) => format!("({n} bytes)"),
            (None, None, None, None) => String::new(),
        };
        table.row(vec![
            s.function_id.to_string(),
            s.name.clone(),
            clip(&result, 48),
            or_dash(s.child_workflow_id.as_deref()),
            opt_time(s.started_at_ms),
            opt_time(s.completed_at_ms),
        ]);
    }
    table.render()
}

/// A queue definition as printed under `--json` (durations in milliseconds).
#[derive(Serialize)]
pub struct QueueView {
    name: String,
    /// The application the queue belongs to (`null`: shared by every application).
    app: Option<String>,
    #[serde(flatten)]
    limits: QueueLimits,
    /// Paused: no executor claims from it.
    paused: bool,
    /// When it was paused (epoch ms; `null` while it runs).
    paused_at_ms: Option<i64>,
}

impl QueueView {
    pub fn new(app: Option<&str>, q: &Queue, paused_at_ms: Option<i64>) -> QueueView {
        QueueView {
            name: q.name().to_owned(),
            app: app.map(str::to_owned),
            limits: q.limits(),
            paused: paused_at_ms.is_some(),
            paused_at_ms,
        }
    }
}

pub fn queues(list: &[QueueView]) -> String {
    let mut table = Table::new(&[
        "NAME",
        "APP",
        "CONCURRENCY",
        "WORKER_CONCURRENCY",
        "RATE_LIMIT",
        "PRIORITY",
        "PARTITIONED",
        "POLL",
        "PAUSED",
    ]);
    let limit = |n: Option<u32>| n.map_or_else(dash, |n| n.to_string());
    let rate = |r: Option<RateLimit>| {
        r.map_or_else(dash, |r| format!("{}/{}ms", r.limit, r.period.as_millis()))
    };
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    for q in list {
        let l = &q.limits;
        table.row(vec![
            q.name.clone(),
            or_dash(q.app.as_deref()),
            limit(l.concurrency),
            limit(l.worker_concurrency),
            rate(l.rate_limit),
            yes(l.priority_enabled),
            yes(l.partitioned),
            format!("{}ms", l.polling_interval.as_millis()),
            yes(q.paused),
        ]);
    }
    table.render()
}

pub fn schedules(list: &[ScheduleInfo]) -> String {
    let mut table = Table::new(&[
        "NAME",
        "STATUS",
        "WORKFLOW",
        "CRON",
        "TIMEZONE",
        "QUEUE",
        "LAST_FIRED",
    ]);
    for s in list {
        let d = &s.schedule;
        table.row(vec![
            d.name.clone(),
            s.status.as_str().to_owned(),
            d.workflow.clone(),
            d.cron.clone(),
            d.timezone.clone().unwrap_or_else(|| "UTC".to_owned()),
            or_dash(d.queue.as_deref()),
            or_dash(s.last_fired_at.as_deref()),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_trim_line_ends() {
        let mut t = Table::new(&["ID", "STATUS"]);
        t.row(vec!["a-long-id".into(), "SUCCESS".into()]);
        t.row(vec!["b".into(), "".into()]);
        assert_eq!(t.render(), "ID         STATUS\na-long-id  SUCCESS\nb\n");
    }

    #[test]
    fn long_cells_are_clipped_on_one_line() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\nb", 4), "a b");
    }

    #[test]
    fn times_are_utc_to_the_second() {
        assert_eq!(time(1_767_323_045_123), "2026-01-02 03:04:05Z");
    }
}

//! The recorded history a run replays, held as a window of its `operation_outputs` rows read a
//! page at a time ([`LoadSteps`]) as the body's durable calls advance, so a replay holds at most
//! two pages (each at most [`AHEAD_ROWS`] rows, outputs within [`PAGE_BYTES`]), never the whole
//! history. While the body replays a page, the next is read ahead unless this page was cut short
//! by size, so a deep history's reads stay off its replay's path and large outputs are held one
//! page at a time; a page of small rows is followed by a longer one.
//!
//! A page is read unsized (each row's output read when it is within its share of the budget,
//! which Postgres reads without a running sum), and the page after one cut short by size is read
//! sized, so middling outputs still come many to a page ([`LoadSteps`]).
//!
//! A row is handed out once, by value, and forgotten with its output; its name stays until the
//! window moves on, for the synchronous probe of `deprecate_patch`. Call numbers are taken in call
//! order, so lookups move forward and a page starts at the number looked up. It must never answer
//! "not recorded" for a number it has not read: a number behind the window (a concurrent call
//! polled late, or a row asked for twice) is read on its own, a one-row page.

use std::sync::Mutex;

use tokio::task::JoinHandle;

use crate::engine::db::Db;
use crate::error::DbError;
use crate::sysdb::{LoadSteps, StepPage, StepRow};

/// Rows per page: a page costs one round trip, and at 500 rows a deep history's reads are a
/// small share of its replay.
pub(crate) const PAGE_ROWS: u32 = 500;
/// Output bytes per page: past it a page carries names only, so 10 MB outputs are held one at a
/// time.
pub(crate) const PAGE_BYTES: u64 = 2 << 20;
/// Rows per page read ahead, at most. Pages of small rows grow to it ([`ahead_rows`]): a page
/// costs a fixed part besides its rows, and W7's 100,000 small steps on Postgres replayed at
/// 1.50–1.64 µs a step read ahead 500 rows a page, 1.07–1.33 read ahead 2,000.
const AHEAD_ROWS: u32 = 2000;

pub(crate) struct History {
    workflow_id: String,
    window: Mutex<Window>,
    /// The page after the window, being read while the body replays the window.
    ahead: Mutex<Option<Ahead>>,
}

/// A page read ahead: the one after `after`.
struct Ahead {
    after: u32,
    page: JoinHandle<Result<StepPage, DbError>>,
}

impl Drop for History {
    fn drop(&mut self) {
        if let Some(ahead) = self.ahead.get_mut().ok().and_then(Option::take) {
            ahead.page.abort();
        }
    }
}

/// What is known of the history: numbers in `(from, to]` were read, each recorded (in `calls`)
/// or not; past `to` more may be recorded (`to` is `u32::MAX` once the last page is read).
struct Window {
    from: u32,
    to: u32,
    calls: Calls,
    /// A preloaded history (replay-only verification): rows are lent by copy and never read.
    keep: bool,
    /// The last page was cut short by size: the next is read `sized` ([`LoadSteps`]).
    cut: bool,
}

/// The window's rows by call number, in order: pages come sorted, so a lookup is a binary
/// search and a page is installed without a tree to build.
#[derive(Default)]
struct Calls(Vec<(u32, Slot)>);

impl Calls {
    fn of(mut calls: Vec<(u32, Slot)>) -> Calls {
        calls.sort_by_key(|(id, _)| *id);
        Calls(calls)
    }

    fn at(&self, function_id: u32) -> Option<usize> {
        self.0
            .binary_search_by_key(&function_id, |(id, _)| *id)
            .ok()
    }

    fn get(&self, function_id: u32) -> Option<&Slot> {
        self.at(function_id).map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, function_id: u32) -> Option<&mut Slot> {
        self.at(function_id).map(|i| &mut self.0[i].1)
    }
}

enum Slot {
    /// Read with its payloads, not yet replayed.
    Row(StepRow),
    /// Read without its payloads (past the page's byte budget): its name, for probes.
    Named(String),
    /// Replayed: its row was handed out and dropped.
    Taken(String),
}

impl Slot {
    fn name(&self) -> &str {
        match self {
            Slot::Row(row) => &row.name,
            Slot::Named(name) | Slot::Taken(name) => name,
        }
    }
}

/// What the window says of a number.
enum Lookup {
    Found(Option<StepRow>),
    /// Past what was read: read the page that starts at it.
    Page,
    /// Behind the window, or handed out already: read it on its own.
    Point,
}

impl History {
    /// A run with no recorded steps (a fresh start): nothing is ever read.
    pub(crate) fn empty(workflow_id: &str) -> History {
        History::of(workflow_id, Window::ended(Calls::default(), false))
    }

    /// A whole history read before the run (replay-only verification).
    pub(crate) fn preloaded(workflow_id: &str, rows: Vec<StepRow>) -> History {
        let calls = rows
            .into_iter()
            .map(|r| (r.function_id, Slot::Row(r)))
            .collect();
        History::of(workflow_id, Window::ended(Calls::of(calls), true))
    }

    /// A recovered run's history, its first page read.
    pub(crate) async fn open(db: &Db, workflow_id: &str) -> Result<History, DbError> {
        let history = History::of(workflow_id, Window::ended(Calls::default(), false));
        let page = history.read(db, 0, PAGE_ROWS).await?;
        let reading = history.install(db, &mut history.lock(), 0, page);
        let_read_start(reading).await;
        Ok(history)
    }

    fn of(workflow_id: &str, window: Window) -> History {
        History {
            workflow_id: workflow_id.to_owned(),
            window: Mutex::new(window),
            ahead: Mutex::new(None),
        }
    }

    /// The row recorded at `function_id`, handed out once for its replay.
    pub(crate) async fn take(&self, db: &Db, function_id: u32) -> Result<Option<StepRow>, DbError> {
        let after = function_id.saturating_sub(1);
        let lookup = self.lock().take(function_id);
        match lookup {
            Lookup::Found(row) => Ok(row),
            Lookup::Page => {
                let page = self.next_page(db, after).await?;
                let (lookup, reading) = {
                    let mut window = self.lock();
                    let reading = self.install(db, &mut window, after, page);
                    (window.take(function_id), reading)
                };
                let_read_start(reading).await;
                match lookup {
                    Lookup::Found(row) => Ok(row),
                    // The page starts at this number with its payloads: unreachable, and a
                    // wrong answer is worse than an error.
                    _ => Err(DbError::Query("a page lacked the row it starts at".into())),
                }
            }
            Lookup::Point => {
                let page = self.read(db, after, 1).await?;
                Ok(page.rows.into_iter().find(|r| r.function_id == function_id))
            }
        }
    }

    /// The name recorded at `function_id`, when the window knows it (`None` when it does not,
    /// `Some(None)` when nothing is recorded there).
    pub(crate) fn known_name(&self, function_id: u32) -> Option<Option<String>> {
        self.lock().name(function_id)
    }

    /// The name recorded at `function_id`, read if the window does not know it.
    pub(crate) async fn name(&self, db: &Db, function_id: u32) -> Result<Option<String>, DbError> {
        if let Some(known) = self.known_name(function_id) {
            return Ok(known);
        }
        let after = function_id.saturating_sub(1);
        let page = self.next_page(db, after).await?;
        let name = page
            .rows
            .iter()
            .find(|r| r.function_id == function_id)
            .map(|r| r.name.clone());
        let reading = {
            let mut window = self.lock();
            function_id > window.to && self.install(db, &mut window, after, page)
        };
        let_read_start(reading).await;
        Ok(name)
    }

    /// Reads on before the run needs it, so the next number's name is known to a synchronous
    /// probe: called after a replayed call, with the number the next call will take. Reads
    /// nothing while the window covers it or once the history's end was read.
    pub(crate) async fn read_ahead(&self, db: &Db, next: u32) -> Result<(), DbError> {
        let to = self.lock().to;
        if next <= to {
            return Ok(());
        }
        let page = self.next_page(db, to).await?;
        let reading = {
            let mut window = self.lock();
            window.to == to && self.install(db, &mut window, to, page)
        };
        let_read_start(reading).await;
        Ok(())
    }

    /// The page after `after`: the one read ahead if it is that page, else read now.
    async fn next_page(&self, db: &Db, after: u32) -> Result<StepPage, DbError> {
        let ahead = self.ahead_lock().take();
        match ahead {
            Some(ahead) if ahead.after == after => ahead.page.await.map_err(|e| {
                DbError::Transient(format!("reading the history ahead stopped: {e}"))
            })?,
            other => {
                if let Some(stale) = other {
                    stale.page.abort();
                }
                self.read(db, after, PAGE_ROWS).await
            }
        }
    }

    /// Makes `page` (read after `after`) the window, and starts reading the page after it when
    /// there is more and this one was not cut short by size (then the next is read sized, when
    /// it is needed). True when it started a read ([`let_read_start`]).
    fn install(&self, db: &Db, window: &mut Window, after: u32, page: StepPage) -> bool {
        let rows = ahead_rows(&page);
        window.install(after, page);
        if window.cut || window.to == u32::MAX {
            return false;
        }
        let (db, next) = (db.clone(), window.to);
        let load = self.page_request(next, rows, false);
        let page = tokio::spawn(async move { db.load_page(load).await });
        if let Some(stale) = self.ahead_lock().replace(Ahead { after: next, page }) {
            stale.page.abort();
        }
        true
    }

    async fn read(&self, db: &Db, after: u32, rows: u32) -> Result<StepPage, DbError> {
        let sized = self.lock().cut;
        db.load_page(self.page_request(after, rows, sized)).await
    }

    fn page_request(&self, after: u32, rows: u32, sized: bool) -> LoadSteps {
        LoadSteps {
            workflow_id: self.workflow_id.clone(),
            after,
            rows,
            bytes: PAGE_BYTES,
            sized,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ahead_lock(&self) -> std::sync::MutexGuard<'_, Option<Ahead>> {
        self.ahead.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How many rows to read ahead after `page`: as many as keep each row's share of [`PAGE_BYTES`]
/// twice the payload of the average row `page` loaded (so a page of like rows is not cut short),
/// between [`PAGE_ROWS`] and [`AHEAD_ROWS`].
fn ahead_rows(page: &StepPage) -> u32 {
    let loaded = &page.rows[..page.loaded.min(page.rows.len())];
    let bytes: usize = loaded.iter().map(StepRow::payload_len).sum();
    let average = (bytes / loaded.len().max(1)).max(1) as u64;
    let rows = PAGE_BYTES / (2 * average);
    u32::try_from(rows)
        .unwrap_or(u32::MAX)
        .clamp(PAGE_ROWS, AHEAD_ROWS)
}

/// Yields once after a read ahead was started, so it runs beside the replay. A replay never
/// waits while its window holds the next row, and the read's task (and each task it wakes) sits
/// in the LIFO slot of the replay's worker, which no other worker takes, until the replay yields:
/// without this the read started only when the replay reached its page (W7: each wait as long as
/// the read, 0.7 ms a page on Postgres).
async fn let_read_start(reading: bool) {
    if reading {
        tokio::task::yield_now().await;
    }
}

impl Window {
    /// A window that knows every number (nothing past `calls` is recorded).
    fn ended(calls: Calls, keep: bool) -> Window {
        Window {
            from: 0,
            to: u32::MAX,
            calls,
            keep,
            cut: false,
        }
    }

    /// Replaces the window by `page`, read after `after` (its rows in call order, as
    /// `StepPage::new` puts them): the rows of the old one not yet replayed are dropped (a late
    /// lookup of one reads it on its own).
    fn install(&mut self, after: u32, page: StepPage) {
        let more = page.more;
        self.cut = page.loaded < page.rows.len();
        let last = page.rows.last().map(|r| r.function_id);
        let loaded = page.loaded;
        let slots = page.rows.into_iter().enumerate().map(|(i, row)| {
            let id = row.function_id;
            match i < loaded {
                true => (id, Slot::Row(row)),
                false => (id, Slot::Named(row.name)),
            }
        });
        self.calls.0.clear();
        self.calls.0.extend(slots);
        self.from = after;
        self.to = match (more, last) {
            (true, Some(last)) => last,
            _ => u32::MAX,
        };
    }

    fn take(&mut self, function_id: u32) -> Lookup {
        if function_id <= self.from {
            return Lookup::Point;
        }
        if function_id > self.to {
            return Lookup::Page;
        }
        let Some(slot) = self.calls.get_mut(function_id) else {
            return Lookup::Found(None);
        };
        match slot {
            Slot::Row(row) if self.keep => Lookup::Found(Some(row.clone())),
            Slot::Row(row) => {
                let name = row.name.clone();
                match std::mem::replace(slot, Slot::Taken(name)) {
                    Slot::Row(row) => Lookup::Found(Some(row)),
                    _ => Lookup::Point,
                }
            }
            Slot::Named(_) => Lookup::Page,
            Slot::Taken(_) => Lookup::Point,
        }
    }

    fn name(&self, function_id: u32) -> Option<Option<String>> {
        if function_id <= self.from || function_id > self.to {
            return None;
        }
        Some(self.calls.get(function_id).map(|s| s.name().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(function_id: u32, name: &str) -> StepRow {
        StepRow {
            function_id,
            name: name.into(),
            output: Some(format!("{function_id}").into()),
            error: None,
            child_workflow_id: None,
            serialization: None,
        }
    }

    /// A window holding the page read after `after`: rows `ids`, the first `loaded` with their
    /// payloads.
    fn window(after: u32, ids: &[u32], loaded: usize, more: bool) -> Window {
        let mut w = Window::ended(Calls::default(), false);
        let rows = ids.iter().map(|&i| row(i, &format!("s{i}"))).collect();
        w.install(after, StepPage { rows, loaded, more });
        w
    }

    fn found(lookup: Lookup) -> Option<u32> {
        match lookup {
            Lookup::Found(row) => row.map(|r| r.function_id),
            Lookup::Page => panic!("asked for a page"),
            Lookup::Point => panic!("asked for a point read"),
        }
    }

    #[test]
    fn a_row_is_handed_out_once_and_a_second_lookup_reads_it() {
        let mut w = window(0, &[1, 2, 4], 3, true);
        assert_eq!(found(w.take(1)), Some(1));
        assert!(matches!(w.take(1), Lookup::Point), "never a wrong answer");
        assert_eq!(w.name(1), Some(Some("s1".into())), "its name stays");
        assert_eq!(
            found(w.take(3)),
            None,
            "a gap inside the page is not recorded"
        );
        assert_eq!(found(w.take(4)), Some(4));
        assert!(
            matches!(w.take(5), Lookup::Page),
            "past a full page: read on"
        );
        assert_eq!(w.name(5), None, "unknown, not absent");
    }

    #[test]
    fn past_the_last_page_nothing_is_recorded_and_behind_the_window_is_read() {
        let mut w = window(10, &[11, 12], 1, false);
        assert!(matches!(w.take(10), Lookup::Point), "behind the window");
        assert!(
            matches!(w.take(12), Lookup::Page),
            "its payload was not read"
        );
        assert_eq!(w.name(12), Some(Some("s12".into())));
        assert_eq!(found(w.take(11)), Some(11));
        assert_eq!(found(w.take(500)), None, "the history ended");
        assert_eq!(w.name(u32::MAX), Some(None));
    }

    #[test]
    fn a_page_of_small_rows_is_followed_by_a_longer_one() {
        let page = |bytes: usize, loaded: usize| StepPage {
            rows: (1..=500)
                .map(|i| StepRow {
                    output: Some("x".repeat(bytes).into()),
                    ..row(i, "s")
                })
                .collect(),
            loaded,
            more: true,
        };
        assert_eq!(ahead_rows(&page(16, 500)), AHEAD_ROWS);
        assert_eq!(
            ahead_rows(&page(1024, 500)),
            1024,
            "a share twice the average"
        );
        assert_eq!(ahead_rows(&page(10_000, 500)), PAGE_ROWS, "never shorter");
        assert_eq!(ahead_rows(&page(1024, 0)), AHEAD_ROWS, "nothing loaded");
    }

    #[tokio::test]
    async fn a_read_ahead_runs_before_the_replay_goes_on() {
        // No database actor: a read fails as soon as it is polled, so a finished read is one
        // that ran.
        let db = Db::new(std::time::Duration::ZERO);
        let page = |ids: std::ops::RangeInclusive<u32>| StepPage {
            rows: ids.map(|i| row(i, "s")).collect(),
            loaded: 3,
            more: true,
        };
        let history = History::of("w", Window::ended(Calls::default(), false));
        history.lock().install(0, page(1..=3));
        let second = tokio::spawn(async move { Ok(page(4..=6)) });
        while !second.is_finished() {
            tokio::task::yield_now().await;
        }
        *history.ahead_lock() = Some(Ahead {
            after: 3,
            page: second,
        });
        let row = history.take(&db, 4).await.unwrap();
        assert_eq!(row.map(|r| r.function_id), Some(4));
        let third = history
            .ahead_lock()
            .take()
            .expect("the third page is read ahead");
        assert_eq!(third.after, 6);
        // This runtime has one thread: the read ran only if the replay yielded to it.
        assert!(third.page.is_finished(), "the read waited for the replay");
    }

    #[test]
    fn a_preloaded_history_lends_rows_and_never_reads() {
        let calls = [row(1, "a"), row(2, "b")]
            .into_iter()
            .map(|r| (r.function_id, Slot::Row(r)))
            .collect();
        let mut w = Window::ended(Calls::of(calls), true);
        assert_eq!(found(w.take(2)), Some(2));
        assert_eq!(found(w.take(2)), Some(2));
        assert_eq!(found(w.take(3)), None);
    }
}

//! Step checkpoints: the rows of `operation_outputs` a workflow's durable calls leave, written
//! only while the workflow is `PENDING` under the writer's owner token; and the paged read of a
//! workflow's recorded steps (replay reads a page at a time, never a whole history).
//!
//! **Ownership in the write.** Every checkpoint, op and finish carries the execution's owner token
//! (`owner_xid`) and is applied only while the row is `PENDING` under it. Rows not written are
//! classified in a second statement: already recorded while the row is still `PENDING` under the
//! writer's token (its own earlier attempt: the recorded value wins); `CANCELLED`; otherwise taken
//! over, even when the step is recorded: a stale run must never take the adopter's record as its
//! own and go on to its next step. The fresh path stays one statement. The token alone keeps a
//! workflow's work single: with the fleet's fence and lease gate disabled, a process cut off its
//! database for 20 s while a survivor adopts its work still finishes every workflow once.

use super::reads::StepRow;
use crate::error::DbError;

/// One step's outcome to record, valid only while the workflow is `PENDING` under `owner`.
#[derive(Debug, Clone)]
pub(crate) struct StepWrite {
    pub workflow_id: String,
    pub owner: String,
    pub function_id: u32,
    pub name: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub child_workflow_id: Option<String>,
    pub started_at: i64,
    pub completed_at: i64,
    pub app_name: Option<String>,
}

/// What recording a step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StepOutcome {
    /// Our row is committed.
    Recorded,
    /// A row for this step already existed (our earlier attempt, or a competing execution):
    /// its values are authoritative.
    AlreadyRecorded {
        output: Option<String>,
        error: Option<String>,
        /// The row's format (a received message keeps its sender's).
        serialization: Option<String>,
    },
    /// The workflow was cancelled; nothing was written.
    Cancelled,
    /// The workflow is no longer `PENDING` under this owner; nothing was written.
    NotOwner,
}

/// A request for one page of a workflow's recorded steps: those numbered after `after`, in call
/// order, at most `rows` of them. Outputs and errors are read for a prefix of the page (the first
/// row always has its own), so a page of large outputs holds one of them; the rest comes as names
/// only, so the caller still knows which numbers are recorded and under what name. With `sized`,
/// the prefix runs while the payload bytes of the rows before stay under `bytes`; without, while
/// each row's payload is at most `bytes / rows`, which a backend may read more cheaply (Postgres:
/// no running sum) and which keeps the page within `bytes` too. A reader asks `sized` after a page
/// cut short by size, so outputs of middling size still come many to a page.
#[derive(Debug, Clone)]
pub(crate) struct LoadSteps {
    pub workflow_id: String,
    pub after: u32,
    pub rows: u32,
    pub bytes: u64,
    pub sized: bool,
}

impl LoadSteps {
    /// The largest payload a row may carry in an unsized page.
    pub(crate) fn per_row(&self) -> u64 {
        self.bytes / u64::from(self.rows.max(1))
    }
}

/// Outputs longer than this are read in pieces of this many bytes, each its own row (Postgres;
/// `postgres/steps.rs`). A driver reads a whole row into one buffer: sqlx read a 10 MB output
/// into a fresh 10 MB buffer copied into one grown by doubling to 21 MB, and kept both, so a
/// replay of W8 held ~40 MB between its steps and peaked at 50 MB of heap with the row's copy
/// and the decoded value (about 2.5× that in RSS). In pieces the only allocations of the
/// output's size are the text handed out ([`Pieces`]) and the value decoded from it. SQLite
/// holds a value whole in its own memory whichever way it is read, so it reads outputs whole.
pub(crate) const PIECE: usize = 1 << 20;

/// An output read in pieces ([`PIECE`]): each is placed at its offset, so their order does not
/// matter, and the text is checked as UTF-8 once whole (a piece may end inside a character).
#[derive(Debug, Default)]
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    filled: usize,
}

impl Pieces {
    /// Places `piece`, found at byte `at` of an output of `total` bytes.
    pub(crate) fn put(&mut self, total: usize, at: usize, piece: &[u8]) -> Result<(), DbError> {
        if self.filled == 0 && self.bytes.is_empty() {
            self.bytes = vec![0; total];
        }
        let end = at.checked_add(piece.len());
        let place = match end {
            Some(end) if total == self.bytes.len() => self.bytes.get_mut(at..end),
            _ => None,
        };
        let place =
            place.ok_or_else(|| DbError::Query("a piece of an output out of place".into()))?;
        place.copy_from_slice(piece);
        self.filled += piece.len();
        Ok(())
    }

    /// The whole output: every byte placed, valid UTF-8.
    pub(crate) fn finish(self) -> Result<String, DbError> {
        if self.bytes.is_empty() || self.filled != self.bytes.len() {
            return Err(DbError::Query(format!(
                "an output read in pieces came {} bytes of {}",
                self.filled,
                self.bytes.len()
            )));
        }
        String::from_utf8(self.bytes).map_err(|e| DbError::Query(format!("an output: {e}")))
    }
}

/// One page of recorded steps ([`LoadSteps`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StepPage {
    /// The rows, in call order; the first `loaded` carry their outputs and errors, the others
    /// none (not read).
    pub rows: Vec<StepRow>,
    pub loaded: usize,
    /// The page is full: rows may follow its last one. False means none do.
    pub more: bool,
}

impl StepPage {
    /// The page `request` read: rows, in any order, with whether their payloads were read (a
    /// prefix, once in order).
    pub(crate) fn new(request: &LoadSteps, mut rows: Vec<(StepRow, bool)>) -> StepPage {
        // A store's rows usually come in order: then this is one pass.
        rows.sort_unstable_by_key(|(row, _)| row.function_id);
        let loaded = rows.iter().take_while(|(_, loaded)| *loaded).count();
        let more = rows.len() >= request.rows as usize;
        // Past the prefix a row may have come with more than its name: it is not the page's.
        let bare = |(i, (row, _)): (usize, (StepRow, bool))| match i < loaded {
            true => row,
            false => StepRow {
                output: None,
                error: None,
                child_workflow_id: None,
                serialization: None,
                ..row
            },
        };
        StepPage {
            rows: rows.into_iter().enumerate().map(bare).collect(),
            loaded,
            more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` cut into pieces of `size` bytes, as a backend reads them: (offset, piece).
    fn cut(text: &str, size: usize) -> Vec<(usize, &[u8])> {
        text.as_bytes()
            .chunks(size)
            .enumerate()
            .map(|(i, piece)| (i * size, piece))
            .collect()
    }

    #[test]
    fn a_page_in_any_order_is_put_in_call_order_and_its_loaded_prefix_kept() {
        let row = |function_id: u32| StepRow {
            function_id,
            name: format!("s{function_id}"),
            output: Some(format!("{function_id}").into()),
            error: None,
            child_workflow_id: None,
            serialization: None,
        };
        let request = LoadSteps {
            workflow_id: "w".into(),
            after: 0,
            rows: 4,
            bytes: 100,
            sized: true,
        };
        let answer = vec![
            (row(3), false),
            (row(1), true),
            (row(4), true),
            (row(2), true),
        ];
        let page = StepPage::new(&request, answer);
        let ids: Vec<u32> = page.rows.iter().map(|r| r.function_id).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(
            page.loaded, 2,
            "the prefix ends at the first row not loaded"
        );
        assert_eq!(
            page.rows[3].output, None,
            "past the prefix a row is its name only"
        );
        assert!(page.more, "a full page");
    }

    #[test]
    fn pieces_in_any_order_make_the_whole_even_inside_a_character() {
        let text = "ab\u{1D11E}cdé";
        for size in 1..=text.len() {
            let mut pieces = Pieces::default();
            for (at, piece) in cut(text, size).into_iter().rev() {
                pieces.put(text.len(), at, piece).unwrap();
            }
            assert_eq!(pieces.finish().unwrap(), text, "pieces of {size}");
        }
    }

    #[test]
    fn a_missing_misplaced_or_invalid_piece_is_an_error() {
        let text = "abcdef";
        let mut missing = Pieces::default();
        missing.put(6, 0, b"abc").unwrap();
        assert!(missing.finish().is_err(), "half an output is no output");
        assert!(Pieces::default().finish().is_err(), "no pieces at all");
        let mut past = Pieces::default();
        assert!(past.put(6, 4, b"efg").is_err(), "past the end");
        let mut resized = Pieces::default();
        resized.put(6, 0, b"abc").unwrap();
        assert!(
            resized.put(7, 3, b"def").is_err(),
            "two sizes for one output"
        );
        let mut invalid = Pieces::default();
        invalid.put(2, 0, &[0xF0]).unwrap();
        invalid.put(2, 1, b"a").unwrap();
        assert!(invalid.finish().is_err(), "not UTF-8");
        let mut whole = Pieces::default();
        for (at, piece) in cut(text, 4) {
            whole.put(text.len(), at, piece).unwrap();
        }
        assert_eq!(whole.finish().unwrap(), text);
    }
}

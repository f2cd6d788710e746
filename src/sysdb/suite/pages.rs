//! Pages of a workflow's recorded steps (`LoadSteps`): in call order, a prefix of each page with
//! its payloads, sized by a running budget or by each row's share of it.

use super::step_write;
use super::{store_tests, Fixture, Kind};
use crate::sysdb::{LoadSteps, StepOutcome, StepPage, StepRow, PIECE};

store_tests!(
    load_steps_reads_pages_in_call_order_within_a_byte_budget,
    an_unsized_page_reads_small_rows_and_its_first_whatever_its_size,
    long_outputs_are_read_whole_across_piece_boundaries,
    every_column_reads_the_same_from_an_unsized_and_a_sized_page,
);

/// A request for the page of `id`'s steps after `after`.
fn page(id: &str, after: u32, rows: u32, bytes: u64) -> LoadSteps {
    LoadSteps {
        workflow_id: id.into(),
        after,
        rows,
        bytes,
        sized: true,
    }
}

async fn load_steps_reads_pages_in_call_order_within_a_byte_budget(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    f.running("b").await;
    // Five steps of `a` with 100-byte outputs (a JSON string), written out of order.
    let output = |fid: u32| format!("\"{}\"", fid.to_string().repeat(98));
    for fid in [2, 1, 5, 3, 4] {
        assert_eq!(f.step("a", fid, &output(fid)).await, StepOutcome::Recorded);
    }
    assert_eq!(f.step("b", 1, "1").await, StepOutcome::Recorded);
    let mut session = f.session().await;
    let all = u64::MAX;
    let (first, none, b, rest, point) = (
        page("a", 0, 2, all),
        page("none", 0, 10, all),
        page("b", 0, 10, all),
        page("a", 2, 10, all),
        page("a", 3, 1, all),
    );
    let pages = session
        .load_steps(&[&first, &none, &b, &rest, &point])
        .await
        .unwrap();
    let fids = |p: &StepPage| p.rows.iter().map(|s| s.function_id).collect::<Vec<_>>();
    // A full page may have more after it; a short one is the history's end.
    assert_eq!(
        (fids(&pages[0]), pages[0].loaded, pages[0].more),
        (vec![1, 2], 2, true)
    );
    assert_eq!(pages[1], StepPage::default());
    assert_eq!((fids(&pages[2]), pages[2].more), (vec![1], false));
    assert_eq!(
        (fids(&pages[3]), pages[3].loaded, pages[3].more),
        (vec![3, 4, 5], 3, false)
    );
    assert_eq!((fids(&pages[4]), pages[4].more), (vec![4], true));
    let row = &pages[0].rows[0];
    assert_eq!(row.name, "step");
    assert_eq!(
        pages[2].rows[0].output.as_deref(),
        Some("1"),
        "b's page holds b's row"
    );
    assert_eq!(row.output.as_deref(), Some(output(1).as_str()));
    assert_eq!(row.serialization.as_deref(), Some("portable_json"));
    // 150 bytes: the second row starts at 100 (read), the third at 200 (its name only). A
    // first row is read whatever its size.
    let pages = session
        .load_steps(&[&page("a", 0, 10, 150), &page("a", 1, 10, 1)])
        .await
        .unwrap();
    assert_eq!(
        (fids(&pages[0]), pages[0].loaded, pages[0].more),
        (vec![1, 2, 3, 4, 5], 2, false)
    );
    let outputs: Vec<_> = pages[0].rows.iter().map(|r| r.output.clone()).collect();
    assert_eq!(
        outputs,
        vec![
            Some(output(1).into()),
            Some(output(2).into()),
            None,
            None,
            None
        ]
    );
    assert!(pages[0].rows.iter().all(|r| r.name == "step"));
    assert_eq!(pages[1].loaded, 1);
    assert_eq!(pages[1].rows[0].output, Some(output(2).into()));
}

async fn an_unsized_page_reads_small_rows_and_its_first_whatever_its_size(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    // Outputs of 100, 10, 100 and 10 bytes (JSON strings).
    let output = |n: usize| format!("\"{}\"", "x".repeat(n - 2));
    for (fid, n) in [(1, 100), (2, 10), (3, 100), (4, 10)] {
        assert_eq!(f.step("a", fid, &output(n)).await, StepOutcome::Recorded);
    }
    let mut session = f.session().await;
    // Four rows within 200 bytes: 50 a row.
    let shares = |after| LoadSteps {
        sized: false,
        ..page("a", after, 4, 200)
    };
    let pages = session.load_steps(&[&shares(0), &shares(2)]).await.unwrap();
    for (p, first) in pages.iter().zip([1, 3]) {
        assert_eq!(p.rows[0].function_id, first);
        // The first row whatever its size, then a prefix that stays within the budget.
        assert!(p.loaded >= 2, "{p:?}");
        let read: usize = p.rows[1..p.loaded]
            .iter()
            .map(|r| r.output.as_deref().map_or(0, str::len))
            .sum();
        assert!(read <= 200, "{p:?}");
        for row in &p.rows[..p.loaded] {
            let n = if row.function_id % 2 == 1 { 100 } else { 10 };
            assert_eq!(row.output, Some(output(n).into()));
        }
        assert!(p.rows[p.loaded..].iter().all(|r| r.output.is_none()));
    }
    // A row over its share ends the prefix (it is read as the next page's first).
    assert_eq!(pages[0].loaded, 2);
    assert_eq!(pages[1].loaded, 2);
}

/// Outputs around `PIECE` (which Postgres reads in pieces past it) come back byte for byte: at
/// it, one byte past it, two whole pieces, and a four-byte character across the boundary.
async fn long_outputs_are_read_whole_across_piece_boundaries(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    // A JSON string of `n` bytes: `fill` then `tail`.
    let string = |n: usize, tail: &str| format!("\"{}{tail}\"", "x".repeat(n - 2 - tail.len()));
    // U+1D11E is four bytes: its first is the last of the first piece.
    let straddling = format!("\"{}\u{1D11E}é\"", "a".repeat(PIECE - 2));
    assert_eq!(straddling.len(), PIECE + 6);
    assert!(!straddling.is_char_boundary(PIECE));
    let outputs = [
        string(PIECE, ""),
        string(PIECE + 1, "y"),
        string(2 * PIECE, "z"),
        straddling,
        "7".to_owned(),
    ];
    for (fid, output) in (1..).zip(&outputs) {
        assert_eq!(f.step("a", fid, output).await, StepOutcome::Recorded);
    }
    let mut session = f.session().await;
    // The whole history at once, then a page per row (each row its page's first).
    let whole = page("a", 0, 10, u64::MAX);
    let pages = session.load_steps(&[&whole]).await.unwrap();
    assert_eq!(pages[0].loaded, outputs.len());
    for (row, output) in pages[0].rows.iter().zip(&outputs) {
        assert_eq!(
            row.output.as_deref(),
            Some(output.as_str()),
            "call #{}",
            row.function_id
        );
        assert_eq!(row.serialization.as_deref(), Some("portable_json"));
    }
    for (after, output) in (0..).zip(&outputs) {
        let one = LoadSteps {
            sized: after % 2 == 0,
            ..page("a", after, 2, 1)
        };
        let pages = session.load_steps(&[&one]).await.unwrap();
        assert_eq!(pages[0].loaded, 1, "after {after}");
        assert_eq!(pages[0].rows[0].output.as_deref(), Some(output.as_str()));
    }
}

/// Text that escapes differently in every format (quotes, backslashes, control characters,
/// characters of two to four bytes) and NULLs read the same from an unsized page (one JSON
/// row on SQLite) as from a sized one (a row per step), in every column.
async fn every_column_reads_the_same_from_an_unsized_and_a_sized_page(kind: Kind) {
    let f = Fixture::new(kind).await;
    f.running("a").await;
    let tricky = "\"q\\\"\\n\u{1}\t\u{7f}é\u{2028}\u{1D11E}\"";
    let mut session = f.session().await;
    for fid in 1..=4 {
        let mut s = step_write("a", fid, tricky);
        s.name = format!("s{fid}\"\\\u{1D11E}");
        match fid {
            2 => (s.output, s.error) = (None, Some(format!("{tricky}\u{1f}!"))),
            3 => s.child_workflow_id = Some("child \"\u{1D11E}".into()),
            4 => s.output = Some("null".into()),
            _ => {}
        }
        let recorded = session.checkpoint(&[&s]).await.unwrap();
        assert_eq!(recorded, [StepOutcome::Recorded]);
    }
    let read = |sized| LoadSteps {
        sized,
        ..page("a", 0, 10, 1 << 20)
    };
    let pages = session
        .load_steps(&[&read(false), &read(true)])
        .await
        .unwrap();
    let rows = |p: &StepPage| p.rows.iter().map(row_text).collect::<Vec<_>>();
    assert_eq!(pages[0].loaded, 4);
    assert_eq!(rows(&pages[0]), rows(&pages[1]));
    assert_eq!(pages[0].rows[0].output.as_deref(), Some(tricky));
    assert!(pages[1].rows[1]
        .error
        .as_deref()
        .unwrap()
        .ends_with("\u{1f}!"));
}

fn row_text(r: &StepRow) -> String {
    format!(
        "{} {:?} {:?} {:?} {:?} {:?}",
        r.function_id,
        r.name,
        r.output.as_deref(),
        r.error,
        r.child_workflow_id,
        r.serialization
    )
}

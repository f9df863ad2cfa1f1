//! The TUI's update tests of the providers' order: `s` `S` and `<` `>`, missing figures, and
//! the selection that follows its endpoint across orders and snapshots.

use crossterm::event::{KeyCode, KeyModifiers};

use super::super::sort::{SortColumn, SortDir};
use super::super::testkit::{kimi_snapshot, state_with};
use super::*;

fn key(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}
fn order(st: &UiState) -> Vec<String> {
    st.endpoints().iter().map(|e| e.tag.clone()).collect()
}

#[test]
fn s_cycles_the_sort_column_and_s_shift_reverses() {
    let mut st = state_with(kimi_snapshot());
    let cycle = [
        (SortColumn::Provider, SortDir::Asc),
        (SortColumn::TokPerS, SortDir::Desc),
        (SortColumn::Spent, SortDir::Desc),
        (SortColumn::Errors, SortDir::Desc),
        (SortColumn::Done, SortDir::Desc),
        (SortColumn::PriceOut, SortDir::Asc),
    ];
    for (col, dir) in cycle {
        assert_eq!(update(&mut st, key('s')), vec![]);
        assert_eq!((st.sort.column, st.sort.dir), (col, dir));
    }
    update(&mut st, key('S'));
    assert_eq!(st.sort.dir, SortDir::Desc);
    assert_eq!(order(&st)[0], "venice");
}

/// `<` `>` choose any column of the table, left or right of the one sorted by, each in its
/// natural direction, wrapping at the ends; the status line says which.
#[test]
fn angle_brackets_sort_by_any_column_left_or_right() {
    let mut st = state_with(kimi_snapshot());
    assert_eq!(st.sort.column, SortColumn::PriceOut);
    let right = [
        (SortColumn::Up, SortDir::Desc),
        (SortColumn::Fly, SortDir::Desc),
        (SortColumn::Done, SortDir::Desc),
        (SortColumn::Errors, SortDir::Desc),
        (SortColumn::TokPerS, SortDir::Desc),
        (SortColumn::Ttft, SortDir::Asc),
        (SortColumn::Len, SortDir::Desc),
        (SortColumn::Trunc, SortDir::Desc),
        (SortColumn::Spent, SortDir::Desc),
        (SortColumn::Provider, SortDir::Asc),
        (SortColumn::Tag, SortDir::Asc),
        (SortColumn::Quant, SortDir::Asc),
        (SortColumn::PriceIn, SortDir::Asc),
        (SortColumn::PriceOut, SortDir::Asc),
    ];
    for (col, dir) in right {
        assert_eq!(update(&mut st, key('>')), vec![]);
        assert_eq!((st.sort.column, st.sort.dir), (col, dir));
    }
    update(&mut st, key('<'));
    assert_eq!(st.sort.column, SortColumn::PriceIn);
    assert_eq!(
        st.status.as_ref().map(|s| s.text.as_str()),
        Some("sorted by $/M in ↑")
    );
    // From a column outside `s`'s cycle, `s` starts it again.
    update(&mut st, key('s'));
    assert_eq!(st.sort.column, SortColumn::PriceOut);
}

/// Sorted by TTFT, quickest first: endpoints with no TTFT yet come last, and stay last when
/// the order is reversed; ties go by tag.
#[test]
fn a_missing_figure_sorts_last_either_way() {
    let mut snap = kimi_snapshot();
    for (i, e) in snap.endpoints.iter_mut().enumerate() {
        e.ttft_p50_ms = match i % 3 {
            0 => None,
            1 => Some(900),
            _ => Some(400 + i as u64),
        };
    }
    let missing: std::collections::BTreeSet<String> = (snap.endpoints.iter())
        .filter(|e| e.ttft_p50_ms.is_none())
        .map(|e| e.tag.clone())
        .collect();
    let mut st = state_with(snap);
    while st.sort.column != SortColumn::Ttft {
        update(&mut st, key('>'));
    }
    for dir in [SortDir::Asc, SortDir::Desc] {
        assert_eq!(st.sort.dir, dir);
        let rows = st.endpoints();
        let n = rows.len() - missing.len();
        assert!(
            rows[n..].iter().all(|e| missing.contains(&e.tag)),
            "{dir:?}"
        );
        let ttfts: Vec<u64> = rows[..n].iter().filter_map(|e| e.ttft_p50_ms).collect();
        let mut want = ttfts.clone();
        want.sort_unstable();
        if dir == SortDir::Desc {
            want.reverse();
        }
        assert_eq!(ttfts, want, "{dir:?}");
        let tied: Vec<&str> = (rows[..n].iter())
            .filter(|e| e.ttft_p50_ms == Some(900))
            .map(|e| e.tag.as_str())
            .collect();
        assert!(tied.is_sorted(), "{tied:?}");
        update(&mut st, key('S'));
    }
}

#[test]
fn selection_follows_its_tag_across_re_sorts_and_snapshots() {
    let mut st = state_with(kimi_snapshot());
    for _ in 0..5 {
        update(&mut st, key('j'));
    }
    assert_eq!(st.selected.as_deref(), Some("parasail/int4"));
    assert_eq!(st.selected_row(), Some(5));
    update(&mut st, key('s')); // provider A-Z
    assert_eq!(st.selected.as_deref(), Some("parasail/int4"));
    assert_eq!(st.selected_row(), Some(7));
    update(&mut st, key('j'));
    assert_eq!(st.selected.as_deref(), Some("siliconflow/int4"));
    // By tok/s, then a snapshot in which SiliconFlow becomes the slowest: same endpoint.
    update(&mut st, key('s'));
    assert_eq!(st.selected_row(), Some(1));
    let mut s = kimi_snapshot();
    for e in &mut s.endpoints {
        if e.tag == "siliconflow/int4" {
            e.tok_per_s = 0.0;
        }
    }
    update(&mut st, Msg::Snapshot(Arc::new(s.clone())));
    assert_eq!(st.selected.as_deref(), Some("siliconflow/int4"));
    assert_ne!(st.selected_row(), Some(1));
    // An endpoint that disappears hands the selection to the first row.
    s.endpoints.retain(|e| e.tag != "siliconflow/int4");
    update(&mut st, Msg::Snapshot(Arc::new(s)));
    assert_eq!(st.selected.as_deref(), Some("chutes/int4"));
}

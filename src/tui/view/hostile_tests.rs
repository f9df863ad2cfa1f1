//! The providers table under hostile listing text (reliability-probe-5 P17): names of 10,000
//! characters, a 12 KB quantization, ZWJ emoji, piles of combining marks with a right-to-left
//! override, tabs and backspaces, zero-width spaces, CJK. What a person sees must keep its
//! box and its columns: every cell cut to its column, and no character a terminal would draw
//! at another width than the buffer assumed (or that reorders the line) reaches the buffer.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;

use crate::engine::snapshot::EndpointSnap;
use crate::policy::Fidelity;

use super::super::testkit::{endpoint, kimi_snapshot, state_with};
use super::render;
use super::text::width;

fn hostile(provider: &str, tag: &str, quant: &str) -> EndpointSnap {
    endpoint(provider, tag, quant, Fidelity::Unknown, 0.5, 2.6, 0, 99.0)
}

/// One endpoint per shape the probe sent, and one carrying all of them.
fn hostile_endpoints() -> Vec<EndpointSnap> {
    let family = "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}";
    let marks = format!("e{}\u{202E}evil", "\u{301}".repeat(300));
    let tabs = "tab\there\u{8}\u{8}bs\u{1b}[2J";
    let long = "A".repeat(10_000);
    let zwsp = format!("{}zw", "\u{200B}".repeat(1_000));
    let cjk = "深度求索".repeat(20);
    let quant = "q".repeat(12 * 1024);
    let all = format!("{family}{marks}{tabs}{zwsp}{cjk}{long}");
    vec![
        hostile(&family.repeat(50), "zwj/x", "fp8"),
        hostile(&marks, "marks/x", "fp8\u{202E}\u{200B}"),
        hostile(tabs, "tabs\t/x", "bf\u{8}16"),
        hostile(&long, &long, "fp8"),
        hostile(&zwsp, &zwsp, "\u{200B}".repeat(1_000).as_str()),
        hostile(&cjk, &cjk, "整数四"),
        hostile("Quant", "quant/x", &quant),
        hostile(&all, &all, &format!("{all}{quant}")),
    ]
}

fn draw(w: u16, h: u16, endpoints: Vec<EndpointSnap>) -> Buffer {
    let mut snap = kimi_snapshot();
    snap.endpoints.extend(endpoints);
    let st = state_with(snap);
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| render(f, &st)).expect("draw");
    t.backend().buffer().clone()
}

/// Row `y` as a person reads it: the cells a wide character covers are not spaces.
fn row(b: &Buffer, y: u16) -> String {
    let mut out = String::new();
    let mut x = 0;
    while x < b.area.width {
        let sym = b[(x, y)].symbol();
        out.push_str(sym);
        x += width(sym).max(1);
    }
    out
}

/// The providers pane: its top and bottom rows and its left and right columns.
fn pane(b: &Buffer) -> (u16, u16, u16, u16) {
    let top = (0..b.area.height)
        .find(|&y| row(b, y).contains("Providers"))
        .expect("a providers pane");
    let left = (0..b.area.width)
        .find(|&x| b[(x, top)].symbol() == "┌")
        .expect("its top-left corner");
    let right = (left + 1..b.area.width)
        .find(|&x| b[(x, top)].symbol() == "┐")
        .expect("its top-right corner");
    let bottom = (top + 1..b.area.height)
        .find(|&y| b[(left, y)].symbol() == "└")
        .expect("its bottom-left corner");
    (top, bottom, left, right)
}

/// A character a terminal draws at another width than the buffer counts, or that moves what
/// follows: controls, format characters (bidi overrides, zero-width space and joiners).
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{AD}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}')
        || matches!(c, '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FE00}'..='\u{FE0F}')
}

#[test]
fn hostile_listing_text_keeps_the_providers_box_and_columns() {
    for (w, h) in [(80, 48), (120, 48), (200, 48)] {
        let b = draw(w, h, hostile_endpoints());
        let (top, bottom, left, right) = pane(&b);
        let screen: Vec<String> = (0..h).map(|y| row(&b, y)).collect();
        let all = screen.join("\n");
        for y in top + 1..bottom {
            let (l, r) = (b[(left, y)].symbol(), b[(right, y)].symbol());
            assert!(
                l == "│" && r == "│",
                "{w}x{h} row {y} lost its border ({l:?} {r:?}):\n{all}"
            );
            // A cell's text is as wide as the buffer takes it to be, char for char (a
            // terminal that does not join a ZWJ sequence draws each emoji), and nothing in
            // it reorders or moves the line.
            for x in left..=right {
                let sym = b[(x, y)].symbol();
                assert!(
                    !sym.chars().any(unsafe_char),
                    "{w}x{h} ({x},{y}) holds {sym:?}:\n{all}"
                );
                let by_char: u16 = sym.chars().map(|c| width(c.encode_utf8(&mut [0; 4]))).sum();
                assert_eq!(by_char, width(sym), "{w}x{h} ({x},{y}) {sym:?}:\n{all}");
                assert!(sym.chars().count() <= 4, "{w}x{h} ({x},{y}) {sym:?}");
            }
        }
        // The hostile endpoints are there, cut short.
        assert!(all.contains("AAAA…"), "{all}");
        assert!(all.contains("深度"), "{all}");
        // The other endpoints' columns are intact: each value right under (or, right-aligned,
        // ending under) its header, as without the hostile ones.
        let header_y = top + 1;
        let header = &screen[usize::from(header_y)];
        let col = |label: &str| {
            let at = header
                .find(label)
                .unwrap_or_else(|| panic!("{label:?}:\n{all}"));
            header[..at].chars().count()
        };
        for (name, cells) in [
            (
                "Chutes",
                [("provider", "Chutes", false), ("spent", "$11.92", true)],
            ),
            (
                "Parasail",
                [("provider", "Parasail", false), ("tok/s", "-", true)],
            ),
            (
                "Moonshot AI",
                [("quant", "int4", false), ("up30m", "99.9%", true)],
            ),
        ] {
            let y = (header_y..bottom)
                .find(|&y| screen[usize::from(y)].contains(name))
                .unwrap_or_else(|| panic!("no {name} row:\n{all}"));
            let line: Vec<&str> = (0..w).map(|x| b[(x, y)].symbol()).collect();
            for (label, value, right_aligned) in cells {
                let at = col(label);
                let from = if right_aligned {
                    at + width(label) as usize - width(value) as usize
                } else {
                    at
                };
                let got: String = line[from..from + value.len()].concat();
                assert_eq!(got, value, "{w}x{h} {name} under {label:?}:\n{all}");
            }
        }
    }
}

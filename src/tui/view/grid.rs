//! Drawing lines and tables of lines into the buffer, cell for cell what ratatui's `Line` and
//! `Table` widgets draw, but printable ASCII is written without grapheme segmentation or width
//! lookups. The busy frame spent most of its time there (BENCHMARKS.md, TUI): the providers
//! and datasets tables are hundreds of short ASCII cells redrawn every frame. Anything else
//! (wide or combining characters, control characters, a line wider than its area) goes
//! through ratatui itself, so the screen is the same either way (view tests compare them).

use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::Widget;

/// Printable ASCII: one byte, one cell, one grapheme.
fn plain(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Draws `line` in the first row of `area`, as `line.render(area, buf)` does.
pub(super) fn line(buf: &mut Buffer, area: Rect, line: &Line) {
    let area = area.intersection(buf.area);
    if area.is_empty() {
        return;
    }
    let area = Rect { height: 1, ..area };
    if !line.spans.iter().all(|s| plain(&s.content)) {
        line.render(area, buf);
        return;
    }
    // Printable ASCII from here on: a span's width is its length.
    let total: usize = line.spans.iter().map(|s| s.content.len()).sum();
    if total == 0 {
        return;
    }
    if total > usize::from(area.width) {
        line.render(area, buf);
        return;
    }
    style_row(buf, area, line.style);
    let indent = match line.alignment {
        Some(Alignment::Center) => (usize::from(area.width) - total) / 2,
        Some(Alignment::Right) => usize::from(area.width) - total,
        Some(Alignment::Left) | None => 0,
    };
    let mut x = area.x + indent as u16;
    let start = buf.index_of(area.x, area.y) - usize::from(area.x);
    for span in &line.spans {
        let w = span.content.len();
        let from = start + usize::from(x);
        for (cell, b) in buf.content[from..from + w]
            .iter_mut()
            .zip(span.content.bytes())
        {
            cell.set_char(char::from(b)).set_style(span.style);
        }
        x += w as u16;
    }
}

/// `buf.set_style(area, style)` for an area one row high inside the buffer, over the row's
/// slice of cells at once (and nothing for the empty style, which changes no cell).
fn style_row(buf: &mut Buffer, area: Rect, style: Style) {
    if style == Style::default() || area.is_empty() {
        return;
    }
    let from = buf.index_of(area.x, area.y);
    for cell in &mut buf.content[from..from + usize::from(area.width)] {
        cell.set_style(style);
    }
}

/// One row of a [`table`]: its style (over the whole row, gaps included) and its cells.
pub(super) struct Row<'a> {
    pub style: Style,
    pub cells: Vec<Line<'a>>,
}

/// Draws a header and rows in `area` with columns of `widths` one cell apart, as ratatui's
/// `Table` does with `Constraint::Length` columns that fit, `column_spacing(1)` and rows of
/// height 1: the header on the first line, the rows below, as many as fit.
pub(super) fn table(buf: &mut Buffer, area: Rect, widths: &[u16], header: &Row, rows: &[Row]) {
    let area = area.intersection(buf.area);
    if area.is_empty() {
        return;
    }
    let xs: Vec<u16> = widths
        .iter()
        .scan(area.x, |x, w| {
            let at = *x;
            *x = x.saturating_add(w + 1);
            Some(at)
        })
        .collect();
    for (y, row) in (area.y..area.bottom()).zip(std::iter::once(header).chain(rows)) {
        let row_area = Rect {
            y,
            height: 1,
            ..area
        };
        style_row(buf, row_area, row.style);
        for ((&x, &w), cell) in xs.iter().zip(widths).zip(&row.cells) {
            let cell_area = Rect::new(x, y, w, 1).intersection(row_area);
            line(buf, cell_area, cell);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::{Color, Modifier, Stylize};
    use ratatui::text::Span;
    use ratatui::widgets::{Cell, Table};

    /// What ratatui draws, against what this module draws, on the same starting buffer.
    fn both(area: Rect, draw_ours: impl Fn(&mut Buffer), draw_theirs: impl Fn(&mut Buffer)) {
        let mut start = Buffer::empty(Rect::new(0, 0, 40, 6));
        // Something already there, which styles patch and text overwrites.
        for (i, c) in start.content.iter_mut().enumerate() {
            c.set_char(char::from(b'a' + (i % 26) as u8))
                .set_fg(Color::Blue);
        }
        let mut ours = start.clone();
        let mut theirs = start;
        draw_ours(&mut ours);
        draw_theirs(&mut theirs);
        assert_eq!(ours, theirs, "in {area:?}");
    }

    fn lines() -> Vec<Line<'static>> {
        vec![
            Line::raw("plain"),
            Line::styled("styled", Style::new().red()),
            Line::raw("right").right_aligned(),
            Line::raw("mid").centered(),
            Line::from(vec![
                "> ".bold(),
                Span::raw("[x]"),
                Span::styled("q", Color::Green),
            ]),
            Line::raw("wide 漢字 text").right_aligned(),
            Line::raw("e\u{301}te"),
            Line::raw("tab\there"),
            Line::raw(""),
            Line::styled("", Style::new().reversed()),
            Line::raw("a line far wider than the area it is drawn into").right_aligned(),
            Line::raw("too wide, left").style(Modifier::BOLD),
        ]
    }

    #[test]
    fn a_line_is_drawn_as_ratatui_draws_it() {
        for l in lines() {
            for area in [
                Rect::new(0, 0, 12, 1),
                Rect::new(3, 2, 20, 1),
                Rect::new(30, 5, 10, 1),
                Rect::new(38, 0, 5, 1),
                Rect::new(0, 0, 0, 1),
            ] {
                both(area, |b| line(b, area, &l), |b| (&l).render(area, b));
            }
        }
    }

    #[test]
    fn a_table_is_drawn_as_ratatui_draws_it() {
        let widths = [6u16, 3, 8, 5];
        let header = Row {
            style: Style::default(),
            cells: vec![
                Line::styled("name", Style::new().bold()),
                Line::raw("n").right_aligned(),
                Line::raw("why"),
                Line::raw("$").right_aligned(),
            ],
        };
        let rows: Vec<Row> = (0..7)
            .map(|i| Row {
                style: if i == 2 {
                    Style::new().reversed()
                } else {
                    Style::new().fg(Color::Gray)
                },
                cells: lines().into_iter().skip(i).take(4).collect(),
            })
            .collect();
        fn to_ratatui<'a>(r: &Row<'a>) -> ratatui::widgets::Row<'a> {
            ratatui::widgets::Row::new(r.cells.iter().cloned().map(Cell::new)).style(r.style)
        }
        for area in [Rect::new(0, 0, 40, 6), Rect::new(2, 1, 30, 4)] {
            both(
                area,
                |b| table(b, area, &widths, &header, &rows),
                |b| {
                    Table::new(
                        rows.iter().map(to_ratatui),
                        widths.map(ratatui::layout::Constraint::Length),
                    )
                    .header(to_ratatui(&header))
                    .column_spacing(1)
                    .render(area, b)
                },
            );
        }
    }
}

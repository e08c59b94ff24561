//! Rendering of diagnostics for people (ariadne), for tools (JSON) and for code scanning (SARIF).
//!
//! All three read the same neutral [`Diagnostic`](reel_syntax::Diagnostic) and agree on where a
//! span lies: [`Region`] is the one conversion from byte spans to 1-based lines and columns.

pub mod json;
pub mod sarif;
pub mod terminal;

use std::ops::Range;

use reel_syntax::{LineIndex, Span};

pub use json::to_json;
pub use sarif::to_sarif;
pub use terminal::render_terminal;

/// Where a span lies in its text: 1-based lines and columns (in characters), the end exclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Line of the first character.
    pub line: u32,
    /// Column of the first character.
    pub column: u32,
    /// Line of the position just past the last character.
    pub end_line: u32,
    /// Column of the position just past the last character.
    pub end_column: u32,
}

impl Region {
    /// The region of `span` in `text` (indexed by `index`); a span reaching outside the text is clamped.
    pub fn of(index: &LineIndex, text: &str, span: Span) -> Region {
        let range = clamp(text, span);
        let start = index.line_col(text, range.start);
        let end = index.line_col(text, range.end);
        Region {
            line: start.line,
            column: start.column,
            end_line: end.line,
            end_column: end.column,
        }
    }
}

/// `span` as a byte range inside `text`, on character boundaries, with `start <= end`.
///
/// Diagnostics come from many stages; a stale or off-by-one span must degrade to a slightly wrong
/// place rather than a panic in a renderer, which would hide every other diagnostic.
pub(crate) fn clamp(text: &str, span: Span) -> Range<usize> {
    let mut start = (span.start as usize).min(text.len());
    let mut end = (span.end as usize).clamp(start, text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    while !text.is_char_boundary(end) {
        end += 1;
    }
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_counts_characters_and_excludes_the_end() {
        let text = "flow a {\n  x = \"héllo\"\n}\n";
        let index = LineIndex::new(text);
        let start = text.find('"').unwrap();
        let end = text.rfind('"').unwrap() + 1;
        let region = Region::of(&index, text, Span::new(start, end));
        assert_eq!(
            region,
            Region {
                line: 2,
                column: 7,
                end_line: 2,
                end_column: 14
            }
        );
    }

    #[test]
    fn region_of_the_end_of_file_is_past_the_last_newline() {
        let text = "a\nb\n";
        let index = LineIndex::new(text);
        let region = Region::of(&index, text, Span::new(4, 4));
        assert_eq!((region.line, region.column), (3, 1));
        assert_eq!((region.end_line, region.end_column), (3, 1));
    }

    #[test]
    fn clamp_repairs_spans_outside_the_text_or_inside_a_character() {
        let text = "aé";
        assert_eq!(clamp(text, Span::new(2, 2)), 1..3);
        assert_eq!(clamp(text, Span::new(9, 4)), 3..3);
        assert_eq!(clamp(text, Span { start: 3, end: 1 }), 3..3);
        assert_eq!(clamp("", Span::new(1, 5)), 0..0);
    }
}

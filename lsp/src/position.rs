//! The one conversion between byte offsets and LSP positions (lines and UTF-16 columns).
//!
//! Every span the compiler produces is a byte range; editors speak lines and UTF-16 code units.
//! Positions past the end of a line or of the text are clamped, so a stale or hostile position
//! never panics.

use std::borrow::Cow;

use reel_syntax::{LineIndex, Span};
use tower_lsp_server::lsp_types::{Position, Range};

/// One text with its line starts, for converting both ways.
#[derive(Clone, Debug)]
pub struct Lines<'a> {
    text: &'a str,
    index: Cow<'a, LineIndex>,
}

impl<'a> Lines<'a> {
    /// Indexes the line starts of `text`.
    pub fn new(text: &'a str) -> Self {
        Lines {
            text,
            index: Cow::Owned(LineIndex::new(text)),
        }
    }

    /// `text` with the index the compiler already keeps of it (`reel_compiler::queries::
    /// line_index`), so that requests of one revision share one index.
    pub fn indexed(text: &'a str, index: &'a LineIndex) -> Self {
        Lines {
            text,
            index: Cow::Borrowed(index),
        }
    }

    /// Where `line` starts, if the text has it.
    fn start(&self, line: usize) -> Option<usize> {
        self.index.line_start(line)
    }

    /// The text being indexed.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The LSP position of byte `offset` (clamped to the text and to a char boundary).
    pub fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.index.line_of(offset);
        let start = self.start(line).unwrap_or(0);
        let character: usize = self.text[start..offset].chars().map(char::len_utf16).sum();
        Position::new(line as u32, character as u32)
    }

    /// The byte offset of an LSP position; a column past the line's end means its end, a line past
    /// the text's end means the end of the text.
    pub fn offset(&self, pos: Position) -> usize {
        let Some(start) = self.start(pos.line as usize) else {
            return self.text.len();
        };
        let end = self.line_end(pos.line as usize);
        let mut units = 0usize;
        for (i, c) in self.text[start..end].char_indices() {
            if units >= pos.character as usize {
                return start + i;
            }
            units += c.len_utf16();
        }
        end
    }

    /// The LSP range of a byte span.
    pub fn range(&self, span: Span) -> Range {
        Range::new(
            self.position(span.start as usize),
            self.position(span.end as usize),
        )
    }

    /// The byte span of an LSP range (ends before starts are swapped).
    pub fn span(&self, range: Range) -> Span {
        let (a, b) = (self.offset(range.start), self.offset(range.end));
        Span::new(a.min(b), a.max(b))
    }

    /// The 0-based line holding `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        self.index.line_of(offset.min(self.text.len()))
    }

    /// The byte offset of the end of 0-based `line` (before its newline).
    pub fn line_end(&self, line: usize) -> usize {
        self.start(line + 1)
            .map_or(self.text.len(), |next| next - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_columns_count_surrogate_pairs_and_multibyte_chars() {
        let text = "a\né😀x\n";
        let lines = Lines::new(text);
        // `x` is after é (2 bytes, 1 unit) and 😀 (4 bytes, 2 units).
        let x = text.find('x').unwrap();
        assert_eq!(lines.position(x), Position::new(1, 3));
        assert_eq!(lines.offset(Position::new(1, 3)), x);
        assert_eq!(lines.offset(Position::new(1, 0)), 2);
    }

    #[test]
    fn out_of_range_positions_are_clamped() {
        let text = "ab\ncd";
        let lines = Lines::new(text);
        assert_eq!(lines.offset(Position::new(0, 99)), 2);
        assert_eq!(lines.offset(Position::new(7, 0)), text.len());
        assert_eq!(lines.position(999), Position::new(1, 2));
        // Inside a multi-byte char: the start of the char.
        let lines = Lines::new("é");
        assert_eq!(lines.position(1), Position::new(0, 0));
    }

    #[test]
    fn a_position_inside_a_surrogate_pair_goes_to_the_next_char() {
        let lines = Lines::new("😀b");
        assert_eq!(lines.offset(Position::new(0, 1)), 4);
    }
}

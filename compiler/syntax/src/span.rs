//! Byte spans into one source file, and the conversion of offsets to lines and columns.

use std::ops::Range;

/// A half-open byte range `start..end` into one source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    /// First byte of the spanned text.
    pub start: u32,
    /// One past the last byte of the spanned text.
    pub end: u32,
}

impl Span {
    /// A span from byte offsets.
    pub fn new(start: usize, end: usize) -> Self {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The same span `offset` bytes later: from text parsed alone to its place in the file.
    #[inline]
    pub fn shifted(self, offset: u32) -> Span {
        Span {
            start: self.start + offset,
            end: self.end + offset,
        }
    }

    /// The same span counted from `start` instead of the file's first byte (what lies before
    /// `start` clamps to 0): the inverse of [`Span::shifted`], to compare or memoize a subtree
    /// wherever it stands.
    #[inline]
    pub fn relative_to(self, start: u32) -> Span {
        Span {
            start: self.start.saturating_sub(start),
            end: self.end.saturating_sub(start),
        }
    }

    /// The smallest span that covers both.
    pub fn cover(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// Whether `offset` falls inside the span (the end included, as editors expect of a cursor).
    pub fn contains(self, offset: usize) -> bool {
        (self.start as usize) <= offset && offset <= (self.end as usize)
    }

    /// The span as a `Range<usize>`, for slicing and for renderers.
    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    /// Length in bytes.
    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether the span covers nothing.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

impl From<Range<usize>> for Span {
    fn from(r: Range<usize>) -> Self {
        Span::new(r.start, r.end)
    }
}

/// A 1-based line and column (in characters) of a byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineCol {
    /// 1-based line number.
    pub line: u32,
    /// 1-based column, counted in Unicode scalar values.
    pub column: u32,
}

/// Maps byte offsets of one text to lines and columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineIndex {
    line_starts: Vec<u32>,
}

impl LineIndex {
    /// Index the line starts of `text`.
    pub fn new(text: &str) -> Self {
        // The language server indexes every edit's whole text: memchr finds the breaks a word
        // at a time.
        let mut line_starts = Vec::with_capacity(text.len() / 32 + 1);
        line_starts.push(0);
        line_starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i as u32 + 1));
        LineIndex { line_starts }
    }

    /// Where each line starts, in order (the first at 0).
    pub fn line_starts(&self) -> &[u32] {
        &self.line_starts
    }

    /// The 0-based line that holds `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&(offset as u32)) {
            Ok(l) => l,
            Err(l) => l - 1,
        }
    }

    /// Byte offset where 0-based `line` starts.
    pub fn line_start(&self, line: usize) -> Option<usize> {
        self.line_starts.get(line).map(|s| *s as usize)
    }

    /// Number of lines.
    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }

    /// 1-based line and character column of `offset` in `text`.
    pub fn line_col(&self, text: &str, offset: usize) -> LineCol {
        let offset = offset.min(text.len());
        let line = self.line_of(offset);
        let start = self.line_starts[line] as usize;
        let column = text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(offset - start);
        LineCol {
            line: line as u32 + 1,
            column: column as u32 + 1,
        }
    }
}

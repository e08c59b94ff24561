//! An outline kept across edits of one file: after an edit inside a flow body, only the body lines
//! the edit touched are scanned again, and the outline is exactly what a full scan gives.
//!
//! Why that holds: the scan is a left-to-right machine whose state at the start of a body line
//! (a line that starts with nothing open but the flow's brace) is always the same, and whose
//! look-ahead never crosses a line break. So the text before such a line cannot tell an edit
//! after it, and if scanning the edited lines from such a line ends again just after a line
//! break with only the flow's brace open, the scan goes on over the unchanged rest exactly as it
//! did before, shifted by the edit's length. The body's chunks are then cut again from its lines.

use std::sync::Arc;

use super::{BodyLines, Line, OpenFlow, Outline, OutlineItem, Scanner};
use crate::lexer::Delim;
use crate::parser::ChunkEnd;
use crate::span::Span;

/// A file's text with its outline, and what the scan saw of each body it split, ready to give
/// the outline of the file's next text.
#[derive(Clone, Debug)]
pub struct OutlineMemo {
    text: Arc<str>,
    outline: Outline,
    /// Beside each item of the outline, the lines of its body when the scan split it.
    bodies: Vec<Option<Arc<BodyLines>>>,
    /// The bytes of `text` scanned again by the update that made this memo; `None` after a
    /// scan of the whole text.
    rescanned: Option<Span>,
}

impl OutlineMemo {
    /// Scans the whole of `text`.
    pub fn scan(text: Arc<str>) -> Self {
        let (outline, bodies) = match Scanner::new(&text).run() {
            Some((items, bodies)) => (
                Outline {
                    items,
                    whole: false,
                },
                bodies.into_iter().map(|b| b.map(Arc::new)).collect(),
            ),
            None => (
                Outline {
                    items: Vec::new(),
                    whole: true,
                },
                Vec::new(),
            ),
        };
        OutlineMemo {
            text,
            outline,
            bodies,
            rescanned: None,
        }
    }

    /// The memo of `text`, an edit of this memo's text: only the edited lines are scanned when
    /// the edit lies inside one flow body and leaves the rest of it as it was, else all of it.
    pub fn update(&self, text: Arc<str>) -> Self {
        self.reuse(&text).unwrap_or_else(|| Self::scan(text))
    }

    /// The text this outline is of.
    pub fn text(&self) -> &Arc<str> {
        &self.text
    }

    /// The outline, the same as [`super::outline`] gives for the text.
    pub fn outline(&self) -> &Outline {
        &self.outline
    }

    /// The bytes the update that made this memo scanned again (the rest was reused), or `None`
    /// when it scanned the whole text.
    pub fn rescanned(&self) -> Option<Span> {
        self.rescanned
    }

    /// The memo of `text` from this one, when the edit can be scanned alone.
    fn reuse(&self, text: &Arc<str>) -> Option<Self> {
        if self.outline.whole {
            return None;
        }
        let (old, new) = (self.text.as_bytes(), text.as_bytes());
        // The edit replaced old[start..old_end] by new[start..new_end].
        let start = common_prefix(old, new);
        let same_end = common_suffix(&old[start..], &new[start..]);
        let (old_end, new_end) = (old.len() - same_end, new.len() - same_end);
        // The flow whose body holds the edit.
        let idx = self
            .outline
            .items
            .partition_point(|it| it.span.end as usize <= start);
        let item = self.outline.items.get(idx)?;
        let body = self.bodies.get(idx)?.as_deref()?;
        // The lines to scan again: from the body line the edit starts on, up to the first body
        // line (or the closing brace's line) that starts after it, and after what it replaced.
        let first = body
            .lines
            .partition_point(|l| l.start as usize <= start)
            .checked_sub(1)?;
        let past = old_end.max(start + 1);
        let next = body.lines.partition_point(|l| (l.start as usize) < past);
        let window_end = body.lines.get(next).map_or(body.close_line, |l| l.start) as usize;
        // Up to a body line after the edit; or up to the closing brace's line, which the edit
        // may reach but not change (new lines typed just above the `}`).
        let reaches = match body.lines.get(next) {
            Some(_) => window_end >= past,
            None => window_end >= old_end,
        };
        if !reaches {
            return None;
        }
        // A line before which the scan closed what was left open starts deeper than the
        // flow's brace, and so do the comment lines above it it recorded then: scan from the
        // start.
        if member_line_at(&body.lines, first).is_some_and(|h| body.lines[h].closes_open.is_some()) {
            return None;
        }
        let from = body.lines[first].start as usize;
        let new_window_end = new_end + (window_end - old_end);

        let mut scan = Scanner::new(text);
        scan.pos = from;
        scan.line_begin = from;
        scan.stack.push(Delim::Brace);
        scan.flow = Some(OpenFlow {
            item: 0,
            lines: Vec::new(),
            irregular: false,
            on_header_line: false,
            line_recorded: false,
        });
        scan.scan_to(new_window_end)?;
        // Back where the old scan was at `window_end`: just past a line break, with only the
        // flow's brace open and nothing closed out of order.
        let same_state = scan.pos == new_window_end
            && new_window_end > 0
            && new[new_window_end - 1] == b'\n'
            && scan.line_start
            && scan.stack == [Delim::Brace]
            && !scan.after_item
            && scan.items.is_empty();
        // What the edit left open (or no longer leaves open) is closed before the next member
        // line's first word, and so that line's record changes: scan through that word too,
        // and be back where the old scan was after it.
        // That line is the first after the window that is not a comment or blank line: the
        // comment lines between are its doc comments, recorded with it.
        let mut next = next;
        let mut new_window_end = new_window_end;
        let head = member_line_at(&body.lines, next);
        let open_before = head.is_some_and(|h| body.lines[h].closes_open.is_some());
        if !same_state || open_before {
            let h = head?;
            let line = body.lines.get(h)?;
            if line.kind != super::LineKind::Member || !scan.line_start || scan.after_item {
                return None;
            }
            let first = Shift::new(old.len(), new.len()).at(line.first) as usize;
            let word_end = super::word_end(text, first);
            scan.scan_to(word_end)?;
            let again = scan.flow.as_ref()?.lines.last().copied();
            let expected = Line {
                closes_open: again.and_then(|l| l.closes_open),
                ..Shift::new(old.len(), new.len()).line(line)
            };
            if scan.pos != word_end
                || scan.stack != [Delim::Brace]
                || scan.after_item
                || !scan.items.is_empty()
                || again != Some(expected)
            {
                return None;
            }
            next = h + 1;
            new_window_end = word_end;
        }
        let flow = scan.flow.take()?;
        if flow.irregular {
            return None;
        }

        let shift = Shift::new(old.len(), new.len());
        let mut lines = Vec::with_capacity(first + flow.lines.len() + body.lines.len() - next);
        lines.extend_from_slice(&body.lines[..first]);
        lines.extend(flow.lines);
        lines.extend(body.lines[next..].iter().map(|l| shift.line(l)));
        let docs = &body.trailing_docs;
        let kept = docs.partition_point(|&d| (d as usize) < from);
        let after = docs.partition_point(|&d| (d as usize) < window_end);
        let mut trailing_docs = docs[..kept].to_vec();
        trailing_docs.extend(scan.trailing_docs);
        trailing_docs.extend(docs[after..].iter().map(|&d| shift.at(d)));
        let edited = BodyLines {
            lines,
            trailing_docs,
            close_line: shift.at(body.close_line),
            close: shift.at(body.close),
        };

        let mut items = Vec::with_capacity(self.outline.items.len());
        items.extend_from_slice(&self.outline.items[..idx]);
        items.push(OutlineItem {
            kind: item.kind,
            span: Span {
                start: item.span.start,
                end: shift.at(item.span.end),
            },
            name: item.name.clone(),
            doc: item.doc.clone(),
            body: Some(edited.chunks()),
        });
        items.extend(
            self.outline.items[idx + 1..]
                .iter()
                .map(|it| shift.item(it)),
        );
        let mut bodies = Vec::with_capacity(self.bodies.len());
        bodies.extend_from_slice(&self.bodies[..idx]);
        bodies.push(Some(Arc::new(edited)));
        bodies.extend(
            self.bodies[idx + 1..]
                .iter()
                .map(|b| b.as_deref().map(|b| Arc::new(shift.body(b)))),
        );
        Some(OutlineMemo {
            text: text.clone(),
            outline: Outline {
                items,
                whole: false,
            },
            bodies,
            rescanned: Some(Span::new(from, new_window_end)),
        })
    }
}

/// Moves offsets past the edit by the edit's change in length.
struct Shift {
    grown: u32,
    shrunk: u32,
}

impl Shift {
    fn new(old_len: usize, new_len: usize) -> Self {
        // Spans are `u32`; so are the lengths of the texts they are in.
        let (old_len, new_len) = (old_len as u32, new_len as u32);
        Shift {
            grown: new_len.saturating_sub(old_len),
            shrunk: old_len.saturating_sub(new_len),
        }
    }

    fn at(&self, offset: u32) -> u32 {
        offset + self.grown - self.shrunk
    }

    fn span(&self, span: Span) -> Span {
        Span {
            start: self.at(span.start),
            end: self.at(span.end),
        }
    }

    fn line(&self, line: &Line) -> Line {
        Line {
            start: self.at(line.start),
            first: self.at(line.first),
            kind: line.kind,
            ends_group: line.ends_group,
            closes_open: line.closes_open.map(|at| self.at(at)),
        }
    }

    fn item(&self, item: &OutlineItem) -> OutlineItem {
        let mut name = item.name.clone();
        name.span = self.span(name.span);
        OutlineItem {
            kind: item.kind,
            span: self.span(item.span),
            name,
            doc: item.doc.clone(),
            body: item.body.as_ref().map(|chunks| {
                chunks
                    .iter()
                    .map(|c| super::ChunkSpan {
                        start: self.at(c.start),
                        end: self.at(c.end),
                        next: match c.next {
                            ChunkEnd::Newline(at) => ChunkEnd::Newline(self.at(at)),
                            ChunkEnd::Close(at) => ChunkEnd::Close(self.at(at)),
                        },
                        joins_previous: c.joins_previous,
                        ends_group: c.ends_group,
                        tail: c.tail.map(|at| self.at(at)),
                    })
                    .collect()
            }),
        }
    }

    fn body(&self, body: &BodyLines) -> BodyLines {
        BodyLines {
            lines: body.lines.iter().map(|l| self.line(l)).collect(),
            trailing_docs: body.trailing_docs.iter().map(|&d| self.at(d)).collect(),
            close_line: self.at(body.close_line),
            close: self.at(body.close),
        }
    }
}

/// Texts are compared this many bytes at a time (a `memcmp`) before byte by byte.
const BLOCK: usize = 4096;

/// How many bytes `a` and `b` share at their starts.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// How many bytes `a` and `b` share at their ends.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + BLOCK <= n && a[n - i - BLOCK..n - i] == b[n - i - BLOCK..n - i] {
        i += BLOCK;
    }
    i + a[..n - i]
        .iter()
        .rev()
        .zip(b[..n - i].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// The first line at or after `at` that is not a comment or blank line (a member or code line).
fn member_line_at(lines: &[Line], at: usize) -> Option<usize> {
    (at..lines.len()).find(|&i| {
        !matches!(
            lines[i].kind,
            super::LineKind::Blank | super::LineKind::Comment(_)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memo(text: &str) -> OutlineMemo {
        OutlineMemo::scan(Arc::from(text))
    }

    /// Updates `before` to `after` and checks the outline against a full scan; says whether the
    /// update reused the old scan.
    fn update(before: &str, after: &str) -> bool {
        let old = memo(before);
        let full = memo(after);
        let got = old.update(Arc::from(after));
        assert_eq!(got.outline, full.outline, "{before:?} -> {after:?}");
        assert_eq!(got.bodies, full.bodies, "{before:?} -> {after:?}");
        got.rescanned.is_some()
    }

    const FLOW: &str = "flow a {\n  step x = 1\n  step y = {\n    v: x\n  }\n\n  /// doc\n  step z = y.v\n}\n\nflow b {\n  step w = 2\n}\n";

    #[test]
    fn common_ends_are_found_across_blocks() {
        let a = "x".repeat(3 * BLOCK + 17);
        let mut b = a.clone();
        b.insert(BLOCK + 5, 'y');
        assert_eq!(common_prefix(a.as_bytes(), b.as_bytes()), BLOCK + 5);
        assert_eq!(
            common_suffix(a.as_bytes(), b.as_bytes()),
            a.len() - BLOCK - 5
        );
        assert_eq!(common_prefix(b"", b"abc"), 0);
        assert_eq!(common_suffix(b"abc", b"abc"), 3);
    }

    #[test]
    fn edits_inside_a_body_are_scanned_alone() {
        for (from, to) in [
            ("step x = 1\n", "step x = 12\n"),
            ("v: x\n", "v: x + 1\n"),
            ("  step x = 1\n", ""),
            ("  step x = 1\n", "  step x = 1\n  step q = 3\n"),
            ("/// doc\n", "// not a doc\n"),
            ("step z = y.v", "step zz = y.v /// trailing"),
            // What an entry leaves open is closed before the next member line, which is
            // scanned again with the edit.
            ("step x = 1\n", "step x = \"1\n"),
            ("step x = 1\n", "step x = (1\n"),
            ("step x = 1\n", "step x = f(\"1\n"),
            ("step x = 1\n", "step x = [{\n"),
        ] {
            assert!(
                update(FLOW, &FLOW.replacen(from, to, 1)),
                "{from:?} -> {to:?}"
            );
        }
        // Closing again what was left open, and editing inside what is left open.
        let open = FLOW.replacen("step x = 1\n", "step x = f(\"1\n", 1);
        assert!(update(&open, FLOW));
        assert!(update(&open, &open.replacen("f(\"1", "f(\"12", 1)));
        // An edit starting on the line that closed it scans everything.
        assert!(!update(&open, &open.replacen("step y", "step yy", 1)));
        // The second flow's body, and an insertion at a line's start.
        assert!(update(FLOW, &FLOW.replacen("  step w", "x  step w", 1)));
        // New lines typed at the start of the closing brace's line.
        assert!(update(
            FLOW,
            &FLOW.replacen("y.v\n}", "y.v\n  step q = 1\n}", 1)
        ));
        assert!(update(FLOW, &FLOW.replacen("y.v\n}", "y.v\n\n}", 1)));
    }

    #[test]
    fn edits_that_change_the_shape_scan_everything() {
        for (from, to) in [
            ("flow a {", "flow ab {"),
            ("v: x\n", "v: x }\n"),
            ("  }\n\n", "  }\n}\n"),
            ("step z = y.v\n}", "step z = y.v\n }"),
            ("step z = y.v\n}", "step z = y.v\nx}"),
            ("step z = y.v\n}", "step z = y.v\n"),
            ("\n\nflow b", "\n\n/// b\nflow b"),
            ("flow b {\n", "flow b { /// doc\n"),
        ] {
            assert!(
                !update(FLOW, &FLOW.replacen(from, to, 1)),
                "{from:?} -> {to:?}"
            );
        }
        // A file the scan could not split stays whole until it can be split again.
        assert!(!update("flow a {\n", FLOW));
        assert!(!update(FLOW, "flow a {\n"));
    }
}

//! Splits a file into its top-level items, and each flow body into chunks (one member line with
//! the `///` lines above it) that parse alone exactly as they do in the whole file.
//! [`lay_out_flow`] then gathers a few chunks into each group, the unit that is parsed, so that
//! an edit re-parses one group, not the file; it merges chunks whose boundary a line break does
//! not really separate (an expression continuing on the next line) into the same group.
//!
//! The scan mirrors the lexer's string, comment and delimiter rules byte for byte but builds no
//! tokens. Wherever it cannot be sure that a chunk parses alone as it does in the file (a
//! delimiter left open, a declaration inside a block, text outside any declaration, a flow body
//! that does not start and end on lines of its own), it says so, and the caller parses more at
//! once: the whole item, or the whole file.

use crate::ast::{Comment, Ident};
use crate::docs::doc_before;
use crate::lexer::Delim;
use crate::parser::{ChunkEnd, GroupParse};
use crate::span::Span;

mod memo;

pub use memo::OutlineMemo;

/// What declares a top-level item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// `flow NAME { … }`
    Flow,
    /// `tool NAME { … }`
    Tool,
}

impl ItemKind {
    /// The keyword that declares it, as messages name the item.
    pub fn keyword(self) -> &'static str {
        match self {
            ItemKind::Flow => "flow",
            ItemKind::Tool => "tool",
        }
    }
}

/// A file split into items, or the news that it must be parsed whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Outline {
    /// The items, in source order (empty when `whole` is set).
    pub items: Vec<OutlineItem>,
    /// The split is not certain: parse the file whole.
    pub whole: bool,
}

/// One top-level item, found by the scan.
#[derive(Clone, Debug, PartialEq)]
pub struct OutlineItem {
    /// Flow or tool.
    pub kind: ItemKind,
    /// From the keyword to just after the closing `}` (absolute).
    pub span: Span,
    /// The declared name (absolute span).
    pub name: Ident,
    /// The item's doc comment.
    pub doc: Option<String>,
    /// A flow body's chunks; `None` when the item is to be parsed whole (tools, and flows whose
    /// body the scan could not split with certainty).
    pub body: Option<Vec<ChunkSpan>>,
}

/// Where a chunk of a flow body lies (absolute offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Its first byte: the first doc comment above its first member, or that member's first token.
    pub start: u32,
    /// The line break after its last line.
    pub end: u32,
    /// What follows: a line break at this offset, or (last chunk) the flow's `}` there.
    pub next: ChunkEnd,
    /// A `///` comment ends the line above the chunk: it documents the chunk's first member, so
    /// the chunk cannot be parsed apart from the one before.
    pub joins_previous: bool,
    /// A group of chunks parsed together may end after this one (see [`lay_out_flow`]).
    pub ends_group: bool,
    /// This chunk's entry leaves delimiters open, which the lexer closes before the next
    /// member's line: the end of that line's first word, up to which a group ending with this
    /// chunk is lexed so that it is closed, and reported, exactly as in the file.
    pub tail: Option<u32>,
}

impl ChunkSpan {
    /// `next`, relative to `base`.
    fn end_from(&self, base: u32) -> ChunkEnd {
        match self.next {
            ChunkEnd::Newline(at) => ChunkEnd::Newline(at - base),
            ChunkEnd::Close(at) => ChunkEnd::Close(at - base),
        }
    }
}

/// About one chunk in `GROUP` ends a group: members are parsed a few at a time, which costs an
/// edit a few small parses but saves a lookup per member on every edit.
const GROUP: u64 = 8;
/// No group is longer than this, whatever the text.
const MAX_GROUP: usize = 4 * GROUP as usize;

/// Whether a group ends after a chunk whose member line (past its indentation and any doc
/// comment, which many members may share) is `line`. Decided by that line up to a `=` or its
/// end (`step NAME`), not by the chunk's place, so that inserting a member moves no other
/// boundary, and not by its body, so that editing a step (even one written on one line) does
/// not regroup its neighbours. Computed as the scan records the line, so that an edit decides
/// it again only for the lines it touched.
fn ends_group(line: &[u8]) -> bool {
    let text = &line[..line.len().min(48)];
    let head = &text[..text
        .iter()
        .position(|&b| b == b'=' || b == b'\n')
        .unwrap_or(text.len())];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in head {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // FNV leaves the middle bits of names that differ in their last bytes alike (`s1 `, `s2 `
    // … never ended a group, so a new member shifted every count-cut boundary after it): mix
    // all bits in before picking some.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    (h >> 32).is_multiple_of(GROUP)
}

/// The groups of one flow body's chunks, parsed: `(absolute start, parse)`, merging
/// neighbours a line break does not separate, and grouping a few members per parse. `parse` is
/// given the group's text and what follows it (relative). `None` when the body must be parsed
/// with its flow (the scan and the lexer disagree, or a doc comment on the flow's first line
/// belongs to its first member).
pub fn lay_out_flow<P>(
    src: &str,
    chunks: &[ChunkSpan],
    mut parse: impl FnMut(&str, ChunkEnd) -> P,
) -> Option<Vec<(u32, P)>>
where
    P: AsRef<GroupParse>,
{
    let mut out = Vec::with_capacity(chunks.len() / GROUP as usize + 1);
    let mut i = 0;
    while i < chunks.len() {
        if chunks[i].joins_previous {
            return None;
        }
        let start = chunks[i].start;
        let mut j = i;
        loop {
            // Group by content alone first (cheap), then parse once.
            while j + 1 < chunks.len()
                && (chunks[j + 1].joins_previous
                    || (!chunks[j].ends_group && j - i + 1 < MAX_GROUP))
            {
                j += 1;
            }
            let text = src.get(start as usize..chunks[j].tail.unwrap_or(chunks[j].end) as usize)?;
            let parsed = parse(text, chunks[j].end_from(start));
            let group = parsed.as_ref();
            if !group.balanced {
                return None;
            }
            // The line break after the group separates nothing: take the next chunk in too.
            if group.open_end
                && matches!(chunks[j].next, ChunkEnd::Newline(_))
                && j + 1 < chunks.len()
            {
                j += 1;
                continue;
            }
            out.push((start, parsed));
            break;
        }
        i = j + 1;
    }
    Some(out)
}

/// Splits `src` into items and flow bodies into member chunks. Never fails: when unsure, it
/// answers `whole`.
pub fn outline(src: &str) -> Outline {
    match Scanner::new(src).run() {
        Some((items, _)) => Outline {
            items,
            whole: false,
        },
        None => Outline {
            items: Vec::new(),
            whole: true,
        },
    }
}

/// What the lexer may close before a word first on its line (see
/// [`Scanner::may_close_before_entry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// A member header: every block inside the item.
    Member,
    /// A `key:` in a `${`: what a later `}` closes changes, and so where the item ends.
    MovesEnd,
    /// A `key:`: the `(` and `[` open inside the innermost `{ }` only.
    Inner,
}

/// A line of a flow body that starts with nothing open but the flow's brace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LineKind {
    Blank,
    /// A comment alone on its line; `true` for a doc comment.
    Comment(bool),
    /// Starts with `input`, `secret`, `env`, `step` or `output`.
    Member,
    /// Starts with anything else.
    Code,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Line {
    /// Where the line starts.
    start: u32,
    /// Its first non-blank byte.
    first: u32,
    kind: LineKind,
    /// For a line that may head a chunk (a member or code), whether a group may end after the
    /// chunk it heads.
    ends_group: bool,
    /// For a member line before which delimiters left open were closed, the end of its first
    /// word (see [`ChunkSpan::tail`]).
    closes_open: Option<u32>,
}

/// What the scan saw of a flow body it split: enough to split it again after an edit of some of
/// its lines without scanning the rest (see [`OutlineMemo`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct BodyLines {
    /// The lines that start with nothing open but the flow's brace.
    lines: Vec<Line>,
    /// The line breaks inside the flow that end a trailing `///` comment.
    trailing_docs: Vec<u32>,
    /// Where the line of the closing `}` starts.
    close_line: u32,
    /// The closing `}`.
    close: u32,
}

/// The flow whose body is being scanned.
struct OpenFlow {
    item: usize,
    lines: Vec<Line>,
    /// Something follows `{` on the header line, the `}` is not alone at its line's start, or
    /// a delimiter was closed implicitly: parse the item whole.
    irregular: bool,
    /// Still on the line of the header's `{`.
    on_header_line: bool,
    /// Whether the current line of the body has been recorded.
    line_recorded: bool,
}

struct Scanner<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Delim>,
    line_start: bool,
    line_begin: usize,
    items: Vec<OutlineItem>,
    /// Beside each item, the lines of its body when the scan split it.
    bodies: Vec<Option<BodyLines>>,
    top_comments: Vec<Comment>,
    /// Offsets of the line breaks that end a trailing `///` comment (code before it on the line).
    trailing_docs: Vec<u32>,
    flow: Option<OpenFlow>,
    /// An item's `}` was just read: only a comment may follow on its line.
    after_item: bool,
    /// Where a comment starts on the current line, if one does.
    comment_at: Option<usize>,
    /// Whether the current line ended inside a string (which the lexer ends there).
    string_cut: bool,
    /// The last line with code on it before the current one: its start, where its code ends
    /// (its comment left out) and whether it ended inside a string.
    prev_code: Option<(usize, usize, bool)>,
}

const MEMBER_WORDS: [&str; 5] = ["input", "secret", "env", "step", "output"];

/// The bytes that end a skip over the middle of a line: line breaks, delimiters, quotes and
/// the `/` of a comment. A table, because the scan spends most of its time in that skip.
const STOPS_MID_LINE: [bool; 256] = {
    let mut t = [false; 256];
    let stops = *b"\n\"{}[]()/";
    let mut i = 0;
    while i < stops.len() {
        t[stops[i] as usize] = true;
        i += 1;
    }
    t
};

/// Whether the lexer makes `c` part of a token wherever it stands: a letter, a digit, `_`, a
/// quote, or punctuation that is a token alone. `&` and `|` are tokens only doubled (a line of
/// them counted as none may only make the caller parse more at once), and any other character
/// outside a string is reported and skipped.
fn makes_a_token(c: char) -> bool {
    c.is_alphanumeric() || "_\"{[(}])?=!<>+-*/%,:.".contains(c)
}

/// Whether the last token of a line of code may be `.` (or `?.`): a `.` after the last character
/// that ends a word, a closing delimiter or a string. What follows it may be characters the
/// lexer skips (reporting them), so a `.` anywhere after it counts; a `.` inside a number or a
/// string counts too, which only makes the caller parse more at once.
fn ends_with_a_dot(line: &str) -> bool {
    let ends = |c: char| c.is_alphanumeric() || matches!(c, '_' | ')' | ']' | '}' | '"');
    let tail = line.rfind(ends).map_or(line, |i| {
        let c = line[i..].chars().next().map_or(1, char::len_utf8);
        &line[i + c..]
    });
    tail.contains('.')
}

/// Whether a line of code (its comment left out, not ending inside a string) surely ends with a
/// token after which an expression continues (`lexer::continues_after`). `>` is not one (it
/// ends a type); `.` is left out (it may end a number), and so are a lone `?`, `&` or `|`; a
/// keyword after a `.` is a field's name.
fn ends_so_an_expression_continues(code: &str) -> bool {
    if ["??", "&&", "||"].iter().any(|t| code.ends_with(t)) {
        return true;
    }
    let Some(last) = code.chars().last() else {
        return false;
    };
    if "([{,:=<+-*/%!".contains(last) {
        return true;
    }
    let at = code
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| {
            i + code[i..].chars().next().map_or(1, char::len_utf8)
        });
    matches!(&code[at..], "if" | "then" | "else" | "for" | "in") && !code[..at].ends_with('.')
}

/// A line without `${` up to the `//` that starts a comment, if any: a string ends on its line
/// and, without interpolation, holds no other string, so the quotes (less escaped ones) tell
/// which `//` is inside one.
fn code_before_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// The end of the word starting at `at`, as the lexer reads identifiers: ASCII at byte speed,
/// anything else by `char`.
fn word_end(src: &str, at: usize) -> usize {
    let bytes = src.as_bytes();
    let mut end = at;
    while let Some(&b) = bytes.get(end) {
        if b.is_ascii_alphanumeric() || b == b'_' {
            end += 1;
        } else if b < 0x80 {
            return end;
        } else {
            return src[end..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(src.len(), |n| end + n);
        }
    }
    end
}

impl<'a> Scanner<'a> {
    fn new(src: &'a str) -> Self {
        Scanner {
            src,
            bytes: src.as_bytes(),
            pos: 0,
            stack: Vec::new(),
            line_start: true,
            line_begin: 0,
            items: Vec::new(),
            bodies: Vec::new(),
            top_comments: Vec::new(),
            trailing_docs: Vec::new(),
            flow: None,
            after_item: false,
            comment_at: None,
            string_cut: false,
            prev_code: None,
        }
    }

    /// The items and what it saw of each split body, or `None` when the file is to be parsed whole.
    fn run(mut self) -> Option<(Vec<OutlineItem>, Vec<Option<BodyLines>>)> {
        self.scan_to(self.bytes.len())?;
        // A delimiter left open at the end: the lexer repairs it there; parse the file whole.
        if !self.stack.is_empty() {
            return None;
        }
        Some((self.items, self.bodies))
    }

    /// Scans up to `end`, or a little past it when `end` is not just after a line break.
    fn scan_to(&mut self, end: usize) -> Option<()> {
        while self.pos < end {
            if self.stack.last() == Some(&Delim::Str) {
                self.string_body();
                continue;
            }
            if self.mid_line() {
                // Past a line's first token inside a block, only delimiters, strings, comments
                // and line breaks change anything: skip the rest at once.
                let rest = &self.bytes[self.pos..];
                let plain = rest
                    .iter()
                    .position(|&b| STOPS_MID_LINE[b as usize])
                    .unwrap_or(rest.len());
                self.pos += plain;
                if self.pos >= self.bytes.len() {
                    break;
                }
            }
            self.token()?;
        }
        Some(())
    }

    /// The in-string part of the lexer: up to the closing quote, an interpolation, or the line's end.
    fn string_body(&mut self) {
        loop {
            // Plain string bytes at once: only these four end or change the string.
            let rest = &self.bytes[self.pos..];
            self.pos += rest
                .iter()
                .position(|&b| matches!(b, b'"' | b'\n' | b'$' | b'\\'))
                .unwrap_or(rest.len());
            let Some(&b) = self.bytes.get(self.pos) else {
                break;
            };
            match b {
                b'"' => {
                    self.pos += 1;
                    self.stack.pop();
                    return;
                }
                b'\n' => {
                    // Unterminated: the lexer ends the string here (and reports no repair of
                    // its entry, which a group or an item parsed alone sees the same way).
                    self.stack.pop();
                    self.string_cut = true;
                    return;
                }
                b'$' if self.bytes.get(self.pos + 1) == Some(&b'{') => {
                    self.pos += 2;
                    self.stack.push(Delim::Interp);
                    return;
                }
                b'\\' => {
                    self.pos += 1;
                    // `\` then a line break (or the end) escapes nothing: the break ends the string.
                    if matches!(self.bytes.get(self.pos), Some(b'\n') | None) {
                        continue;
                    }
                    self.pos += 1;
                }
                _ => self.pos += 1,
            }
        }
        // The end of the file inside a string: the lexer reports it as unterminated.
        self.stack.pop();
    }

    /// Inside a block, after the first token of a line that is not a declaration's header line.
    fn mid_line(&self) -> bool {
        !self.line_start
            && !self.after_item
            && !self.stack.is_empty()
            && self.flow.as_ref().is_none_or(|f| !f.on_header_line)
    }

    fn in_body(&self) -> bool {
        self.flow.is_some() && self.stack.len() == 1
    }

    fn record_line(&mut self, kind: LineKind, first: usize) {
        let start = self.line_begin as u32;
        if let Some(f) = &mut self.flow
            && !f.on_header_line
        {
            let heads = matches!(kind, LineKind::Member | LineKind::Code);
            f.lines.push(Line {
                start,
                first: first as u32,
                kind,
                ends_group: heads && ends_group(&self.bytes[first..]),
                closes_open: None,
            });
            f.line_recorded = true;
        }
    }

    fn token(&mut self) -> Option<()> {
        let b = self.bytes[self.pos];
        let start = self.pos;
        if b == b'\n' {
            if self.in_body()
                && self.line_start
                && let Some(f) = &self.flow
                && !f.on_header_line
                && !f.line_recorded
            {
                self.record_line(LineKind::Blank, start);
            }
            if !self.line_start {
                let end = self.comment_at.unwrap_or(start);
                self.prev_code = Some((self.line_begin, end, self.string_cut));
            }
            self.comment_at = None;
            self.string_cut = false;
            self.pos += 1;
            self.line_start = true;
            self.line_begin = self.pos;
            self.after_item = false;
            if let Some(f) = &mut self.flow {
                f.on_header_line = false;
                f.line_recorded = false;
            }
            return Some(());
        }
        // Blanks: a run at once (indentation is most of a body's bytes outside its lines).
        if matches!(b, b' ' | b'\t' | b'\r') {
            let run = self.bytes[start..]
                .iter()
                .position(|b| !matches!(b, b' ' | b'\t' | b'\r'))
                .unwrap_or(self.bytes.len() - start);
            self.pos += run;
            return Some(());
        }
        // Other white space, Unicode's included, as the lexer's `char::is_whitespace`.
        let (c, len) = if b < 0x80 {
            (b as char, 1)
        } else {
            let c = self.src[start..].chars().next()?;
            (c, c.len_utf8())
        };
        if c.is_whitespace() {
            self.pos += len;
            return Some(());
        }
        let at_line_start = std::mem::replace(&mut self.line_start, false);
        if b == b'/' && self.bytes.get(start + 1) == Some(&b'/') {
            let end = self.src[start..]
                .find('\n')
                .map_or(self.src.len(), |n| start + n);
            let raw = &self.src[start..end];
            let doc = raw.starts_with("///") && !raw.starts_with("////");
            if self.stack.is_empty() {
                let body = if doc { &raw[3..] } else { &raw[2..] };
                let body = body.strip_prefix(' ').unwrap_or(body);
                self.top_comments.push(Comment {
                    span: Span::new(start, end),
                    text: body.trim_end().to_string(),
                    doc,
                });
            } else if at_line_start && self.in_body() {
                self.record_line(LineKind::Comment(doc), start);
            }
            if doc && !at_line_start {
                self.trailing_docs.push(end as u32);
            }
            self.comment_at = Some(start);
            self.pos = end;
            self.line_start = at_line_start;
            return Some(());
        }
        if self.after_item {
            // Text after an item's `}` on the same line.
            return None;
        }
        if let Some(f) = &mut self.flow
            && f.on_header_line
            && self.stack.len() == 1
        {
            f.irregular = true;
        }
        if c.is_alphabetic() || c == '_' {
            let end = word_end(self.src, start);
            let word = &self.src[start..end];
            if at_line_start
                && matches!(word, "flow" | "tool")
                && self.declaration_at(start).is_some()
            {
                if !self.stack.is_empty() {
                    // The lexer closes every open block here: parse the file whole.
                    return None;
                }
                self.start_item(start)?;
                return Some(());
            }
            if self.stack.is_empty() {
                return None;
            }
            let mut closed_open = false;
            if at_line_start && self.stack.len() > 1 {
                match self.may_close_before_entry(end) {
                    // A member header in a flow's body: the lexer closes every block its entry
                    // left open, and the member starts a chunk as any other. The group ending
                    // before it is lexed up to this word to close them as the file does, which
                    // also checks that the lexer agrees (it does not after a `.`).
                    // After a `.` the lexer reads the word as a field's name and closes
                    // nothing: the item may end elsewhere than this scan says.
                    Some(Entry::Member) if self.may_follow_a_dot(self.line_begin) => return None,
                    Some(Entry::Member) if self.flow.is_some() => {
                        // Its doc comments were read with the block open, so not recorded; they
                        // are the member's all the same (docs attach by position), so its chunk
                        // starts at them.
                        if self.doc_lines_above(self.line_begin) {
                            self.record_lines_above();
                        }
                        self.stack.truncate(1);
                        closed_open = true;
                    }
                    // The lexer closes the blocks open here, so the item may end before the
                    // `}` this scan would close it with: parse the file whole.
                    Some(Entry::Member | Entry::MovesEnd) => return None,
                    // It may close the `(`, `[`, `${` open inside the innermost `{ }` (never a
                    // brace, so the item ends where this scan says): parse the item whole.
                    Some(Entry::Inner) => {
                        if let Some(f) = &mut self.flow {
                            f.irregular = true;
                        }
                    }
                    None => {}
                }
            }
            if at_line_start && self.in_body() {
                // A member line as the lexer sees one (`input` alone is not): a member's start
                // ends what an unterminated string silenced before it, so a chunk may start
                // only where the lexer's state starts afresh.
                let after = self.src[end..].trim_start_matches([' ', '\t']);
                let kind =
                    if MEMBER_WORDS.contains(&word) && crate::lexer::member_header(word, after) {
                        LineKind::Member
                    } else {
                        LineKind::Code
                    };
                self.record_line(kind, start);
                if closed_open
                    && let Some(line) = self.flow.as_mut().and_then(|f| f.lines.last_mut())
                {
                    line.closes_open = Some(end as u32);
                }
            }
            self.pos = end;
            return Some(());
        }
        if self.stack.is_empty() {
            // Anything else outside a declaration.
            return None;
        }
        let is_closer = matches!(b, b'}' | b']' | b')');
        // A `}` first on a body line closes the flow: that line is not the body's.
        if at_line_start && self.in_body() && b != b'}' {
            self.record_line(LineKind::Code, start);
        }
        self.pos += len;
        match b {
            b'"' => self.stack.push(Delim::Str),
            b'{' => self.stack.push(Delim::Brace),
            b'[' => self.stack.push(Delim::Bracket),
            b'(' => self.stack.push(Delim::Paren),
            _ if is_closer => self.closer(b, start, at_line_start)?,
            _ => {}
        }
        Some(())
    }

    /// Whether the word first on a line and ending at `end` is one before which the lexer may
    /// close delimiters left open (`Lexer::entry_starts_here`; it also looks at the token
    /// before, so it may not), and what that closes.
    fn may_close_before_entry(&self, end: usize) -> Option<Entry> {
        let after = self.src[end..].trim_start_matches([' ', '\t']);
        if crate::lexer::member_header(&self.src[self.pos..end], after) {
            return Some(Entry::Member);
        }
        if !after.starts_with(':') || self.stack.last() == Some(&Delim::Brace) {
            return None;
        }
        // After a token an expression continues past (`else`, an operator, an opener), the
        // lexer reads `word:` as part of that expression, not as an entry: it closes nothing.
        if self.surely_continues() {
            return None;
        }
        // Closing a `${` changes what a later `}` closes, and so where the item ends.
        let block = self.stack.iter().rposition(|d| *d == Delim::Brace)?;
        Some(if self.stack[block..].contains(&Delim::Interp) {
            Entry::MovesEnd
        } else {
            Entry::Inner
        })
    }

    /// Whether the last token before the current line is surely one after which an expression
    /// continues (`lexer::continues_after`): read off the last line with code, less its comment,
    /// unless it ended inside a string. Only what cannot be another token counts: a wrong no
    /// only makes the caller parse more at once.
    fn surely_continues(&self) -> bool {
        match self.prev_code {
            Some((start, end, false)) => {
                ends_so_an_expression_continues(self.src[start..end].trim_end())
            }
            _ => false,
        }
    }

    /// Whether a `///` line stands among the comment and blank lines right above the line
    /// starting at `line`: the member on it would take that doc comment in the file, but not
    /// when the comment is in the group before, so such a body is not split there.
    fn doc_lines_above(&self, line: usize) -> bool {
        let mut end = line.saturating_sub(1);
        while end > 0 {
            let start = self.src[..end].rfind('\n').map_or(0, |n| n + 1);
            let text = self.src[start..end].trim_start();
            if text.starts_with("///") {
                return true;
            }
            if !(text.is_empty() || text.starts_with("//")) {
                return false;
            }
            end = start.saturating_sub(1);
        }
        false
    }

    /// Whether the token before the line starting at `line` may be a `.` (or `?.`): the last
    /// code line above it, less a comment at its end, ends with one. A line with both `//` and
    /// `${` in it (strings inside strings, where a `//` may or may not start a comment) answers
    /// yes, and the caller parses more at once. A line of characters the lexer reports and
    /// skips (a lone `|`) has no token: the one before is on a line further up.
    fn may_follow_a_dot(&self, line: usize) -> bool {
        let mut end = line.saturating_sub(1);
        while end > 0 {
            let start = self.src[..end].rfind('\n').map_or(0, |n| n + 1);
            let text = self.src[start..end].trim();
            if !(text.is_empty() || text.starts_with("//") || !text.chars().any(makes_a_token)) {
                if !text.contains("//") {
                    return ends_with_a_dot(text);
                }
                if text.contains("${") {
                    return true;
                }
                return ends_with_a_dot(code_before_comment(text));
            }
            end = start.saturating_sub(1);
        }
        false
    }

    /// Records the comment and blank lines right above the current line (a member line before
    /// which delimiters left open are closed), which the scan read with those delimiters open
    /// and so did not record: as if nothing had been open, so the member's chunk starts at its
    /// doc comments and the chunk before ends at its own last line.
    fn record_lines_above(&mut self) {
        let mut above = Vec::new();
        let mut end = self.line_begin.saturating_sub(1);
        while end > 0 {
            let start = self.src[..end].rfind('\n').map_or(0, |n| n + 1);
            let text = &self.src[start..end];
            let body = text.trim_start_matches([' ', '\t', '\r']);
            let first = end - body.len();
            let kind = if body.is_empty() {
                // A blank line is recorded at its line break, as the scan records it.
                (LineKind::Blank, end)
            } else if body.starts_with("//") {
                let doc = body.starts_with("///") && !body.starts_with("////");
                (LineKind::Comment(doc), first)
            } else {
                break;
            };
            above.push(Line {
                start: start as u32,
                first: kind.1 as u32,
                kind: kind.0,
                ends_group: false,
                closes_open: None,
            });
            end = start.saturating_sub(1);
        }
        if let Some(f) = &mut self.flow {
            f.lines.extend(above.into_iter().rev());
        }
    }

    /// `flow NAME {` or `tool NAME {` at `at`, as the lexer recognises a declaration: its
    /// keyword, name span and the offset of `{`.
    fn declaration_at(&self, at: usize) -> Option<(ItemKind, Span, usize)> {
        let rest = &self.src[at..];
        let word_end = |s: &str| {
            s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len())
        };
        let w = word_end(rest);
        let kind = match &rest[..w] {
            "flow" => ItemKind::Flow,
            "tool" => ItemKind::Tool,
            _ => return None,
        };
        let after = &rest[w..];
        let trimmed = after.trim_start_matches([' ', '\t']);
        let name_at = at + w + (after.len() - trimmed.len());
        let n = word_end(trimmed);
        if n == 0 {
            return None;
        }
        let after_name = &trimmed[n..];
        let brace = after_name.trim_start_matches([' ', '\t']);
        if !brace.starts_with('{') {
            return None;
        }
        let brace_at = name_at + n + (after_name.len() - brace.len());
        Some((kind, Span::new(name_at, name_at + n), brace_at))
    }

    /// A declaration at the top level: the scan goes on after its `{`.
    fn start_item(&mut self, at: usize) -> Option<()> {
        let (kind, name_span, brace_at) = self.declaration_at(at)?;
        let name = &self.src[name_span.range()];
        // A name the parser would not read as one (a keyword, a number): parse the file whole.
        let first = name.chars().next()?;
        if !(first.is_alphabetic() || first == '_')
            || crate::token::Keyword::from_word(name).is_some()
        {
            return None;
        }
        let doc = doc_before(self.src, &self.top_comments, at as u32);
        self.items.push(OutlineItem {
            kind,
            span: Span::new(at, at),
            name: Ident {
                name: name.to_string(),
                span: name_span,
            },
            doc,
            body: None,
        });
        self.bodies.push(None);
        if kind == ItemKind::Flow {
            self.flow = Some(OpenFlow {
                item: self.items.len() - 1,
                lines: Vec::new(),
                irregular: false,
                on_header_line: true,
                line_recorded: false,
            });
        }
        self.pos = brace_at + 1;
        self.stack.push(Delim::Brace);
        Some(())
    }

    /// A closing delimiter, handled as the lexer does; the one that empties the stack ends an item.
    fn closer(&mut self, b: u8, at: usize, at_line_start: bool) -> Option<()> {
        let want: &[Delim] = match b {
            b'}' => &[Delim::Brace, Delim::Interp],
            b']' => &[Delim::Bracket],
            _ => &[Delim::Paren],
        };
        match self.stack.last() {
            Some(d) if want.contains(d) => {
                self.stack.pop();
            }
            // A stray closer (no opener of its kind is open) is reported and skipped, in a
            // chunk as in the file: nothing to do.
            _ => {
                if self.stack.iter().any(|d| want.contains(d)) {
                    // Delimiters closed implicitly: where the parser's recovery then ends the
                    // item (here, or at the end of the file, taking the items after it in) is
                    // not the scan's to say, so the file is parsed whole.
                    return None;
                }
            }
        }
        if self.stack.is_empty() {
            self.end_item(at, at_line_start);
        }
        Some(())
    }

    fn end_item(&mut self, close: usize, at_line_start: bool) {
        self.after_item = true;
        let Some(item) = self.items.last_mut() else {
            return;
        };
        item.span.end = (close + 1) as u32;
        let Some(flow) = self.flow.take() else {
            return;
        };
        if flow.irregular || !at_line_start || flow.item + 1 != self.items.len() {
            return;
        }
        let Some(item) = self.items.last_mut() else {
            return;
        };
        let from = self.trailing_docs.partition_point(|&d| d < item.span.start);
        let body = BodyLines {
            lines: flow.lines,
            trailing_docs: self.trailing_docs[from..].to_vec(),
            close_line: self.line_begin as u32,
            close: close as u32,
        };
        item.body = Some(body.chunks());
        if let Some(slot) = self.bodies.last_mut() {
            *slot = Some(body);
        }
    }
}

impl BodyLines {
    /// The body's chunks.
    fn chunks(&self) -> Vec<ChunkSpan> {
        chunks_of(
            &self.lines,
            self.close_line,
            self.close,
            &self.trailing_docs,
        )
    }
}

/// The chunks of a flow body from its lines: one per member line, each with the doc comments
/// right above it, without the blank and comment lines that trail it.
fn chunks_of(lines: &[Line], close_line: u32, close: u32, trailing_docs: &[u32]) -> Vec<ChunkSpan> {
    // The lines that begin a chunk: every member line, and the first code line.
    let mut heads = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        match l.kind {
            LineKind::Member => heads.push(i),
            LineKind::Code if heads.is_empty() => heads.push(i),
            _ => {}
        }
    }
    // Each chunk starts at the run of doc comment lines right above its head.
    let starts: Vec<usize> = heads
        .iter()
        .enumerate()
        .map(|(k, &h)| {
            let floor = if k == 0 { 0 } else { heads[k - 1] + 1 };
            let mut s = h;
            while s > floor && lines[s - 1].kind == LineKind::Comment(true) {
                s -= 1;
            }
            s
        })
        .collect();
    let mut chunks = Vec::with_capacity(heads.len());
    for k in 0..heads.len() {
        let first = &lines[starts[k]];
        let start = first.first;
        // The region up to the next chunk (or the `}` line), less trailing blank and comment lines.
        let (mut region_end, next_line) = match starts.get(k + 1) {
            Some(&n) => (lines[n].start, n),
            None => (close_line, lines.len()),
        };
        let mut i = next_line;
        while i > heads[k] + 1
            && matches!(lines[i - 1].kind, LineKind::Blank | LineKind::Comment(_))
        {
            i -= 1;
            region_end = lines[i].start;
        }
        // Up to the line break, trailing blanks included: an unterminated string runs to it.
        let end = region_end.saturating_sub(1).max(start);
        let next = if k + 1 < heads.len() {
            ChunkEnd::Newline(end)
        } else {
            ChunkEnd::Close(close)
        };
        let joins_previous =
            first.start > 0 && trailing_docs.binary_search(&(first.start - 1)).is_ok();
        // The next member's line closes what this chunk left open (past its doc comments).
        let tail = heads.get(k + 1).and_then(|&h| lines[h].closes_open);
        chunks.push(ChunkSpan {
            start,
            end,
            next,
            joins_previous,
            ends_group: lines[heads[k]].ends_group,
            tail,
        });
    }
    chunks
}

/// The items and diagnostics of `src` parsed group by group as the outline says, with absolute
/// spans: the same as [`crate::parse`] gives, which the tests check. The checker does the same
/// with each group memoized.
pub fn parse_outlined(src: &str) -> (Vec<crate::ast::Item>, Vec<crate::Diagnostic>) {
    use crate::ast::{Flow, Item};
    let outline = outline(src);
    if outline.whole {
        let p = crate::parse(src);
        return (p.file.items, p.diagnostics);
    }
    let mut items = Vec::new();
    let mut diags = Vec::new();
    for item in &outline.items {
        let laid = item.body.as_ref().and_then(|chunks| {
            lay_out_flow(src, chunks, |text, end| {
                Box::new(crate::parser::parse_group(text, end))
            })
        });
        match laid {
            Some(groups) => {
                let mut members = Vec::new();
                for (offset, group) in groups {
                    let group = *group;
                    for mut m in group.members {
                        crate::visit::member_spans_mut(&mut m, &mut |s| *s = s.shifted(offset));
                        members.push(m);
                    }
                    diags.extend(group.diagnostics.iter().map(|d| d.shifted(offset)));
                }
                items.push(Item::Flow(Flow {
                    name: item.name.clone(),
                    doc: item.doc.clone(),
                    members,
                    span: item.span,
                }));
            }
            None => {
                let offset = item.span.start;
                let p = crate::parse(&src[item.span.range()]);
                for mut it in p.file.items {
                    crate::visit::item_spans_mut(&mut it, &mut |s| *s = s.shifted(offset));
                    match &mut it {
                        Item::Flow(f) => f.doc = item.doc.clone(),
                        Item::Tool(t) => t.doc = item.doc.clone(),
                    }
                    items.push(it);
                }
                diags.extend(p.diagnostics.iter().map(|d| d.shifted(offset)));
            }
        }
    }
    diags.sort_by_key(|d| (d.primary.span.start, d.primary.span.end));
    (items, diags)
}

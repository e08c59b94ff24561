//! The file parsed a little at a time: the outline splits it, each stretch of text is parsed
//! alone and memoized by its text, so an edit re-parses only the text it touched. What the
//! flow-wide queries need from a parse (heads, mentions, position-free steps) is summarized with
//! it, once per text.

use std::sync::Arc;

use reel_syntax::ast::{self, Item, Member};
use reel_syntax::outline::lay_out_flow;
use reel_syntax::visit::step_spans_mut;
use reel_syntax::{ChunkEnd, ChunkParse, Diagnostic, LineIndex, Parsed, Span};

use crate::db::{Db, SourceFile};
use crate::declarations::MemberHead;
use crate::step::step_mentions;

/// The parsed file (spans absolute).
#[salsa::tracked(returns(ref), no_eq)]
pub fn parse_file(db: &dyn Db, file: SourceFile) -> Parsed {
    reel_syntax::parse(file.text(db))
}

/// Line starts of the file, for spans in lines and columns.
#[salsa::tracked(returns(ref))]
pub fn line_index(db: &dyn Db, file: SourceFile) -> LineIndex {
    LineIndex::new(file.text(db))
}

/// A chunk of a flow body, by its text and the token that follows it: the same key, the same
/// parse, so a chunk an edit did not touch is never parsed again.
#[salsa::interned]
pub struct ChunkText<'db> {
    /// The chunk's text.
    #[returns(ref)]
    pub text: String,
    /// Where the token after it is, relative to its start.
    #[returns(copy)]
    pub next_at: u32,
    /// Whether that token is the flow's `}` (else a separating line break).
    #[returns(copy)]
    pub closes: bool,
}

/// A chunk parsed alone (spans relative to its start), with the summary flow-level queries read.
#[salsa::tracked(returns(ref), no_eq)]
pub fn chunk_parse<'db>(db: &'db dyn Db, chunk: ChunkText<'db>) -> Arc<SummarizedChunk> {
    let at = chunk.next_at(db);
    let end = if chunk.closes(db) {
        ChunkEnd::Close(at)
    } else {
        ChunkEnd::Newline(at)
    };
    let parse = reel_syntax::parse_chunk(chunk.text(db), end);
    let summary = PieceSummary::of(&parse.members);
    Arc::new(SummarizedChunk { parse, summary })
}

/// A chunk's parse and its summary, made together so that the summary is computed once per text.
#[derive(Debug)]
pub struct SummarizedChunk {
    /// The parse (spans relative to the chunk's start).
    pub parse: ChunkParse,
    /// What its members declare and refer to.
    pub summary: PieceSummary,
}

/// A handle on a summarized chunk that the outline's layout can read as a plain parse.
struct ChunkHandle(Arc<SummarizedChunk>);

impl AsRef<ChunkParse> for ChunkHandle {
    fn as_ref(&self) -> &ChunkParse {
        &self.0.parse
    }
}

/// The step names one step's expressions mention, for the DAG: free of spans, so equal across
/// edits that keep its references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepMentions {
    /// The step's name.
    pub name: String,
    /// Free names in its expressions (`after` left out), in order; the DAG keeps those that
    /// name steps.
    pub names: Vec<String>,
    /// Names in its `after` list.
    pub after: Vec<String>,
}

/// A shared value that compares equal at once when it is the same allocation (a piece an edit
/// did not touch), and by content otherwise (a piece re-parsed to the same heads).
#[derive(Clone, Debug, Default)]
pub struct Shared<T>(pub Arc<T>);

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A piece's members summarized: what the flow-wide queries need, so that they read this
/// (equal, and shared, when an edit changed only a step's body) instead of the syntax.
#[derive(Clone, Debug, Default)]
pub struct PieceSummary {
    /// One head per member, in order.
    pub heads: Shared<Vec<MemberHead>>,
    /// One entry per step member, in order.
    pub mentions: Shared<Vec<StepMentions>>,
    /// One entry per member: a step's syntax with spans relative to its own start (equal across
    /// edits of other members, and of the blanks and comments around it), else `None`.
    pub steps: Shared<Vec<Option<ast::Step>>>,
}

impl PieceSummary {
    /// Summarizes `members`.
    pub fn of(members: &[Member]) -> PieceSummary {
        let mut heads = Vec::with_capacity(members.len());
        let mut mentions = Vec::new();
        let mut steps = Vec::with_capacity(members.len());
        for m in members {
            if let Member::Step(s) = m {
                let (names, after) = step_mentions(s);
                mentions.push(StepMentions {
                    name: s.name.name.clone(),
                    names,
                    after,
                });
                steps.push(Some(rebased_step(s)));
            } else {
                steps.push(None);
            }
            heads.push(MemberHead::of(m));
        }
        PieceSummary {
            heads: Shared(Arc::new(heads)),
            mentions: Shared(Arc::new(mentions)),
            steps: Shared(Arc::new(steps)),
        }
    }
}

/// A piece of a file parsed as one (a tool, a flow the outline could not split, or the whole
/// file when the outline is unsure), with the doc comment its item has in the file.
#[salsa::interned]
pub struct PieceText<'db> {
    /// The piece's text.
    #[returns(ref)]
    pub text: String,
    /// The doc comment above it in the file, given to its one item.
    #[returns(ref)]
    pub doc: Option<String>,
}

/// The items of a piece parsed as one (spans relative to its start), shared by reference.
#[derive(Debug)]
pub struct ParsedPiece {
    /// Its flows and tools, in order.
    pub items: Vec<PieceItem>,
    /// Its diagnostics (relative).
    pub diagnostics: Vec<Diagnostic>,
}

/// One item of a piece.
#[derive(Debug)]
pub enum PieceItem {
    /// A flow: its header and its members.
    Flow {
        /// Name and name span.
        name: ast::Ident,
        /// Doc comment.
        doc: Option<String>,
        /// From `flow` to `}`.
        span: Span,
        /// The members.
        members: Arc<SummarizedMembers>,
    },
    /// A tool.
    Tool(Arc<ast::Tool>),
}

/// A piece parsed as one.
#[salsa::tracked(returns(ref), no_eq)]
pub fn piece_parse<'db>(db: &'db dyn Db, piece: PieceText<'db>) -> Arc<ParsedPiece> {
    let parsed = reel_syntax::parse(piece.text(db));
    let doc = piece.doc(db);
    let single = parsed.file.items.len() == 1;
    let items = parsed
        .file
        .items
        .into_iter()
        .map(|item| match item {
            Item::Flow(f) => PieceItem::Flow {
                name: f.name,
                doc: if single { doc.clone() } else { f.doc },
                span: f.span,
                members: Arc::new(SummarizedMembers {
                    summary: PieceSummary::of(&f.members),
                    members: f.members,
                }),
            },
            Item::Tool(mut t) => {
                if single {
                    t.doc = doc.clone();
                }
                PieceItem::Tool(Arc::new(t))
            }
        })
        .collect();
    Arc::new(ParsedPiece {
        items,
        diagnostics: parsed.diagnostics,
    })
}

/// The members of a flow parsed with its item, summarized.
#[derive(Debug)]
pub struct SummarizedMembers {
    /// The members (spans relative to the item's piece).
    pub members: Vec<Member>,
    /// What they declare and refer to.
    pub summary: PieceSummary,
}

/// The members of one piece of a flow body, shared with the parse that made them. Two are
/// equal only when they are the same parse, so comparing them costs nothing.
#[derive(Clone, Debug)]
pub enum MemberList {
    /// A chunk's members.
    Chunk(Arc<SummarizedChunk>),
    /// The members of a flow parsed with its item.
    Item(Arc<SummarizedMembers>),
}

impl MemberList {
    /// The members (spans relative to the piece's start).
    pub fn members(&self) -> &[Member] {
        match self {
            MemberList::Chunk(c) => &c.parse.members,
            MemberList::Item(m) => &m.members,
        }
    }

    /// What the members declare and refer to.
    pub fn summary(&self) -> &PieceSummary {
        match self {
            MemberList::Chunk(c) => &c.summary,
            MemberList::Item(m) => &m.summary,
        }
    }
}

impl PartialEq for MemberList {
    fn eq(&self, other: &MemberList) -> bool {
        match (self, other) {
            (MemberList::Chunk(a), MemberList::Chunk(b)) => Arc::ptr_eq(a, b),
            (MemberList::Item(a), MemberList::Item(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A flow as laid out in its file: its header, and its members piece by piece.
#[derive(Clone, Debug)]
pub struct FlowLayout {
    /// Its name.
    pub name: String,
    /// The `flow` declaration's span.
    pub span: Span,
    /// The flow name's span.
    pub name_span: Span,
    /// The flow's doc comment.
    pub doc: Option<String>,
    /// `(offset, members with spans relative to offset)`, in source order.
    pub pieces: Vec<(u32, MemberList)>,
}

impl FlowLayout {
    /// Every member with the offset its spans are relative to, in source order.
    pub fn members(&self) -> impl Iterator<Item = (u32, &Member)> {
        self.pieces
            .iter()
            .flat_map(|(offset, list)| list.members().iter().map(move |m| (*offset, m)))
    }
}

/// A tool as laid out in its file.
#[derive(Clone, Debug)]
pub struct ToolLayout {
    /// The offset its spans are relative to.
    pub offset: u32,
    /// The tool (doc comment attached).
    pub tool: Arc<ast::Tool>,
}

/// A file's items, each parsed in pieces that an edit elsewhere leaves shared and unchanged.
#[derive(Clone, Debug, Default)]
pub struct FileLayout {
    /// Every flow, duplicates included, in source order.
    pub flows: Vec<FlowLayout>,
    /// Every tool, duplicates included, in source order.
    pub tools: Vec<ToolLayout>,
    /// The items in source order: `true` for a flow, with its index in `flows` or `tools`.
    pub order: Vec<(bool, usize)>,
    /// Lexical and syntax diagnostics (absolute spans), in source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl FileLayout {
    fn add_piece(&mut self, offset: u32, piece: &ParsedPiece) {
        for item in &piece.items {
            match item {
                PieceItem::Flow {
                    name,
                    doc,
                    span,
                    members,
                } => {
                    self.order.push((true, self.flows.len()));
                    self.flows.push(FlowLayout {
                        name: name.name.clone(),
                        span: moved(*span, offset),
                        name_span: moved(name.span, offset),
                        doc: doc.clone(),
                        pieces: vec![(offset, MemberList::Item(members.clone()))],
                    });
                }
                PieceItem::Tool(tool) => {
                    self.order.push((false, self.tools.len()));
                    self.tools.push(ToolLayout {
                        offset,
                        tool: tool.clone(),
                    });
                }
            }
        }
        self.diagnostics
            .extend(piece.diagnostics.iter().map(|d| d.shifted(offset)));
    }
}

/// `span` moved `offset` bytes later: from a piece's relative spans to the file's.
pub(crate) fn moved(span: Span, offset: u32) -> Span {
    Span {
        start: span.start + offset,
        end: span.end + offset,
    }
}

/// The file split into items and flow bodies into chunks, each parsed alone and memoized by its
/// text (see `reel_syntax::outline`). Runs again on every edit, but only re-parses what changed.
#[salsa::tracked(returns(ref), no_eq)]
pub fn file_layout(db: &dyn Db, file: SourceFile) -> FileLayout {
    let text: &str = file.text(db);
    let memo = db.outlines().outline(file, file.text(db));
    let outline = memo.outline();
    let mut layout = FileLayout::default();
    if outline.whole {
        let piece = PieceText::new(db, text, None::<String>);
        layout.add_piece(0, piece_parse(db, piece));
        return layout;
    }
    for item in &outline.items {
        let pieces = item.body.as_ref().and_then(|chunks| {
            lay_out_flow(text, chunks, |chunk, end| {
                let (at, closes) = match end {
                    ChunkEnd::Newline(at) => (at, false),
                    ChunkEnd::Close(at) => (at, true),
                };
                ChunkHandle(chunk_parse(db, ChunkText::new(db, chunk, at, closes)).clone())
            })
        });
        match pieces {
            Some(pieces) => {
                for (offset, chunk) in &pieces {
                    let diags = &chunk.0.parse.diagnostics;
                    layout
                        .diagnostics
                        .extend(diags.iter().map(|d| d.shifted(*offset)));
                }
                layout.order.push((true, layout.flows.len()));
                layout.flows.push(FlowLayout {
                    name: item.name.name.clone(),
                    span: item.span,
                    name_span: item.name.span,
                    doc: item.doc.clone(),
                    pieces: pieces
                        .into_iter()
                        .map(|(offset, chunk)| (offset, MemberList::Chunk(chunk.0)))
                        .collect(),
                });
            }
            None => {
                let piece = PieceText::new(db, &text[item.span.range()], item.doc.clone());
                layout.add_piece(item.span.start, piece_parse(db, piece));
            }
        }
    }
    layout
        .diagnostics
        .sort_by_key(|d| (d.primary.span.start, d.primary.span.end));
    layout
}

/// A step's syntax with spans relative to its own start.
fn rebased_step(s: &ast::Step) -> ast::Step {
    let mut s = s.clone();
    let start = s.span.start;
    step_spans_mut(&mut s, &mut |sp: &mut Span| {
        sp.start = sp.start.saturating_sub(start);
        sp.end = sp.end.saturating_sub(start);
    });
    s
}

//! The file parsed a little at a time: the outline splits it, each stretch of text is parsed
//! alone and memoized by its text, so an edit re-parses only the text it touched. What the
//! flow-wide queries need from a parse (heads, mentions, position-free steps) is summarized with
//! it, once per text.
//!
//! Three words name the stretches, each in one sense only:
//! - a **chunk** is one member line of a flow body with the `///` lines above it, as
//!   `reel_syntax::outline` cuts it;
//! - a **group** is a run of a flow's members parsed together and then checked together: a few
//!   chunks of a body the outline split ([`GroupText`], [`group_parse`]), or every member of a
//!   flow parsed with its item ([`GroupMembers::Whole`]);
//! - a **piece** is text parsed whole as items ([`PieceText`], [`piece_parse`]): a tool, a flow
//!   the outline could not split, or the whole file when the outline is unsure.

use std::sync::Arc;

use reel_syntax::ast::{self, Item, Member};
use reel_syntax::outline::{ItemKind, lay_out_flow};
use reel_syntax::visit::{item_spans_mut, member_spans_mut, step_spans_mut};
use reel_syntax::{ChunkEnd, Diagnostic, GroupParse, LineIndex, Parsed, Span};

use crate::db::{Db, SourceFile};
use crate::declarations::MemberHead;
use crate::step::step_mentions;

/// The parsed file (spans absolute).
#[salsa::tracked(returns(ref), no_eq)]
pub fn parse_file(db: &dyn Db, file: SourceFile) -> Parsed {
    reel_syntax::parse(file.text(db))
}

/// The file's syntax tree (absolute spans) assembled from its layout rather than parsed again:
/// the members of every group and piece, moved to their place in the file. Equal to
/// [`parse_file`]'s items and diagnostics (tested), at the cost of a copy instead of a parse, and
/// re-run on an edit only as a copy; `comments` is empty (they are the lexer's, see
/// [`file_comments`]).
#[salsa::tracked(returns(ref), no_eq)]
pub fn file_syntax(db: &dyn Db, file: SourceFile) -> Parsed {
    let layout = file_layout(db, file);
    let mut items = Vec::with_capacity(layout.order.len());
    for &(kind, i) in &layout.order {
        match kind {
            ItemKind::Flow => {
                let f = &layout.flows[i];
                let mut members = Vec::new();
                for (offset, group) in &f.groups {
                    // A long flow is many groups: an edit stops the copy between two.
                    db.unwind_if_revision_cancelled();
                    members.extend(group.members().iter().map(|m| {
                        let mut m = m.clone();
                        member_spans_mut(&mut m, &mut |s: &mut Span| *s = s.shifted(*offset));
                        m
                    }));
                }
                items.push(Item::Flow(ast::Flow {
                    name: ast::Ident {
                        name: f.name.clone(),
                        span: f.name_span,
                    },
                    doc: f.doc.clone(),
                    members,
                    span: f.span,
                }));
            }
            ItemKind::Tool => {
                let t = &layout.tools[i];
                let mut item = Item::Tool((*t.tool).clone());
                item_spans_mut(&mut item, &mut |s: &mut Span| *s = s.shifted(t.offset));
                items.push(item);
            }
        }
    }
    Parsed {
        file: ast::File {
            items,
            comments: Vec::new(),
        },
        diagnostics: layout.diagnostics.clone(),
    }
}

/// Every comment of the file (absolute spans), from the lexer alone.
#[salsa::tracked(returns(ref))]
pub fn file_comments(db: &dyn Db, file: SourceFile) -> Vec<ast::Comment> {
    reel_syntax::lexer::lex(file.text(db)).comments
}

/// Line starts of the file, for spans in lines and columns.
#[salsa::tracked(returns(ref))]
pub fn line_index(db: &dyn Db, file: SourceFile) -> LineIndex {
    LineIndex::new(file.text(db))
}

/// A group of chunks of a flow body, by its text and the token that follows it: the same key,
/// the same parse, so a group an edit did not touch is never parsed again.
#[salsa::interned]
pub struct GroupText<'db> {
    /// The group's text.
    #[returns(ref)]
    pub text: String,
    /// Where the token after it is, relative to its start.
    #[returns(copy)]
    pub next_at: u32,
    /// Whether that token is the flow's `}` (else a separating line break).
    #[returns(copy)]
    pub closes: bool,
}

/// A group parsed alone (spans relative to its start), with the summary flow-level queries read.
#[salsa::tracked(returns(ref), no_eq)]
pub fn group_parse<'db>(db: &'db dyn Db, group: GroupText<'db>) -> Arc<ParsedGroup> {
    let at = group.next_at(db);
    let end = if group.closes(db) {
        ChunkEnd::Close(at)
    } else {
        ChunkEnd::Newline(at)
    };
    let parse = reel_syntax::parse_group(group.text(db), end);
    let summary = GroupSummary::of(&parse.members, group.text(db));
    Arc::new(ParsedGroup { parse, summary })
}

/// A group's parse and its summary, made together so that the summary is computed once per text.
#[derive(Debug)]
pub struct ParsedGroup {
    /// The parse (spans relative to the group's start).
    pub parse: GroupParse,
    /// What its members declare and refer to.
    pub summary: GroupSummary,
}

/// A handle on a parsed group that the outline's layout can read as a plain parse.
struct GroupHandle(Arc<ParsedGroup>);

impl AsRef<GroupParse> for GroupHandle {
    fn as_ref(&self) -> &GroupParse {
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

/// A shared value that compares equal at once when it is the same allocation (a group an edit
/// did not touch), and by content otherwise (a group re-parsed to the same heads).
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

/// A group's members summarized: what the flow-wide queries need, so that they read this
/// (equal, and shared, when an edit changed only a step's body) instead of the syntax.
#[derive(Clone, Debug, Default)]
pub struct GroupSummary {
    /// One head per member, in order.
    pub heads: Shared<Vec<MemberHead>>,
    /// One entry per step member, in order.
    pub mentions: Shared<Vec<StepMentions>>,
    /// One entry per member: a step's syntax with spans relative to its own start (equal across
    /// edits of other members, and of the blanks and comments around it), else `None`.
    pub steps: Shared<Vec<Option<ast::Step>>>,
}

impl GroupSummary {
    /// Summarizes `members`, parsed from `text`.
    pub fn of(members: &[Member], text: &str) -> GroupSummary {
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
            heads.push(MemberHead::in_text(m, text));
        }
        GroupSummary {
            heads: Shared(Arc::new(heads)),
            mentions: Shared(Arc::new(mentions)),
            steps: Shared(Arc::new(steps)),
        }
    }
}

/// A piece: text of a file parsed whole as items (a tool, a flow the outline could not split,
/// or the whole file when the outline is unsure), with the doc comment its item has in the file.
#[salsa::interned]
pub struct PieceText<'db> {
    /// The piece's text.
    #[returns(ref)]
    pub text: String,
    /// The doc comment above it in the file, given to its one item.
    #[returns(ref)]
    pub doc: Option<String>,
}

/// The items of a piece (spans relative to its start), shared by reference.
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

/// A piece parsed into its items, each flow's members summarized as one group.
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
                // The piece's own text holds the doc comment when it is the whole file.
                doc: if single { doc.clone().or(f.doc) } else { f.doc },
                span: f.span,
                members: Arc::new(SummarizedMembers {
                    summary: GroupSummary::of(&f.members, piece.text(db)),
                    members: f.members,
                }),
            },
            Item::Tool(mut t) => {
                if single && doc.is_some() {
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

/// The members of a flow parsed with its item (one group), summarized.
#[derive(Debug)]
pub struct SummarizedMembers {
    /// The members (spans relative to the piece's start).
    pub members: Vec<Member>,
    /// What they declare and refer to.
    pub summary: GroupSummary,
}

/// The members of one group of a flow, shared with the parse that made them. Two are equal
/// only when they are the same parse, so comparing them costs nothing.
#[derive(Clone, Debug)]
pub enum GroupMembers {
    /// A group of chunks of a body the outline split.
    Split(Arc<ParsedGroup>),
    /// Every member of a flow parsed with its item.
    Whole(Arc<SummarizedMembers>),
}

impl GroupMembers {
    /// The members (spans relative to the group's start).
    pub fn members(&self) -> &[Member] {
        match self {
            GroupMembers::Split(c) => &c.parse.members,
            GroupMembers::Whole(m) => &m.members,
        }
    }

    /// What the members declare and refer to.
    pub fn summary(&self) -> &GroupSummary {
        match self {
            GroupMembers::Split(c) => &c.summary,
            GroupMembers::Whole(m) => &m.summary,
        }
    }
}

impl PartialEq for GroupMembers {
    fn eq(&self, other: &GroupMembers) -> bool {
        match (self, other) {
            (GroupMembers::Split(a), GroupMembers::Split(b)) => Arc::ptr_eq(a, b),
            (GroupMembers::Whole(a), GroupMembers::Whole(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A flow as laid out in its file: its header, and its members group by group.
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
    pub groups: Vec<(u32, GroupMembers)>,
}

impl FlowLayout {
    /// Every member with the offset its spans are relative to, in source order.
    pub fn members(&self) -> impl Iterator<Item = (u32, &Member)> {
        self.groups
            .iter()
            .flat_map(|(offset, group)| group.members().iter().map(move |m| (*offset, m)))
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

/// A file's items, parsed in groups and pieces that an edit elsewhere leaves shared and
/// unchanged.
#[derive(Clone, Debug, Default)]
pub struct FileLayout {
    /// Every flow, duplicates included, in source order.
    pub flows: Vec<FlowLayout>,
    /// Every tool, duplicates included, in source order.
    pub tools: Vec<ToolLayout>,
    /// The items in source order: what each is, and its index in `flows` or `tools`.
    pub order: Vec<(ItemKind, usize)>,
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
                    self.order.push((ItemKind::Flow, self.flows.len()));
                    self.flows.push(FlowLayout {
                        name: name.name.clone(),
                        span: span.shifted(offset),
                        name_span: name.span.shifted(offset),
                        doc: doc.clone(),
                        groups: vec![(offset, GroupMembers::Whole(members.clone()))],
                    });
                }
                PieceItem::Tool(tool) => {
                    self.order.push((ItemKind::Tool, self.tools.len()));
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

/// The file split into items and flow bodies into groups of chunks, each parsed alone and
/// memoized by its text (see `reel_syntax::outline`). Runs again on every edit, but only re-parses what changed.
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
        let groups = item.body.as_ref().and_then(|chunks| {
            lay_out_flow(text, chunks, |group, end| {
                let (at, closes) = match end {
                    ChunkEnd::Newline(at) => (at, false),
                    ChunkEnd::Close(at) => (at, true),
                };
                GroupHandle(group_parse(db, GroupText::new(db, group, at, closes)).clone())
            })
        });
        match groups {
            Some(groups) => {
                for (offset, group) in &groups {
                    let diags = &group.0.parse.diagnostics;
                    layout
                        .diagnostics
                        .extend(diags.iter().map(|d| d.shifted(*offset)));
                }
                layout.order.push((ItemKind::Flow, layout.flows.len()));
                layout.flows.push(FlowLayout {
                    name: item.name.name.clone(),
                    span: item.span,
                    name_span: item.name.span,
                    doc: item.doc.clone(),
                    groups: groups
                        .into_iter()
                        .map(|(offset, group)| (offset, GroupMembers::Split(group.0)))
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
    step_spans_mut(&mut s, &mut |sp: &mut Span| *sp = sp.relative_to(start));
    s
}

//! The salsa queries: how parse, declarations, steps, the DAG and the FlowSpec depend on each other.
//!
//! Steps and the output are checked on copies whose spans are relative to their own start, and
//! the signature a step is checked against holds no spans: an edit re-checks the edited step and
//! the steps whose inputs' types it changed, while every other step's result is reused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use reel_flowspec::Type;
use reel_syntax::ast::{self, Item, Member};
use reel_syntax::outline::lay_out_flow;
use reel_syntax::visit::{rebase_member, step_spans_mut};
use reel_syntax::{ChunkEnd, ChunkParse, Code, Diagnostic, LineIndex, Parsed, Span};

use crate::contracts::Contract;
use crate::dag::{Dag, find_cycles};
use crate::db::{Db, SourceFile};
use crate::declarations::{Declarations, MemberHead, PlacedDiagnostic, check_declarations};
use crate::infer::{Checker, ItemScope, Refs};
use crate::signature::FlowSignature;
use crate::step::{StepCheck, check_step, step_mentions, syntactic_dependencies};
use crate::tools::{UserTool, check_tool};
use rustc_hash::FxHashMap;

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

/// A flow, by file and name.
#[salsa::interned(debug, revisions = usize::MAX)]
pub struct FlowId<'db> {
    /// The file that declares it.
    #[returns(copy)]
    pub file: SourceFile,
    /// Its name.
    #[returns(ref)]
    pub name: String,
}

/// A step, by flow and name.
#[salsa::interned(debug, revisions = usize::MAX)]
pub struct StepId<'db> {
    /// The flow it belongs to.
    #[returns(copy)]
    pub flow: FlowId<'db>,
    /// Its name.
    #[returns(ref)]
    pub name: String,
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

fn moved(span: Span, offset: u32) -> Span {
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

/// The flows of a file, in order (the first of each name).
#[salsa::tracked(returns(ref))]
pub fn file_flows<'db>(db: &'db dyn Db, file: SourceFile) -> Vec<FlowId<'db>> {
    let mut seen = BTreeSet::new();
    file_layout(db, file)
        .flows
        .iter()
        .filter(|f| seen.insert(f.name.as_str()))
        .map(|f| FlowId::new(db, file, f.name.as_str()))
        .collect()
}

/// The layout of a flow (the first of its name), `None` if the file no longer declares it.
pub fn flow_layout<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<&'db FlowLayout> {
    let name = flow.name(db);
    file_layout(db, flow.file(db))
        .flows
        .iter()
        .find(|f| f.name == *name)
}

/// One piece of a flow body (a group of members parsed together), known across revisions by
/// its flow and the name of its first step. Its fields are what an edit changes: `source` when
/// anything in the piece changed, `heads` only when a member was added, removed or renamed,
/// `mentions` only when a step's references changed, so each query reads only what it needs.
#[salsa::tracked(debug)]
pub struct PieceNode<'db> {
    /// The flow.
    #[returns(copy)]
    pub flow: FlowId<'db>,
    /// The name of its first step, if it has one.
    #[returns(ref)]
    pub key: Option<String>,
    /// Its members.
    #[tracked]
    #[returns(ref)]
    pub source: MemberList,
    /// What its members declare.
    #[tracked]
    #[returns(ref)]
    pub heads: Shared<Vec<MemberHead>>,
    /// What its steps refer to.
    #[tracked]
    #[returns(ref)]
    pub mentions: Shared<Vec<StepMentions>>,
    /// Its steps, each relative to its own start: what a step's check reads, so that an edit
    /// that moves a step without changing it does not check it again.
    #[tracked]
    #[returns(ref)]
    pub steps: Shared<Vec<Option<ast::Step>>>,
}

/// The pieces of a flow body, in source order. Runs again on every edit (it reads the layout);
/// equal, and so backdated, unless pieces were added or removed.
#[salsa::tracked(returns(ref))]
pub fn flow_pieces<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<PieceNode<'db>> {
    let Some(layout) = flow_layout(db, flow) else {
        return Vec::new();
    };
    layout
        .pieces
        .iter()
        .map(|(_, list)| {
            let summary = list.summary();
            let key = summary
                .heads
                .iter()
                .find_map(|h| h.step_name().map(str::to_string));
            PieceNode::new(
                db,
                flow,
                key,
                list.clone(),
                summary.heads.clone(),
                summary.mentions.clone(),
                summary.steps.clone(),
            )
        })
        .collect()
}

/// Where a member is: its piece and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, salsa::SalsaValue)]
pub struct MemberAt<'db> {
    /// The piece.
    pub piece: PieceNode<'db>,
    /// The index among the piece's members.
    pub index: u32,
}

impl<'db> MemberAt<'db> {
    /// The member's syntax (spans relative to its piece); reading it depends on the piece's source.
    pub fn member(self, db: &'db dyn Db) -> Option<&'db Member> {
        self.piece.source(db).members().get(self.index as usize)
    }
}

/// The named members of a flow: the first step of each name and the first output.
#[derive(Clone, Debug, PartialEq, Eq, Default, salsa::SalsaValue)]
pub struct FlowMembers<'db> {
    /// Steps by id.
    pub steps: FxHashMap<StepId<'db>, MemberAt<'db>>,
    /// The ids of `steps` in source order, so that a walk over the members finds each step's id
    /// by position instead of interning its name again.
    pub order: Vec<StepId<'db>>,
    /// The ids of `steps` by name: a check looks up the steps it reads here, one dependency on
    /// this table for all of them rather than one on the interner per name.
    pub ids: FxHashMap<String, StepId<'db>>,
    /// The output.
    pub output: Option<MemberAt<'db>>,
}

/// The flow's member table, from the pieces' heads alone: an edit inside a step's body leaves
/// it alone, so it is not even re-run.
#[salsa::tracked(returns(ref))]
pub fn flow_members<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> FlowMembers<'db> {
    let mut out = FlowMembers::default();
    for &piece in flow_pieces(db, flow) {
        for (index, head) in piece.heads(db).iter().enumerate() {
            let at = MemberAt {
                piece,
                index: index as u32,
            };
            match head {
                MemberHead::Step { name, .. } => {
                    let id = StepId::new(db, flow, name.name.as_str());
                    if let std::collections::hash_map::Entry::Vacant(v) = out.steps.entry(id) {
                        v.insert(at);
                        out.order.push(id);
                        out.ids.insert(name.name.clone(), id);
                    }
                }
                MemberHead::Output(_) if out.output.is_none() => out.output = Some(at),
                _ => {}
            }
        }
    }
    out
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

/// The syntax of a flow's step `step` (the first of its name), spans relative to its own start.
/// Not a query: the piece's `steps` field already is what an edit elsewhere leaves equal, and a
/// memo per step would be one more for every edit to verify.
pub fn step_syntax<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<&'db ast::Step> {
    let at = *flow_members(db, step.flow(db)).steps.get(&step)?;
    at.piece.steps(db).get(at.index as usize)?.as_ref()
}

/// The flow's declarations, checked from its members' heads: an edit inside a step's body does
/// not re-run it.
#[salsa::tracked(returns(ref))]
pub fn flow_declarations<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Declarations {
    let pieces = flow_pieces(db, flow);
    let heads: Vec<&Shared<Vec<MemberHead>>> = pieces.iter().map(|p| p.heads(db)).collect();
    let count = heads.iter().map(|h| h.len()).sum();
    let placed = heads.iter().enumerate().flat_map(|(p, heads)| {
        heads
            .iter()
            .enumerate()
            .map(move |(m, head)| ((p as u32, m as u32), head))
    });
    check_declarations(placed, count)
}

/// The names and types a flow's expressions resolve against: free of spans, so most edits keep it equal.
#[salsa::tracked(returns(ref))]
pub fn flow_signature<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> FlowSignature {
    flow_declarations(db, flow).signature.clone()
}

/// The file's user tools that checked well enough to call, by name.
#[salsa::tracked(returns(ref))]
pub fn user_tools(db: &dyn Db, file: SourceFile) -> BTreeMap<String, UserTool> {
    let mut out = BTreeMap::new();
    let mut sink = Vec::new();
    for t in &file_layout(db, file).tools {
        if let Some(tool) = check_tool(&t.tool, &mut sink) {
            out.entry(t.tool.name.name.clone()).or_insert(tool);
        }
    }
    out
}

/// Diagnostics of the file's tool declarations and of duplicate top-level names.
#[salsa::tracked(returns(ref))]
pub fn item_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut flows: FxHashMap<&str, Span> = FxHashMap::default();
    let mut tools: FxHashMap<&str, Span> = FxHashMap::default();
    let layout = file_layout(db, file);
    for &(is_flow, i) in &layout.order {
        let (name, span, list, what) = if is_flow {
            let f = &layout.flows[i];
            (f.name.as_str(), f.name_span, &mut flows, "flow")
        } else {
            let t = &layout.tools[i];
            let mut local = Vec::new();
            check_tool(&t.tool, &mut local);
            diags.extend(local.iter().map(|d| d.shifted(t.offset)));
            (
                t.tool.name.name.as_str(),
                moved(t.tool.name.span, t.offset),
                &mut tools,
                "tool",
            )
        };
        if let Some(first) = list.get(name) {
            diags.push(
                Diagnostic::error(
                    Code::NameDuplicate,
                    span,
                    format!("the {what} `{name}` is declared twice in this file"),
                )
                .with_label("declared again here")
                .with_secondary(*first, "first declared here")
                .with_help(format!("rename one of the two {what}s")),
            );
        } else {
            list.insert(name, span);
        }
    }
    diags
}

/// The steps a step depends on, from its syntax alone (relative spans).
#[salsa::tracked(returns(ref))]
pub fn step_dependencies<'db>(db: &'db dyn Db, step: StepId<'db>) -> Vec<(String, Span)> {
    let sig = flow_signature(db, step.flow(db));
    match step_syntax(db, step) {
        Some(s) => syntactic_dependencies(s, sig),
        None => Vec::new(),
    }
}

/// The flow's step graph and its cycles. Built before any type is inferred, from what each
/// piece's steps mention: an edit that keeps every step's references does not re-run it.
#[salsa::tracked(returns(ref))]
pub fn flow_dag<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Dag {
    let sig = flow_signature(db, flow);
    let is_step = |n: &str| sig.step(n).is_some();
    let mut edges = BTreeMap::new();
    for &piece in flow_pieces(db, flow) {
        for m in piece.mentions(db).iter() {
            // The first step of each name is the one in the graph (a duplicate is an error).
            if !is_step(&m.name) || edges.contains_key(&m.name) {
                continue;
            }
            let names = m.names.iter().filter(|n| is_step(n));
            let after = m.after.iter().filter(|n| is_step(n) && **n != m.name);
            edges.insert(m.name.clone(), names.chain(after).cloned().collect());
        }
    }
    find_cycles(&edges)
}

/// The full check of one step (relative spans). It reads its piece's `steps`, which an edit of
/// any of the piece's steps changes: the steps of the edited piece are checked again (a few), an
/// edit that only moves them (a blank line, a comment, a longer step above) checks none.
#[salsa::tracked(returns(ref))]
pub fn step_check<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<StepCheck> {
    let syntax = step_syntax(db, step)?;
    let flow = step.flow(db);
    let file = flow.file(db);
    let sig = flow_signature(db, flow);
    let tools = |name: &str| -> Option<Contract> {
        user_tools(db, file).get(name).map(|t| t.contract.clone())
    };
    let types = |name: &str| dep_type(db, flow, name);
    Some(check_step(syntax, sig, &tools, &types))
}

/// The type of step `name` as the expressions that read it see it. Read from its check rather
/// than from `step_type`: one memo fewer per step for every edit to verify, and an edit that
/// re-runs a check to an equal result stops there all the same.
fn dep_type<'db>(db: &'db dyn Db, flow: FlowId<'db>, name: &str) -> Type {
    if flow_dag(db, flow).in_cycle.contains(name) {
        return Type::Error;
    }
    let Some(&id) = flow_members(db, flow).ids.get(name) else {
        return Type::Error;
    };
    step_check(db, id)
        .as_ref()
        .map_or(Type::Error, |c| c.ty.clone())
}

/// The type of a step's value; the error type for a step on a cycle (which is reported once, as the cycle).
#[salsa::tracked(returns(ref))]
pub fn step_type<'db>(db: &'db dyn Db, step: StepId<'db>) -> Type {
    if flow_dag(db, step.flow(db)).in_cycle.contains(step.name(db)) {
        return Type::Error;
    }
    step_check(db, step)
        .as_ref()
        .map_or(Type::Error, |c| c.ty.clone())
}

/// The checked output of a flow (relative spans).
#[derive(Clone, Debug, PartialEq)]
pub struct OutputCheck {
    /// The lowered expression.
    pub expr: reel_flowspec::Expr,
    /// What it refers to.
    pub refs: Refs,
    /// Problems, relative to the output's start.
    pub diagnostics: Vec<Diagnostic>,
}

/// The output member, relative to its start.
#[salsa::tracked(returns(ref))]
pub fn output_syntax<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<ast::Output> {
    let at = flow_members(db, flow).output?;
    match at.member(db)? {
        Member::Output(o) => {
            let mut m = Member::Output(o.clone());
            rebase_member(&mut m, o.span.start);
            match m {
                Member::Output(o) => Some(o),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The checked output of a flow.
#[salsa::tracked(returns(ref))]
pub fn output_check<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<OutputCheck> {
    let out = output_syntax(db, flow).as_ref()?;
    let sig = flow_signature(db, flow);
    let types = |name: &str| dep_type(db, flow, name);
    let mut cx = Checker::new(sig, &types, ItemScope::Outside);
    let expr = cx.expr(&out.expr);
    Some(OutputCheck {
        expr,
        refs: cx.refs,
        diagnostics: cx.diags,
    })
}

/// Every diagnostic of one flow (absolute spans).
#[salsa::tracked(returns(ref))]
pub fn flow_diagnostics<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<Diagnostic> {
    let Some(layout) = flow_layout(db, flow) else {
        return Vec::new();
    };
    let decls = flow_declarations(db, flow);
    let start_of = |(p, m): crate::declarations::Place| -> u32 {
        layout.pieces.get(p as usize).map_or(0, |(offset, list)| {
            offset + list.members().get(m as usize).map_or(0, |m| m.span().start)
        })
    };
    let mut diags: Vec<Diagnostic> = decls
        .diagnostics
        .iter()
        .map(|d| d.placed(start_of))
        .collect();
    let dag = flow_dag(db, flow);
    // The layout's pieces and the flow's piece nodes are built one from the other, in order.
    let pieces = flow_pieces(db, flow);
    let members = flow_members(db, flow);
    // Where a member starts in the file: a scan of the pieces, for the output and cycles only.
    let start_at = |at: MemberAt<'db>| -> u32 {
        pieces
            .iter()
            .position(|p| *p == at.piece)
            .map_or(0, |p| start_of((p as u32, at.index)))
    };
    let step_offset = |_: &dyn Db, id: StepId<'db>| -> u32 {
        members.steps.get(&id).map_or(0, |&at| start_at(at))
    };

    // Cycles: one diagnostic each, a label on every edge's reference.
    for cycle in &dag.cycles {
        let first = StepId::new(db, flow, cycle[0].clone());
        let first_name = step_syntax(db, first)
            .map(|s| s.name.span)
            .unwrap_or_default();
        let mut d = Diagnostic::error(
            Code::DagCycle,
            Span::new(
                (first_name.start + step_offset(db, first)) as usize,
                (first_name.end + step_offset(db, first)) as usize,
            ),
            if cycle.len() == 1 {
                format!("the step `{}` depends on itself", cycle[0])
            } else {
                let mut path = cycle.clone();
                path.push(cycle[0].clone());
                format!("these steps depend on each other: {}", path.join(" → "))
            },
        )
        .with_label("this step is on the cycle");
        for (i, name) in cycle.iter().enumerate() {
            let next = &cycle[(i + 1) % cycle.len()];
            let id = StepId::new(db, flow, name.clone());
            let offset = step_offset(db, id);
            if let Some((_, span)) = step_dependencies(db, id).iter().find(|(n, _)| n == next) {
                d = d.with_secondary(
                    Span::new((span.start + offset) as usize, (span.end + offset) as usize),
                    format!("`{name}` needs `{next}` here"),
                );
            }
        }
        diags.push(d.with_help("a step can only use steps that finish before it: break the cycle by removing one of these references"));
    }

    // Per-step diagnostics, a piece at a time.
    for ((offset, _), &piece) in layout.pieces.iter().zip(pieces) {
        let report = piece_report(db, piece);
        diags.extend(report.diagnostics.iter().map(|d| d.shifted(*offset)));
    }
    let output_at = members.output.map(start_at);
    if let (Some(check), Some(at)) = (output_check(db, flow), output_at) {
        diags.extend(check.diagnostics.iter().map(|d| d.shifted(at)));
    }

    // Warnings for what nothing uses. They are held back while the flow has errors, syntax
    // errors inside it included: a mistyped or broken reference is often the use they would
    // complain about.
    let syntax_errors = file_layout(db, flow.file(db)).diagnostics.iter().any(|d| {
        d.is_error()
            && d.primary.span.start >= layout.span.start
            && d.primary.span.start <= layout.span.end
    });
    if !syntax_errors && !diags.iter().any(Diagnostic::is_error) {
        diags.extend(flow_unused(db, flow).iter().map(|d| d.placed(start_of)));
    }
    diags
}

/// What the steps of one piece report: their diagnostics (relative to the piece) and the names
/// they use. Re-run when the piece or one of its steps' checks changed, and equal unless what
/// they report changed, so the flow-wide usage is not recomputed for an edit that keeps it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PieceReport {
    /// Diagnostics of its steps, relative to the piece's start.
    pub diagnostics: Vec<Diagnostic>,
    /// The steps, inputs, environment variables and secrets its steps use (`after` included).
    pub uses: Uses,
}

/// Names used, each once, sorted.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Uses {
    /// Steps read or waited for.
    pub steps: Vec<String>,
    /// Inputs read.
    pub inputs: Vec<String>,
    /// Environment variables read.
    pub env: Vec<String>,
    /// Secrets passed.
    pub secrets: Vec<String>,
}

impl Uses {
    fn add(&mut self, refs: &Refs) {
        self.steps.extend(refs.steps.iter().map(|(n, _)| n.clone()));
        self.inputs.extend(refs.inputs.iter().cloned());
        self.env.extend(refs.env.iter().cloned());
        self.secrets.extend(refs.secrets.iter().cloned());
    }

    fn tidy(&mut self) {
        for v in [
            &mut self.steps,
            &mut self.inputs,
            &mut self.env,
            &mut self.secrets,
        ] {
            v.sort_unstable();
            v.dedup();
        }
    }
}

/// The report of one piece's steps: the steps the signature holds (the first of each name,
/// reserved names left out), checked.
#[salsa::tracked(returns(ref))]
pub fn piece_report<'db>(db: &'db dyn Db, piece: PieceNode<'db>) -> PieceReport {
    let flow = piece.flow(db);
    let sig = flow_signature(db, flow);
    let members = flow_members(db, flow);
    let mut out = PieceReport::default();
    for (index, m) in piece.source(db).members().iter().enumerate() {
        let Member::Step(s) = m else { continue };
        if sig.step(&s.name.name).is_none() {
            continue;
        }
        let Some(&id) = members.ids.get(&s.name.name) else {
            continue;
        };
        let here = MemberAt {
            piece,
            index: index as u32,
        };
        if members.steps.get(&id) != Some(&here) {
            continue;
        }
        if let Some(check) = step_check(db, id) {
            let at = s.span.start;
            out.diagnostics
                .extend(check.diagnostics.iter().map(|d| d.shifted(at)));
            out.uses.add(&check.refs);
            out.uses
                .steps
                .extend(check.after.iter().map(|(n, _)| n.clone()));
        }
    }
    out.uses.tidy();
    out
}

/// Warnings for the inputs, secrets, env names and effect-free steps nothing uses, placed by
/// member. Reads the pieces' reports and heads, so an edit that changes no use does not re-run it.
#[salsa::tracked(returns(ref))]
pub fn flow_unused<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<PlacedDiagnostic> {
    let pieces = flow_pieces(db, flow);
    let mut uses = Uses::default();
    for &piece in pieces {
        let u = &piece_report(db, piece).uses;
        uses.steps.extend(u.steps.iter().cloned());
        uses.inputs.extend(u.inputs.iter().cloned());
        uses.env.extend(u.env.iter().cloned());
        uses.secrets.extend(u.secrets.iter().cloned());
    }
    if let Some(check) = output_check(db, flow) {
        uses.add(&check.refs);
    }
    uses.tidy();
    let used =
        |list: &[String], name: &str| list.binary_search_by(|n| n.as_str().cmp(name)).is_ok();
    let mut out = Vec::new();
    for (p, &piece) in pieces.iter().enumerate() {
        for (m, head) in piece.heads(db).iter().enumerate() {
            let place = (p as u32, m as u32);
            let warning = match head {
                MemberHead::Input(i) if !used(&uses.inputs, &i.name.name) => Diagnostic::warning(
                    Code::LintUnusedInput,
                    i.name.span,
                    format!("the input `{}` is never read", i.name.name),
                )
                .with_label("unused input")
                .with_help(format!("read it as `input.{}`, or remove it", i.name.name)),
                MemberHead::Secret(name) if !used(&uses.secrets, &name.name) => {
                    Diagnostic::warning(
                        Code::LintUnusedSecret,
                        name.span,
                        format!("the secret `{}` is never passed to a tool", name.name),
                    )
                    .with_label("unused secret")
                    .with_help("remove it, so runs do not need it set")
                }
                MemberHead::Env(name) if !used(&uses.env, &name.name) => Diagnostic::warning(
                    Code::LintUnusedEnv,
                    name.span,
                    format!("the environment variable `{}` is never read", name.name),
                )
                .with_label("unused")
                .with_help(format!("read it as `env.{}`, or remove it", name.name)),
                MemberHead::Step { name, .. } if !used(&uses.steps, &name.name) => {
                    let id = StepId::new(db, flow, name.name.as_str());
                    let kind = step_check(db, id).as_ref().map(|c| c.lowered.kind);
                    if !matches!(
                        kind,
                        Some(reel_flowspec::ToolKind::Pure | reel_flowspec::ToolKind::Read)
                    ) {
                        continue;
                    }
                    Diagnostic::warning(Code::LintUnusedStep, name.span, format!("nothing uses the value of `{}`", name.name))
                        .with_label("unused step")
                        .with_help("it has no effect, so it only costs time: use its value in the output or another step, or remove it")
                }
                _ => continue,
            };
            out.push(PlacedDiagnostic {
                diagnostic: warning,
                places: vec![place],
            });
        }
    }
    out
}

/// Every diagnostic of a file, sorted by position.
#[salsa::tracked(returns(ref))]
pub fn file_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut diags = file_layout(db, file).diagnostics.clone();
    diags.extend(item_diagnostics(db, file).iter().cloned());
    for &flow in file_flows(db, file) {
        diags.extend(flow_diagnostics(db, flow).iter().cloned());
    }
    diags.sort_by(|a, b| {
        (a.primary.span.start, a.primary.span.end, a.code).cmp(&(
            b.primary.span.start,
            b.primary.span.end,
            b.code,
        ))
    });
    diags.dedup();
    diags
}

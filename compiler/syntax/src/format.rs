//! The formatter behind `reel fmt`: prints a file in one canonical layout and keeps every comment.
//!
//! The printer writes the tokens of the syntax tree in source order, parentheses included, so a
//! formatted file differs from its source only in white space, separators, key quotes and string
//! escapes, never in meaning. Comments are not part of the tree. Before printing, each one is
//! placed beside a *slot*, an entry that starts a line of its own (a declaration, a member, an
//! entry of a block, record or schema, an element of a list, an argument of a call): a comment
//! between slots leads the next one, trails the one before when it shares its line, or closes
//! the block when nothing follows, and a comment inside a slot, where the printed line cannot
//! break, moves to the lines above that slot. A record or list that holds a comment was written
//! on several lines, and such a block is always printed broken, so every comment has its place.

use std::collections::HashMap;
use std::fmt;

use crate::ast::{
    Comment, Expr, ExprKind, Field, File, Ident, Item, Key, Member, Schema, SchemaSide, StepBody,
    StrPart, ToolEntry, TypeExpr, TypeExprKind, TypeField,
};
use crate::diagnostic::Diagnostic;
use crate::parser::parse;
use crate::span::Span;

/// Longest line, in characters, that an inline record, list or schema may reach.
const WIDTH: usize = 100;

const BRACES: Option<(&str, &str)> = Some(("{", "}"));
const BRACKETS: Option<(&str, &str)> = Some(("[", "]"));
const PARENS: Option<(&str, &str)> = Some(("(", ")"));

/// Why a file was not formatted: it has syntax errors, and reprinting a broken tree could lose text.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatError {
    /// The lexical and syntax diagnostics of the file, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.diagnostics.iter().filter(|d| d.is_error()).count();
        let plural = if n == 1 { "" } else { "s" };
        write!(
            f,
            "the file has {n} syntax error{plural}; it can be formatted once they are fixed"
        )
    }
}

impl std::error::Error for FormatError {}

/// Formats a whole source file in the canonical layout, or returns its syntax errors.
pub fn format(src: &str) -> Result<String, FormatError> {
    let parsed = parse(src);
    if parsed.diagnostics.iter().any(Diagnostic::is_error) {
        return Err(FormatError {
            diagnostics: parsed.diagnostics,
        });
    }
    let plan = Plan::new(src, &parsed.file);
    let mut printer = Printer {
        src,
        comments: &parsed.file.comments,
        plan: &plan,
        out: String::new(),
        indent: 0,
        line_start: true,
        after_doc: false,
        flat: false,
        failed: false,
    };
    printer.file(&parsed.file);
    if !printer.out.is_empty() {
        printer.out.push('\n');
    }
    Ok(printer.out)
}

/// The comments printed around one slot, as indices into `File::comments`.
#[derive(Clone, Debug, Default)]
struct SlotComments {
    /// Whether `///` lines right above the slot document it (declarations, inputs, secrets, env names, steps).
    documented: bool,
    /// Own-line comments between the slot before and this one, in source order.
    leading: Vec<usize>,
    /// Comments from inside the slot, where the printed line cannot break.
    hoisted: Vec<usize>,
    /// The `///` lines that document the slot.
    doc: Vec<usize>,
    /// The comment at the end of the slot's last line.
    trailing: Option<usize>,
}

/// The comments printed in one block: a braced, bracketed or parenthesized list of slots, or the file.
#[derive(Clone, Debug, Default)]
struct BlockComments {
    /// The comment on the line of the opening delimiter.
    header: Option<usize>,
    /// One entry per slot, in source order.
    slots: Vec<SlotComments>,
    /// Own-line comments after the last slot.
    dangling: Vec<usize>,
}

static NO_BLOCK: BlockComments = BlockComments {
    header: None,
    slots: Vec::new(),
    dangling: Vec::new(),
};

static NO_SLOT: SlotComments = SlotComments {
    documented: false,
    leading: Vec::new(),
    hoisted: Vec::new(),
    doc: Vec::new(),
    trailing: None,
};

/// Where every comment of a file is printed, by block; a block is keyed by the offset of its
/// opening delimiter, the file by `None`.
struct Plan {
    blocks: HashMap<Option<u32>, BlockComments>,
}

/// A block of the tree: where its inside lies and the spans of its slots.
struct Block {
    open: Option<u32>,
    inside: Span,
    slots: Vec<(Span, bool)>,
}

impl Plan {
    fn new(src: &str, file: &File) -> Plan {
        let mut collector = Collector {
            src,
            blocks: Vec::new(),
        };
        collector.file(file);
        let comments = &file.comments;
        let mut placed = vec![false; comments.len()];
        let mut blocks = HashMap::new();
        for block in &collector.blocks {
            let mut slots = Vec::with_capacity(block.slots.len());
            for &(span, documented) in &block.slots {
                let doc = if documented {
                    doc_lines(src, comments, span.start)
                } else {
                    Vec::new()
                };
                for &k in &doc {
                    placed[k] = true;
                }
                slots.push(SlotComments {
                    documented,
                    doc,
                    ..SlotComments::default()
                });
            }
            blocks.insert(
                block.open,
                BlockComments {
                    slots,
                    ..BlockComments::default()
                },
            );
        }
        for (k, comment) in comments.iter().enumerate() {
            if placed[k] {
                continue;
            }
            let at = comment.span.start;
            // Blocks nest, so the one whose inside starts last is the innermost.
            let innermost = collector
                .blocks
                .iter()
                .filter(|b| b.inside.start <= at && at < b.inside.end)
                .max_by_key(|b| b.inside.start)
                .or(collector.blocks.first());
            if let Some(block) = innermost
                && let Some(plan) = blocks.get_mut(&block.open)
            {
                place(src, block, plan, k, at);
            }
        }
        Plan { blocks }
    }
}

/// Places comment `k`, which starts at `at` inside `block`, beside one of its slots.
fn place(src: &str, block: &Block, plan: &mut BlockComments, k: usize, at: u32) {
    let slots = &block.slots;
    if let Some(i) = slots.iter().position(|(s, _)| s.start <= at && at < s.end) {
        plan.slots[i].hoisted.push(k);
        return;
    }
    let same_line = |from: u32| {
        src.get(from as usize..at as usize)
            .is_some_and(|gap| !gap.contains('\n'))
    };
    match slots.iter().rposition(|(s, _)| s.end <= at) {
        Some(p) if same_line(slots[p].0.end) && plan.slots[p].trailing.is_none() => {
            plan.slots[p].trailing = Some(k);
            return;
        }
        None if block.open.is_some_and(|o| same_line(o + 1)) && plan.header.is_none() => {
            plan.header = Some(k);
            return;
        }
        _ => {}
    }
    match slots.iter().position(|(s, _)| s.start > at) {
        Some(n) => plan.slots[n].leading.push(k),
        None => plan.dangling.push(k),
    }
}

/// The `///` comments that document the node starting at `start`, as the parser attaches them:
/// a run of doc lines, each on the line right above the next.
fn doc_lines(src: &str, comments: &[Comment], start: u32) -> Vec<usize> {
    let end = comments.partition_point(|c| c.span.start < start);
    let mut run = Vec::new();
    let mut next = start as usize;
    for k in (0..end).rev() {
        let c = &comments[k];
        let gap = src.get(c.span.end as usize..next).unwrap_or("x");
        let adjacent = gap.chars().all(char::is_whitespace) && gap.matches('\n').count() == 1;
        if !c.doc || !adjacent {
            break;
        }
        run.push(k);
        next = c.span.start as usize;
    }
    run.reverse();
    run
}

/// The offset of `want`, the delimiter that opens a block, at or after `from` past white space
/// and comments (`from` itself when it is not there, which a parsed file rules out).
fn open_at(src: &str, from: u32, want: char) -> u32 {
    let mut at = from as usize;
    let mut rest = src.get(at..).unwrap_or("");
    loop {
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if let Some(comment) = trimmed.strip_prefix("//") {
            let skip = 2 + comment.find('\n').unwrap_or(comment.len());
            at += skip;
            rest = &trimmed[skip..];
            continue;
        }
        return if trimmed.starts_with(want) {
            at as u32
        } else {
            from
        };
    }
}

fn documented(member: &Member) -> bool {
    matches!(
        member,
        Member::Input(_) | Member::Secret(_) | Member::Env(_) | Member::Step(_)
    )
}

fn entry_span(entry: &ToolEntry) -> Span {
    match entry {
        ToolEntry::Field(f) => f.span,
        ToolEntry::Schema(s) => s.span,
        ToolEntry::Error(s) => *s,
    }
}

/// Finds every block of a file, in the order the printer meets them.
struct Collector<'a> {
    src: &'a str,
    blocks: Vec<Block>,
}

impl Collector<'_> {
    fn push(&mut self, open: Option<u32>, end: u32, slots: impl Iterator<Item = (Span, bool)>) {
        let inside = match open {
            Some(o) => Span {
                start: o + 1,
                end: end.saturating_sub(1),
            },
            None => Span { start: 0, end },
        };
        self.blocks.push(Block {
            open,
            inside,
            slots: slots.collect(),
        });
    }

    fn file(&mut self, file: &File) {
        let end = self.src.len() as u32;
        self.push(None, end, file.items.iter().map(|i| (i.span(), true)));
        for item in &file.items {
            match item {
                Item::Flow(flow) => {
                    let open = open_at(self.src, flow.name.span.end, '{');
                    let slots = flow.members.iter().map(|m| (m.span(), documented(m)));
                    self.push(Some(open), flow.span.end, slots);
                    for member in &flow.members {
                        self.member(member);
                    }
                }
                Item::Tool(tool) => {
                    let open = open_at(self.src, tool.name.span.end, '{');
                    let slots = tool.entries.iter().map(|e| (entry_span(e), false));
                    self.push(Some(open), tool.span.end, slots);
                    for entry in &tool.entries {
                        match entry {
                            ToolEntry::Field(f) => self.expr(&f.value),
                            ToolEntry::Schema(s) => {
                                let open = open_at(self.src, s.keyword_span.end, '{');
                                self.type_fields(open, s.span.end, &s.fields);
                            }
                            ToolEntry::Error(_) => {}
                        }
                    }
                }
            }
        }
    }

    fn member(&mut self, member: &Member) {
        match member {
            Member::Input(input) => {
                self.ty(&input.ty);
                if let Some(default) = &input.default {
                    self.expr(default);
                }
            }
            Member::Step(step) => match &step.body {
                StepBody::Call(call) => {
                    let slots = call.args.iter().map(|f| (f.span, false));
                    self.push(Some(call.block_span.start), call.block_span.end, slots);
                    for arg in &call.args {
                        self.expr(&arg.value);
                    }
                }
                StepBody::Expr(e) => self.expr(e),
            },
            Member::Output(output) => self.expr(&output.expr),
            Member::Secret(_) | Member::Env(_) | Member::Error(_) => {}
        }
    }

    fn type_fields(&mut self, open: u32, end: u32, fields: &[TypeField]) {
        self.push(Some(open), end, fields.iter().map(|f| (f.span, false)));
        for field in fields {
            self.ty(&field.ty);
        }
    }

    fn ty(&mut self, ty: &TypeExpr) {
        match &ty.kind {
            TypeExprKind::List(inner) | TypeExprKind::Optional(inner) => self.ty(inner),
            TypeExprKind::Record(fields) => self.type_fields(ty.span.start, ty.span.end, fields),
            TypeExprKind::Named(_) | TypeExprKind::Error => {}
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::List(items) => {
                let slots = items.iter().map(|x| (x.span, false));
                self.push(Some(e.span.start), e.span.end, slots);
                for item in items {
                    self.expr(item);
                }
            }
            ExprKind::Record(fields) => {
                let slots = fields.iter().map(|f| (f.span, false));
                self.push(Some(e.span.start), e.span.end, slots);
                for field in fields {
                    self.expr(&field.value);
                }
            }
            ExprKind::Call { func, args } => {
                let open = open_at(self.src, func.span.end, '(');
                self.push(Some(open), e.span.end, args.iter().map(|x| (x.span, false)));
                for arg in args {
                    self.expr(arg);
                }
            }
            ExprKind::Str(parts) => {
                for part in parts {
                    if let StrPart::Interp(x) = part {
                        self.expr(x);
                    }
                }
            }
            ExprKind::Member { base, .. } => self.expr(base),
            ExprKind::Index { base, index } => {
                self.expr(base);
                self.expr(index);
            }
            ExprKind::Unary { expr, .. } | ExprKind::Paren(expr) => self.expr(expr),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond);
                self.expr(then);
                self.expr(otherwise);
            }
            ExprKind::Comprehension {
                iter, cond, body, ..
            } => {
                self.expr(iter);
                if let Some(cond) = cond {
                    self.expr(cond);
                }
                self.expr(body);
            }
            ExprKind::Int(_)
            | ExprKind::Float { .. }
            | ExprKind::Duration { .. }
            | ExprKind::Bool(_)
            | ExprKind::Null
            | ExprKind::Name(_)
            | ExprKind::Error => {}
        }
    }
}

/// Writes the canonical text of a file.
struct Printer<'a> {
    src: &'a str,
    comments: &'a [Comment],
    plan: &'a Plan,
    out: String,
    /// Indentation of the current block, in levels of two spaces.
    indent: usize,
    /// Whether the current line is still empty (its indentation not yet written).
    line_start: bool,
    /// Whether the last line written ends with a `///` comment.
    after_doc: bool,
    /// Whether this printer renders one line to measure it: every block inline, no line breaks.
    flat: bool,
    /// Whether a flat rendering met something that cannot be inline.
    failed: bool,
}

impl<'a> Printer<'a> {
    fn text(&mut self, s: &str) {
        if self.line_start {
            self.line_start = false;
            for _ in 0..self.indent {
                self.out.push_str("  ");
            }
        }
        self.out.push_str(s);
        self.after_doc = false;
    }

    /// Ends the current line, leaving an empty one after it when `blank`.
    fn line(&mut self, blank: bool) {
        if self.flat {
            self.failed = true;
            return;
        }
        if !self.out.is_empty() {
            self.out.push('\n');
            if blank {
                self.out.push('\n');
            }
        }
        self.line_start = true;
    }

    fn col(&self) -> usize {
        if self.line_start {
            return self.indent * 2;
        }
        self.out.rsplit('\n').next().unwrap_or("").chars().count()
    }

    fn comment(&mut self, k: usize) {
        let comments: &'a [Comment] = self.comments;
        let Some(c) = comments.get(k) else { return };
        if self.flat {
            self.failed = true;
        }
        self.text(&comment_text(c));
        self.after_doc = c.doc;
    }

    fn start_of(&self, k: usize) -> u32 {
        self.comments.get(k).map_or(0, |c| c.span.start)
    }

    fn end_of(&self, k: usize) -> u32 {
        self.comments.get(k).map_or(0, |c| c.span.end)
    }

    /// Whether the source has an empty line between `from` and `to`.
    fn gap_blank(&self, from: u32, to: u32) -> bool {
        self.src
            .get(from as usize..to as usize)
            .is_some_and(|gap| gap.matches('\n').count() >= 2)
    }

    fn has_comment(&self, span: Span) -> bool {
        let i = self.comments.partition_point(|c| c.span.start < span.start);
        self.comments
            .get(i)
            .is_some_and(|c| c.span.start < span.end)
    }

    /// Whether the source of `span` is on one line with no comment.
    fn one_line(&self, span: Span) -> bool {
        self.src
            .get(span.range())
            .is_some_and(|s| !s.contains('\n'))
            && !self.has_comment(span)
    }

    fn verbatim(&mut self, span: Span) {
        let src: &'a str = self.src;
        self.text(src.get(span.range()).unwrap_or(""));
    }

    /// Prints `inline` when `eligible` and it fits on the current line, else `broken`.
    fn choose(
        &mut self,
        eligible: bool,
        inline: impl Fn(&mut Self),
        broken: impl FnOnce(&mut Self),
    ) {
        if self.flat {
            self.failed |= !eligible;
            inline(self);
            return;
        }
        if eligible {
            let mut flat = Printer {
                src: self.src,
                comments: self.comments,
                plan: self.plan,
                out: String::new(),
                indent: 0,
                line_start: false,
                after_doc: false,
                flat: true,
                failed: false,
            };
            inline(&mut flat);
            if !flat.failed && self.col() + flat.out.chars().count() <= WIDTH {
                self.text(&flat.out);
                return;
            }
        }
        broken(self);
    }

    fn commas<T>(&mut self, items: &[T], print: impl Fn(&mut Self, &T)) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.text(", ");
            }
            print(self, item);
        }
    }

    /// Prints a block one slot per line with its comments; `delims` is `None` for the file.
    fn block<T>(
        &mut self,
        open: Option<u32>,
        delims: Option<(&str, &str)>,
        comma: bool,
        items: &[T],
        span: impl Fn(&T) -> Span,
        print: impl Fn(&mut Self, &T),
    ) {
        let plan: &'a Plan = self.plan;
        let comments = plan.blocks.get(&open).unwrap_or(&NO_BLOCK);
        let nested = delims.is_some();
        if let Some((open, _)) = delims {
            self.text(open);
        }
        if items.is_empty() && comments.header.is_none() && comments.dangling.is_empty() {
            if let Some((_, close)) = delims {
                self.text(close);
            }
            return;
        }
        if let Some(k) = comments.header {
            self.text(" ");
            self.comment(k);
        }
        if nested {
            self.indent += 1;
        }
        let mut prev_end = None;
        for (i, item) in items.iter().enumerate() {
            let slot = comments.slots.get(i).unwrap_or(&NO_SLOT);
            let span = span(item);
            let first = slot
                .leading
                .first()
                .or(slot.doc.first())
                .map_or(span.start, |&k| self.start_of(k));
            // Declarations are always apart; other slots keep one empty line where the author left any.
            let mut blank = prev_end.is_some_and(|end| !nested || self.gap_blank(end, first));
            let mut last_leading = None;
            for &k in &slot.leading {
                if let Some(end) = last_leading {
                    blank = self.gap_blank(end, self.start_of(k));
                }
                self.line(blank);
                self.comment(k);
                blank = false;
                last_leading = Some(self.end_of(k));
            }
            if let Some(end) = last_leading {
                let next = slot.doc.first().map_or(span.start, |&k| self.start_of(k));
                blank = self.gap_blank(end, next);
            }
            for &k in &slot.hoisted {
                self.line(blank);
                self.comment(k);
                blank = false;
            }
            // A `///` line right above would become this slot's doc comment: keep them apart.
            if slot.documented && self.after_doc {
                blank = true;
            }
            for &k in &slot.doc {
                self.line(blank);
                self.comment(k);
                blank = false;
            }
            self.line(blank);
            print(self, item);
            if comma || ends_with_joining_word(&self.out) {
                self.text(",");
            }
            if let Some(k) = slot.trailing {
                self.text(" ");
                self.comment(k);
            }
            prev_end = Some(span.end);
        }
        let mut last = prev_end;
        for (n, &k) in comments.dangling.iter().enumerate() {
            let start = self.start_of(k);
            let blank = last.is_some_and(|end| (!nested && n == 0) || self.gap_blank(end, start));
            self.line(blank);
            self.comment(k);
            last = Some(self.end_of(k));
        }
        if nested {
            self.indent -= 1;
        }
        if let Some((_, close)) = delims {
            self.line(false);
            self.text(close);
        }
    }

    fn file(&mut self, file: &File) {
        self.block(None, None, false, &file.items, Item::span, Self::item);
    }

    fn item(&mut self, item: &Item) {
        match item {
            Item::Flow(flow) => {
                self.text("flow ");
                self.text(&flow.name.name);
                self.text(" ");
                let open = open_at(self.src, flow.name.span.end, '{');
                self.block(
                    Some(open),
                    BRACES,
                    false,
                    &flow.members,
                    Member::span,
                    Self::member,
                );
            }
            Item::Tool(tool) => {
                self.text("tool ");
                self.text(&tool.name.name);
                self.text(" ");
                let open = open_at(self.src, tool.name.span.end, '{');
                self.block(
                    Some(open),
                    BRACES,
                    false,
                    &tool.entries,
                    entry_span,
                    Self::tool_entry,
                );
            }
        }
    }

    fn member(&mut self, member: &Member) {
        match member {
            Member::Input(input) => {
                self.text("input ");
                self.text(&input.name.name);
                self.text(": ");
                self.ty(&input.ty);
                if let Some(default) = &input.default {
                    self.text(" = ");
                    self.expr(default);
                }
            }
            Member::Secret(decl) => {
                self.text("secret ");
                self.text(&decl.name.name);
            }
            Member::Env(decl) => {
                self.text("env ");
                self.text(&decl.name.name);
            }
            Member::Step(step) => {
                self.text("step ");
                self.text(&step.name.name);
                self.text(" = ");
                match &step.body {
                    StepBody::Call(call) => {
                        self.text(&call.tool.name);
                        self.text(" ");
                        self.block(
                            Some(call.block_span.start),
                            BRACES,
                            false,
                            &call.args,
                            |f| f.span,
                            Self::field,
                        );
                    }
                    StepBody::Expr(e) => self.expr(e),
                }
            }
            Member::Output(output) => {
                self.text("output ");
                self.expr(&output.expr);
            }
            Member::Error(span) => self.verbatim(*span),
        }
    }

    fn tool_entry(&mut self, entry: &ToolEntry) {
        match entry {
            ToolEntry::Field(field) => self.field(field),
            ToolEntry::Schema(schema) => self.schema(schema),
            ToolEntry::Error(span) => self.verbatim(*span),
        }
    }

    fn schema(&mut self, schema: &Schema) {
        self.text(match schema.side {
            SchemaSide::Input => "input ",
            SchemaSide::Output => "output ",
        });
        let open = open_at(self.src, schema.keyword_span.end, '{');
        let span = Span {
            start: open,
            end: schema.span.end,
        };
        self.type_fields(span, &schema.fields);
    }

    /// A record type or schema: inline when it fits and holds no comment, however it was written.
    fn type_fields(&mut self, span: Span, fields: &[TypeField]) {
        let eligible = !self.has_comment(span);
        self.choose(
            eligible,
            |p| {
                if fields.is_empty() {
                    p.text("{}");
                } else {
                    p.text("{ ");
                    p.commas(fields, Self::type_field);
                    p.text(" }");
                }
            },
            |p| {
                p.block(
                    Some(span.start),
                    BRACES,
                    false,
                    fields,
                    |f| f.span,
                    Self::type_field,
                )
            },
        );
    }

    fn type_field(&mut self, field: &TypeField) {
        self.key(&field.key);
        self.text(": ");
        self.ty(&field.ty);
    }

    fn ty(&mut self, ty: &TypeExpr) {
        match &ty.kind {
            TypeExprKind::Named(name) => self.text(name),
            TypeExprKind::List(inner) => {
                self.text("list<");
                self.ty(inner);
                self.text(">");
            }
            TypeExprKind::Record(fields) => self.type_fields(ty.span, fields),
            TypeExprKind::Optional(inner) => {
                self.ty(inner);
                // `??` is one token (the coalescing operator), so a doubled `?` needs a space.
                if self.out.ends_with('?') {
                    self.text(" ");
                }
                self.text("?");
            }
            TypeExprKind::Error => self.verbatim(ty.span),
        }
    }

    fn field(&mut self, field: &Field) {
        self.key(&field.key);
        self.text(": ");
        self.expr(&field.value);
    }

    fn key(&mut self, key: &Key) {
        if is_word(&key.name) {
            self.text(&key.name);
        } else {
            self.text(&format!("\"{}\"", escape(&key.name)));
        }
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Int(n) => self.text(&n.to_string()),
            ExprKind::Float { text, .. } | ExprKind::Duration { text, .. } => self.text(text),
            ExprKind::Str(parts) => {
                self.text("\"");
                for part in parts {
                    match part {
                        StrPart::Text(text) => self.text(&escape(text)),
                        StrPart::Interp(x) => {
                            self.text("${");
                            self.expr(x);
                            self.text("}");
                        }
                    }
                }
                self.text("\"");
            }
            ExprKind::Bool(b) => self.text(if *b { "true" } else { "false" }),
            ExprKind::Null => self.text("null"),
            ExprKind::List(items) => {
                let eligible = self.one_line(e.span);
                self.choose(
                    eligible,
                    |p| {
                        p.text("[");
                        p.commas(items, Self::expr);
                        p.text("]");
                    },
                    |p| {
                        p.block(
                            Some(e.span.start),
                            BRACKETS,
                            true,
                            items,
                            |x| x.span,
                            Self::expr,
                        )
                    },
                );
            }
            ExprKind::Record(fields) => {
                let eligible = self.one_line(e.span);
                self.choose(
                    eligible,
                    |p| {
                        if fields.is_empty() {
                            p.text("{}");
                        } else {
                            p.text("{ ");
                            p.commas(fields, Self::field);
                            p.text(" }");
                        }
                    },
                    |p| {
                        p.block(
                            Some(e.span.start),
                            BRACES,
                            false,
                            fields,
                            |f| f.span,
                            Self::field,
                        )
                    },
                );
            }
            ExprKind::Name(name) => self.text(&name.name),
            ExprKind::Member {
                base,
                name,
                optional,
            } => {
                self.expr(base);
                self.text(if *optional { "?." } else { "." });
                self.text(&name.name);
            }
            ExprKind::Index { base, index } => {
                self.expr(base);
                self.text("[");
                self.expr(index);
                self.text("]");
            }
            ExprKind::Call { func, args } => self.call(e.span, func, args),
            ExprKind::Unary { op, expr } => {
                self.text(op.as_str());
                self.expr(expr);
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                self.expr(lhs);
                self.text(" ");
                self.text(op.as_str());
                self.text(" ");
                self.expr(rhs);
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.text("if ");
                self.expr(cond);
                self.text(" then ");
                self.expr(then);
                self.text(" else ");
                self.expr(otherwise);
            }
            ExprKind::Comprehension {
                var,
                iter,
                cond,
                body,
            } => {
                self.text("[for ");
                self.text(&var.name);
                self.text(" in ");
                self.expr(iter);
                if let Some(cond) = cond {
                    self.text(" if ");
                    self.expr(cond);
                }
                self.text(": ");
                self.expr(body);
                self.text("]");
            }
            ExprKind::Paren(inner) => {
                self.text("(");
                self.expr(inner);
                self.text(")");
            }
            ExprKind::Error => self.verbatim(e.span),
        }
    }

    /// A call stays on one line unless comments sit among its arguments.
    fn call(&mut self, span: Span, func: &Ident, args: &[Expr]) {
        self.text(&func.name);
        let open = open_at(self.src, func.span.end, '(');
        let inside = Span {
            start: open,
            end: span.end,
        };
        if self.has_comment(inside) {
            self.block(Some(open), PARENS, true, args, |x| x.span, Self::expr);
        } else {
            self.text("(");
            self.commas(args, Self::expr);
            self.text(")");
        }
    }
}

/// Whether the text ends with `if`, `then`, `else`, `for` or `in` as a word of its own (a type
/// named so): the lexer joins the next line to such a word, so the entry needs a comma to end.
fn ends_with_joining_word(out: &str) -> bool {
    ["if", "then", "else", "for", "in"].iter().any(|word| {
        out.strip_suffix(word).is_some_and(|rest| {
            !rest.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
        })
    })
}

/// The canonical text of a comment: its marker, one space and its text.
fn comment_text(c: &Comment) -> String {
    let marker = if c.doc { "///" } else { "//" };
    if c.text.is_empty() {
        marker.to_string()
    } else if !c.doc && c.text.starts_with("//") {
        // `////` stays as written: with a space it would still read back the same, but look different.
        format!("//{}", c.text)
    } else {
        format!("{marker} {}", c.text)
    }
}

/// Whether `name` is written as a bare word (keywords included), so a key needs no quotes.
fn is_word(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// String text with the canonical escapes: `\"`, `\\`, `\n`, `\t`, and `\$` only before `{`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '$' if chars.peek() == Some(&'{') => out.push_str("\\$"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;

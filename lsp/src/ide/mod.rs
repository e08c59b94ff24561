//! The editor features, one module each, over a read-only view of one file in the database.
//!
//! Each feature is a plain function of a [`Ctx`] and a byte offset; the server converts between
//! LSP positions and offsets (`position.rs`) and runs these on a database snapshot.

pub mod completion;
pub mod edits;
pub mod hover;
pub mod names;
pub mod outline;
pub mod pieces;
pub mod signature;
pub mod tokens;

use reel_compiler::contracts::{Contract, builtin_contract};
use reel_compiler::queries::{FlowId, StepId, line_index, step_type, user_tools};
use reel_compiler::queries::{FlowLayout, file_layout, file_syntax};
use reel_compiler::{Db, SourceFile, file_flows};
use reel_flowspec::Type;
use reel_syntax::Parsed;
use reel_syntax::outline::ItemKind;

use crate::position::Lines;

/// One file as the features see it: the database, the file and its text, parse and lines.
pub struct Ctx<'a> {
    /// The database snapshot.
    pub db: &'a dyn Db,
    /// The file.
    pub file: SourceFile,
    /// Its text.
    pub text: &'a str,
    /// Offset ⇄ position conversion for its text.
    pub lines: Lines<'a>,
}

impl<'a> Ctx<'a> {
    /// The view of `file` in `db`.
    pub fn new(db: &'a dyn Db, file: SourceFile) -> Self {
        let text: &str = file.text(db);
        Ctx {
            db,
            file,
            text,
            lines: Lines::indexed(text, line_index(db, file)),
        }
    }

    /// Its syntax tree (absolute spans), assembled from the pieces the checker parsed (a copy,
    /// never a parse of the whole file; once per revision, shared by its requests). Without
    /// comments (the semantic tokens have them). Whole-file answers do not read it: they
    /// assemble results kept per segment ([`pieces`]), and [`Ctx::flows`] gives the layout.
    pub fn parsed(&self) -> &'a Parsed {
        file_syntax(self.db, self.file)
    }

    /// The file's flows as laid out, each with its item index: their names, spans and members
    /// without the whole tree [`Ctx::parsed`] assembles.
    pub fn flows(&self) -> impl Iterator<Item = (usize, &'a FlowLayout)> + use<'a> {
        let layout = file_layout(self.db, self.file);
        layout
            .order
            .iter()
            .enumerate()
            .filter(|(_, (kind, _))| matches!(kind, ItemKind::Flow))
            .map(move |(idx, &(_, i))| (idx, &layout.flows[i]))
    }

    /// The interned flow of the file's item `idx` (by name: the first flow of that name).
    pub fn flow_id(&self, idx: usize) -> Option<FlowId<'a>> {
        let (_, f) = self.flows().find(|(i, _)| *i == idx)?;
        file_flows(self.db, self.file)
            .iter()
            .copied()
            .find(|id| *id.name(self.db) == f.name)
    }

    /// The inferred type of step `name` of flow `idx`.
    pub fn step_type(&self, idx: usize, name: &str) -> Option<Type> {
        let flow = self.flow_id(idx)?;
        Some(step_type(self.db, StepId::new(self.db, flow, name.to_string())).clone())
    }

    /// The contract of tool `name`: a tool declared in the file, else a built-in.
    pub fn contract(&self, name: &str) -> Option<Contract> {
        user_tools(self.db, self.file)
            .get(name)
            .map(|t| t.contract.clone())
            .or_else(|| builtin_contract(name).cloned())
    }
}

//! Reel's syntax: lexer, parser, syntax tree and formatter. Knows nothing of salsa, types or LSP.

pub mod ast;
pub mod codes;
pub mod diagnostic;
mod docs;
pub mod format;
pub mod lexer;
pub mod nesting;
pub mod outline;
pub mod parser;
pub mod span;
pub mod token;
pub mod visit;

pub use codes::Code;
pub use diagnostic::{Diagnostic, Label, Severity};
pub use parser::{ChunkEnd, GroupParse, Parsed, parse, parse_group};
pub use span::{LineCol, LineIndex, Span};

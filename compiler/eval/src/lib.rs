//! The one evaluator of Reel expressions, shared by runtime, language server and compiler.
//!
//! [`eval()`] gives an expression's value in a [`Scope`]; [`eval_const`] folds constants;
//! [`check_value`] checks a value against a type; [`builtins()`] is the single table of builtin
//! functions, with the typing rules the checker applies and the implementations evaluation runs.

pub mod builtins;
pub mod error;
pub mod eval;
pub mod render;
pub mod scope;
pub mod value_check;
pub mod values;

#[cfg(test)]
mod test_exprs;

pub use builtins::{ArgTypeError, Builtin, CallTypeError, builtin, builtins};
pub use error::{EvalError, codes};
pub use eval::{eval, eval_const, is_constant};
pub use render::to_source;
pub use scope::{MapScope, Scope};
pub use value_check::{Mismatch, check_value};

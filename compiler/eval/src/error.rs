//! The evaluator's error: a stable code for machines and a sentence for people.

/// Stable error codes; runtime journals and editors key on them, so never change one.
pub mod codes {
    /// An operand or argument has the wrong kind of value.
    pub const TYPE: &str = "eval.type";
    /// A field was read of null without `?.`, or null was iterated or indexed.
    pub const NULL: &str = "eval.null";
    /// A list index is negative or past the end.
    pub const INDEX: &str = "eval.index";
    /// An integer result left the 64-bit range, or a float result is not finite.
    pub const OVERFLOW: &str = "eval.overflow";
    /// `/` or `%` by zero.
    pub const DIVISION_BY_ZERO: &str = "eval.division-by-zero";
    /// Text that should hold JSON or a number does not.
    pub const PARSE: &str = "eval.parse";
    /// A constant expression refers to something only a run knows.
    pub const NOT_CONSTANT: &str = "eval.not-constant";
    /// A name (input, env, step, variable, builtin) the scope does not know.
    pub const UNKNOWN: &str = "eval.unknown";
    /// A secret reached an expression; secrets are only ever whole parameter values.
    pub const SECRET: &str = "eval.secret";
    /// A builtin got too few or too many arguments.
    pub const ARITY: &str = "eval.arity";
    /// An expression nested deeper than the evaluator goes.
    pub const DEPTH: &str = "eval.depth";
    /// A `range` that is too long or has a zero step.
    pub const RANGE: &str = "eval.range";
    /// An expression made more values than one evaluation may (see `eval::MAX_MADE`).
    pub const LIMIT: &str = "eval.limit";
}

/// Why an expression could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalError {
    /// One of [`codes`].
    pub code: &'static str,
    /// What went wrong, in words, naming the value found.
    pub message: String,
}

impl EvalError {
    /// An error with this code and message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        EvalError {
            code,
            message: message.into(),
        }
    }

    /// An `eval.type` error.
    pub fn type_error(message: impl Into<String>) -> Self {
        EvalError::new(codes::TYPE, message)
    }
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for EvalError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_code_then_message() {
        let e = EvalError::type_error("`!` expects a bool, found 1");
        assert_eq!(e.to_string(), "eval.type: `!` expects a bool, found 1");
    }
}

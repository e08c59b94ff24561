//! The catalogue of diagnostic codes: every code the compiler emits, its severity and its
//! documentation. Codes are a contract with users' scripts and CI (they key on them), so they live
//! in one typed table instead of string literals at each place that reports a problem, and
//! `docs/diagnostics.md` is generated from this table (`compiler/check/src/tests/docs.rs`).
//!
//! The documentation of a code is `codes/CODE.md` beside this file: what it means, a minimal flow
//! that triggers it, the message, and the fix.

use std::fmt;

use crate::diagnostic::Severity;

/// Declares [`Code`] from one line per code: `Variant = "code", Severity;`.
macro_rules! catalogue {
    ($( $(#[$attr:meta])* $variant:ident = $code:literal, $severity:ident; )*) => {
        /// A diagnostic code: stable, documented in `docs/diagnostics.md`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code {
            $( $(#[$attr])* $variant, )*
        }

        impl Code {
            /// Every code, in the order `docs/diagnostics.md` lists them.
            pub const ALL: &'static [Code] = &[$( Code::$variant, )*];

            /// The code as users see it, such as `name.unknown-step`.
            pub const fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $code, )* }
            }

            /// Error (the flow does not build) or warning.
            pub const fn severity(self) -> Severity {
                match self { $( Code::$variant => Severity::$severity, )* }
            }

            /// The documentation of the code (markdown): meaning, an example, the message, the fix.
            pub const fn doc(self) -> &'static str {
                match self { $( Code::$variant => include_str!(concat!("codes/", $code, ".md")), )* }
            }
        }
    };
}

catalogue! {
    // `syntax.`: lexing and parsing
    /// The parser found a token where the grammar does not allow it.
    SyntaxUnexpectedToken = "syntax.unexpected-token", Error;
    /// A `{`, `[`, `(`, `${` or `"` is never closed.
    SyntaxUnclosedDelimiter = "syntax.unclosed-delimiter", Error;
    /// A `}`, `]` or `)` closes nothing.
    SyntaxUnmatchedDelimiter = "syntax.unmatched-delimiter", Error;
    /// A string is not closed before the end of its line.
    SyntaxUnterminatedString = "syntax.unterminated-string", Error;
    /// A backslash escape other than `\"`, `\\`, `\n`, `\t`, `\$`.
    SyntaxInvalidEscape = "syntax.invalid-escape", Error;
    /// A character that is not part of the language.
    SyntaxUnexpectedCharacter = "syntax.unexpected-character", Error;
    /// A number followed by letters that are not a duration unit, or a duration with a fraction.
    SyntaxInvalidDuration = "syntax.invalid-duration", Error;
    /// An integer literal that does not fit in a signed 64-bit integer.
    SyntaxInvalidNumber = "syntax.invalid-number", Error;
    /// An expression, type or entry nested deeper than the nesting limit.
    SyntaxTooDeep = "syntax.too-deep", Error;
    // `name.`: names
    /// A bare name that is not a step of the flow or a comprehension variable.
    NameUnknown = "name.unknown", Error;
    /// `input.X` where the flow declares no input `X`.
    NameUnknownInput = "name.unknown-input", Error;
    /// `env.X` where the flow does not declare `env X`.
    NameUnknownEnv = "name.unknown-env", Error;
    /// `secret.X` where the flow does not declare `secret X`.
    NameUnknownSecret = "name.unknown-secret", Error;
    /// A name in an `after` list that is not a step of the flow.
    NameUnknownStep = "name.unknown-step", Error;
    /// A step calls a tool that is neither built in nor declared (and checked clean) in the file.
    NameUnknownTool = "name.unknown-tool", Error;
    /// A call of a function that is not a builtin.
    NameUnknownFunction = "name.unknown-function", Error;
    /// `input`, `env` or `secret` used as a value on its own.
    NameBareNamespace = "name.bare-namespace", Error;
    /// `item` or `index` outside the arguments of a `foreach` step, or in its `when` (evaluated once, before the fan-out).
    NameItemOutsideForeach = "name.item-outside-foreach", Error;
    /// A name declared twice.
    NameDuplicate = "name.duplicate", Error;
    /// A key given twice in a step's block.
    NameDuplicateArgument = "name.duplicate-argument", Error;
    /// A key given twice in a record expression, or a field declared twice in a record type or a tool's `input`/`output` schema.
    NameDuplicateField = "name.duplicate-field", Error;
    /// A step named `item` or `index`, names that already mean something in expressions.
    NameReserved = "name.reserved", Error;
    /// A `tool` declaration takes the name of a built-in tool.
    NameBuiltinTool = "name.builtin-tool", Error;
    // `type.`: types
    /// A type name that is not a type, or `list` without its element type.
    TypeUnknown = "type.unknown", Error;
    /// A value of one type where another is needed.
    TypeMismatch = "type.mismatch", Error;
    /// A value that may be null (`T?`) where a value is needed.
    TypeOptional = "type.optional", Error;
    /// `.field` or `[i]` on a value that may be null.
    TypeOptionalAccess = "type.optional-access", Error;
    /// A record has no field of that name.
    TypeUnknownField = "type.unknown-field", Error;
    /// `.field` on a value that is not a record or `json` (an `int`, a list, `null`).
    TypeNoFields = "type.no-fields", Error;
    /// Indexing something that is not a list, a record or `json`.
    TypeIndex = "type.index", Error;
    /// A binary operator given operand types it does not take.
    TypeOperator = "type.operator", Error;
    /// A builtin function's argument has the wrong type.
    TypeArgument = "type.argument", Error;
    /// An input declared with the type `secret`.
    TypeSecretInput = "type.secret-input", Error;
    /// A tool's result type holds a secret (results are recorded), or a tool parameter holds a secret inside a record or list (a secret can only be a whole parameter).
    TypeSecretNested = "type.secret-nested", Error;
    // `taint.`: secrets
    /// `secret.X` anywhere but as the whole value of a tool parameter of type `secret`.
    TaintSecretInExpression = "taint.secret-in-expression", Error;
    // `tool.`: tool calls and tool declarations
    /// A call leaves out a required parameter (one whose type is not optional), or gives neither of two arguments of which one is needed (`for` or `until` of `sleep`).
    ToolMissingArgument = "tool.missing-argument", Error;
    /// An argument the tool does not declare (and that is not a meta-argument).
    ToolUnknownArgument = "tool.unknown-argument", Error;
    /// Two arguments that exclude each other.
    ToolConflictingArguments = "tool.conflicting-arguments", Error;
    /// A `tool` declaration without `kind`.
    ToolMissingKind = "tool.missing-kind", Error;
    /// A `tool` declaration without `exec`.
    ToolMissingExec = "tool.missing-exec", Error;
    /// `kind` is not the string literal `"pure"`, `"read"` or `"effect"`.
    ToolInvalidKind = "tool.invalid-kind", Error;
    /// `exec` is not a non-empty list of plain string literals (no interpolation).
    ToolInvalidExec = "tool.invalid-exec", Error;
    /// `repeat` is not the string literal `"never"` or `"with-key"`, or is given on a tool whose `kind` is not `"effect"`.
    ToolInvalidRepeat = "tool.invalid-repeat", Error;
    /// `input` or `output` written as a value (`input.
    ToolInvalidSchema = "tool.invalid-schema", Error;
    /// A `tool` declaration has an entry other than `kind`, `exec`, `repeat`, `input { … }` and `output { … }`.
    ToolUnknownEntry = "tool.unknown-entry", Error;
    /// A `tool` declaration gives the same entry twice.
    ToolDuplicateEntry = "tool.duplicate-entry", Error;
    /// A user tool declares an input parameter named after a meta-argument (`when`, `foreach`, `concurrency`, `after`, `retry`, `timeout`), which belong to the engine.
    ToolReservedParameter = "tool.reserved-parameter", Error;
    // `meta.`: meta-arguments
    /// `concurrency` is not an int literal from 1 to 10000.
    MetaConcurrency = "meta.concurrency", Error;
    /// `after` is not a list literal, or one of its elements is not a bare step name.
    MetaAfter = "meta.after", Error;
    /// `retry` is not a record of literals with the settings `max` (int 1..=1000), `backoff` (`"exp"` or `"fixed"`), `base` (a duration literal) and `jitter` (`true` or `false`).
    MetaRetry = "meta.retry", Error;
    /// `timeout` is not a positive duration literal, or `base` of `retry` is not a duration literal.
    MetaDuration = "meta.duration", Error;
    // `dag.`: the step graph
    /// Steps depend on each other in a circle (through references or `after`), or a step refers to its own value.
    DagCycle = "dag.cycle", Error;
    /// A step lists itself in `after`.
    DagSelfDependency = "dag.self-dependency", Error;
    // `flow.`: a flow's structure
    /// A flow has more than one `output`.
    FlowDuplicateOutput = "flow.duplicate-output", Error;
    // `input.`: input defaults
    /// An input's default reads something only a run knows.
    InputDefaultNotConstant = "input.default-not-constant", Error;
    /// An input's default is constant and well typed, but fails when evaluated.
    InputDefaultInvalid = "input.default-invalid", Error;
    // `call.`: builtin calls
    /// A builtin called with too few or too many arguments.
    CallArity = "call.arity", Error;
    // `lint.`: warnings
    /// An input is never read.
    LintUnusedInput = "lint.unused-input", Warning;
    /// A secret is never passed to a tool.
    LintUnusedSecret = "lint.unused-secret", Warning;
    /// An allow-listed environment variable is never read.
    LintUnusedEnv = "lint.unused-env", Warning;
    /// Nothing refers to a step (in an expression or an `after` list) and it has no effect.
    LintUnusedStep = "lint.unused-step", Warning;
    /// A `when` that depends on nothing the run knows.
    LintConstantWhen = "lint.constant-when", Warning;
    /// `concurrency` on a step without `foreach`, which makes one call.
    LintConcurrencyWithoutForeach = "lint.concurrency-without-foreach", Warning;
    /// The left side of `??` is never null, so the default is never used.
    LintNeedlessCoalesce = "lint.needless-coalesce", Warning;
    /// A type written with two optional marks.
    LintDoubleOptional = "lint.double-optional", Warning;
}

impl Code {
    /// The code with this text, if there is one.
    pub fn parse(text: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == text)
    }

    /// The group of the code (its prefix, such as `name`).
    pub fn group(self) -> &'static Group {
        let prefix = self.as_str().split('.').next().unwrap_or_default();
        GROUPS
            .iter()
            .find(|g| g.prefix == prefix)
            .expect("every code's prefix is a group (a test checks it)")
    }
}

/// Compares with a code's text, as scripts and tests that read `reel check --format json` do.
impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Ordered by their text, so that sorting diagnostics or SARIF rules by code reads alphabetically.
impl Ord for Code {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Code {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A family of codes sharing a prefix, one section of `docs/diagnostics.md`.
#[derive(Debug)]
pub struct Group {
    /// The prefix, such as `type` (codes read `type.…`).
    pub prefix: &'static str,
    /// What the group covers, as the section's heading says it.
    pub title: &'static str,
    /// Markdown said once for the whole group, before its codes (may be empty).
    pub intro: &'static str,
}

/// The groups, in the order `docs/diagnostics.md` lists them.
pub const GROUPS: &[Group] = &[
    Group {
        prefix: "syntax",
        title: "lexing and parsing",
        intro: r#"A file with syntax errors is still checked as far as it parses: the broken
entry is skipped and the rest of the file gets its own diagnostics. One mistake
gives one error: an entry left unfinished at the end of its line (`step x =`,
`a +`) ends there when the next line starts a member or a `key:`; a step or an
input whose body or type is broken is still declared; and a name written in a
member that did not parse is not reported unknown where it is used.
"#,
    },
    Group {
        prefix: "name",
        title: "names",
        intro: "",
    },
    Group {
        prefix: "type",
        title: "types",
        intro: "",
    },
    Group {
        prefix: "taint",
        title: "secrets",
        intro: "",
    },
    Group {
        prefix: "tool",
        title: "tool calls and tool declarations",
        intro: "",
    },
    Group {
        prefix: "meta",
        title: "meta-arguments",
        intro: "",
    },
    Group {
        prefix: "dag",
        title: "the step graph",
        intro: "",
    },
    Group {
        prefix: "flow",
        title: "a flow's structure",
        intro: "",
    },
    Group {
        prefix: "input",
        title: "input defaults",
        intro: "",
    },
    Group {
        prefix: "call",
        title: "builtin calls",
        intro: "",
    },
    Group {
        prefix: "lint",
        title: "warnings",
        intro: r#"Warnings do not stop a flow from building. The four unused-name warnings are
**held back while the flow has errors**: a broken reference is often the very
use they would complain about.
"#,
    },
];

/// The opening of `docs/diagnostics.md`: what a diagnostic is and how to read one.
pub const PAGE_INTRO: &str = include_str!("codes/page.md");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_grouped_and_read_back() {
        let mut seen = std::collections::BTreeSet::new();
        for &code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert_eq!(Code::parse(code.as_str()), Some(code));
            assert!(
                code.as_str()
                    .starts_with(&format!("{}.", code.group().prefix))
            );
            // Only the `lint.` codes are warnings.
            assert_eq!(
                code.severity() == Severity::Warning,
                code.group().prefix == "lint",
                "{code}"
            );
            assert!(!code.doc().trim().is_empty(), "{code} has no documentation");
        }
        assert_eq!(Code::parse("syntax.unexpected-eof"), None);
    }
}

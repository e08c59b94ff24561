//! The neutral diagnostic: one value that the terminal renderer, JSON, SARIF and the language server all read.

use crate::codes::Code;
use crate::span::Span;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// The flow cannot be built.
    Error,
    /// The flow builds, but something is probably wrong.
    Warning,
}

impl Severity {
    /// The lowercase word used in JSON and SARIF output.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A place in the source with what it says about the diagnostic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label {
    /// The spanned text.
    pub span: Span,
    /// What this place has to do with the problem (may be empty).
    pub message: String,
}

impl Label {
    /// A label at `span` saying `message`.
    pub fn new(span: Span, message: impl Into<String>) -> Self {
        Label {
            span,
            message: message.into(),
        }
    }
}

/// A replacement of the text at `span` that fixes a diagnostic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fix {
    /// What the fix does, in words ("replace with `greeting`").
    pub title: String,
    /// The text to replace.
    pub span: Span,
    /// The new text.
    pub replacement: String,
}

/// One problem found in one file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    /// Stable code, such as `name.unknown-step`; documented in docs/diagnostics.md.
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// One sentence saying what is wrong.
    pub message: String,
    /// Where the problem is.
    pub primary: Label,
    /// Other places that explain it.
    pub secondary: Vec<Label>,
    /// How to fix it, when known.
    pub help: Option<String>,
    /// Further explanation.
    pub note: Option<String>,
    /// Machine-applicable fixes (code actions in the editor).
    pub fixes: Vec<Fix>,
}

impl Diagnostic {
    /// An error with `code` and `message`, its primary label at `span`.
    pub fn error(code: Code, span: Span, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, span, message)
    }

    /// A warning with `code` and `message`, its primary label at `span`.
    pub fn warning(code: Code, span: Span, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, span, message)
    }

    fn new(severity: Severity, code: Code, span: Span, message: impl Into<String>) -> Self {
        // The catalogue is the one place a code's severity is decided.
        debug_assert_eq!(
            severity,
            code.severity(),
            "{code} reported with another severity"
        );
        Diagnostic {
            code,
            severity,
            message: message.into(),
            primary: Label::new(span, ""),
            secondary: Vec::new(),
            help: None,
            note: None,
            fixes: Vec::new(),
        }
    }

    /// Sets the text of the primary label.
    pub fn with_label(mut self, message: impl Into<String>) -> Self {
        self.primary.message = message.into();
        self
    }

    /// Adds a secondary label.
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.secondary.push(Label::new(span, message));
        self
    }

    /// Sets the help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Sets the note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Adds a machine-applicable fix.
    pub fn with_fix(
        mut self,
        title: impl Into<String>,
        span: Span,
        replacement: impl Into<String>,
    ) -> Self {
        self.fixes.push(Fix {
            title: title.into(),
            span,
            replacement: replacement.into(),
        });
        self
    }

    /// The same diagnostic with every span moved `offset` bytes later (from text parsed alone to its file).
    pub fn shifted(&self, offset: u32) -> Diagnostic {
        let mut d = self.clone();
        let mv = |s: &mut Span| *s = s.shifted(offset);
        mv(&mut d.primary.span);
        d.secondary.iter_mut().for_each(|l| mv(&mut l.span));
        d.fixes.iter_mut().for_each(|f| mv(&mut f.span));
        d
    }

    /// Whether this is an error (as opposed to a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

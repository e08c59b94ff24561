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

/// The longest text of a diagnostic (its message, a label, its help or note) kept whole, in
/// bytes: past it, its start and end are kept and the middle left out.
const TEXT_MAX: usize = 1024;

/// `text` within [`TEXT_MAX`]. A message quotes the source (a name, a number) and a name of a
/// megabyte (a file that is not a flow) was quoted whole, in every report, JSON diagnostic and
/// editor hover that showed it.
fn bounded(text: String) -> String {
    if text.len() <= TEXT_MAX {
        return text;
    }
    let mut head = TEXT_MAX / 2 - 32;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (TEXT_MAX / 2 - 32);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let left_out = text[head..tail].chars().count();
    format!(
        "{}…[{left_out} characters left out]…{}",
        &text[..head],
        &text[tail..]
    )
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
            message: bounded(message.into()),
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
            message: bounded(message.into()),
            primary: Label::new(span, ""),
            secondary: Vec::new(),
            help: None,
            note: None,
            fixes: Vec::new(),
        }
    }

    /// Sets the text of the primary label.
    pub fn with_label(mut self, message: impl Into<String>) -> Self {
        self.primary.message = bounded(message.into());
        self
    }

    /// Adds a secondary label.
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.secondary.push(Label::new(span, message));
        self
    }

    /// Sets the help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(bounded(help.into()));
        self
    }

    /// Sets the note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(bounded(note.into()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_past_its_bound_keeps_its_start_and_end() {
        let short = "nothing called `greting`";
        let d = Diagnostic::error(Code::NameUnknown, Span::new(0, 1), short);
        assert_eq!(d.message, short);
        let name = "é".repeat(100_000);
        let d = Diagnostic::error(
            Code::NameUnknown,
            Span::new(0, 1),
            format!("nothing called `{name}`"),
        )
        .with_label(format!("`{name}` is not declared"))
        .with_help(name.clone())
        .with_note(name.clone())
        .with_secondary(Span::new(0, 1), name.clone());
        for text in [
            &d.message,
            &d.primary.message,
            d.help.as_ref().unwrap(),
            d.note.as_ref().unwrap(),
            &d.secondary[0].message,
        ] {
            assert!(text.len() <= TEXT_MAX, "{} bytes", text.len());
            assert!(text.contains("characters left out]…"), "{text}");
        }
        assert!(d.message.starts_with("nothing called `éé"));
        assert!(d.message.ends_with("éé`"));
    }
}

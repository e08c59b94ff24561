//! The compiler's diagnostics as LSP diagnostics: same code, severity and message as `reel check`;
//! secondary labels become related information, help and note are appended to the message.

use reel_syntax::{Diagnostic, Severity};
use tower_lsp_server::lsp_types::{
    self as lsp, DiagnosticRelatedInformation, DiagnosticSeverity, Location, NumberOrString, Uri,
};

use crate::position::Lines;

/// One compiler diagnostic for the editor.
pub fn to_lsp(d: &Diagnostic, lines: &Lines<'_>, uri: &Uri) -> lsp::Diagnostic {
    let mut message = d.message.clone();
    if !d.primary.message.is_empty() {
        message.push_str(&format!("\n{}", d.primary.message));
    }
    if let Some(help) = &d.help {
        message.push_str(&format!("\nhelp: {help}"));
    }
    if let Some(note) = &d.note {
        message.push_str(&format!("\nnote: {note}"));
    }
    let related: Vec<DiagnosticRelatedInformation> = d
        .secondary
        .iter()
        .map(|l| DiagnosticRelatedInformation {
            location: Location::new(uri.clone(), lines.range(l.span)),
            message: if l.message.is_empty() {
                "related".into()
            } else {
                l.message.clone()
            },
        })
        .collect();
    lsp::Diagnostic {
        range: lines.range(d.primary.span),
        severity: Some(match d.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(d.code.to_string())),
        source: Some("reel".into()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        ..Default::default()
    }
}

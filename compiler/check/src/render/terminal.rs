//! Diagnostics for people: ariadne reports with source excerpts, as the CLI prints them on stderr.

use ariadne::{Color, Config, IndexType, Label, Report, ReportKind, Source};
use reel_syntax::{Diagnostic, Severity};

use super::clamp;

/// The diagnostics of one file as text with source excerpts, one report after another.
///
/// `color` adds ANSI colors; without it the text is plain (Unicode box drawing is kept). A
/// summary line is left to the caller, which knows how many files were checked.
pub fn render_terminal(path: &str, text: &str, diags: &[Diagnostic], color: bool) -> String {
    let source = Source::from(text);
    let mut out = Vec::new();
    for diag in diags {
        if let Some(long) = longest_excerpt_line(text, diag).filter(|&n| n > EXCERPT_LINE_MAX) {
            out.extend_from_slice(plain(path, text, diag).as_bytes());
            out.extend_from_slice(
                format!("  = note: the line is {long} bytes long; its excerpt is left out\n")
                    .as_bytes(),
            );
            out.push(b'\n');
            continue;
        }
        let mut one = Vec::new();
        match report(path, text, diag, color).write((path, &source), &mut one) {
            Ok(()) => out.extend_from_slice(&one),
            // Writing to a Vec fails only when ariadne cannot find a span's line, which clamping
            // prevents; should it happen anyway, the plain one-line form still says what is wrong.
            Err(_) => out.extend_from_slice(plain(path, text, diag).as_bytes()),
        }
        // A blank line between reports, as rustc does, keeps each one readable on its own.
        out.push(b'\n');
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn report<'a>(
    path: &'a str,
    text: &str,
    diag: &Diagnostic,
    color: bool,
) -> Report<'a, (&'a str, std::ops::Range<usize>)> {
    let kind = match diag.severity {
        Severity::Error => ReportKind::Error,
        Severity::Warning => ReportKind::Warning,
    };
    let (main_color, other_color) = match diag.severity {
        Severity::Error => (Color::Red, Color::Blue),
        Severity::Warning => (Color::Yellow, Color::Blue),
    };
    let primary = clamp(text, diag.primary.span);
    let config = Config::new()
        .with_index_type(IndexType::Byte)
        .with_color(color);
    let mut builder = Report::build(kind, (path, primary.clone()))
        .with_config(config)
        .with_code(diag.code)
        .with_message(&diag.message);

    // ariadne draws neither underline nor arrow for a label without text, so an unlabelled primary
    // place repeats the message and an unlabelled secondary one says that it is related.
    let primary_text = if diag.primary.message.is_empty() {
        diag.message.as_str()
    } else {
        diag.primary.message.as_str()
    };
    let mut labels = vec![(primary, primary_text, main_color, 1)];
    for label in &diag.secondary {
        let text_of = if label.message.is_empty() {
            "related to this"
        } else {
            label.message.as_str()
        };
        labels.push((clamp(text, label.span), text_of, other_color, 0));
    }
    // ariadne starts a new excerpt, headed with the primary place, whenever a label lies on an
    // earlier line than the one before it; ordering by position keeps one excerpt per file.
    labels.sort_by_key(|(range, ..)| (range.start, range.end));
    for (order, (range, message, label_color, priority)) in labels.into_iter().enumerate() {
        let mut label = Label::new((path, range))
            .with_message(message)
            .with_order(order as i32)
            .with_priority(priority);
        if color {
            label = label.with_color(label_color);
        }
        builder = builder.with_label(label);
    }
    if let Some(help) = &diag.help {
        builder = builder.with_help(help);
    }
    if let Some(note) = &diag.note {
        builder = builder.with_note(note);
    }
    builder.finish()
}

/// The longest line an excerpt of `diag` would show, in bytes: a line of a megabyte (a
/// generated or minified file, or a file that is not a flow at all) was drawn whole, with an
/// underline as long, several times its size on stderr and in memory.
fn longest_excerpt_line(text: &str, diag: &Diagnostic) -> Option<usize> {
    std::iter::once(diag.primary.span)
        .chain(diag.secondary.iter().map(|l| l.span))
        .map(|span| {
            let range = clamp(text, span);
            let start = text[..range.start].rfind('\n').map_or(0, |i| i + 1);
            let end = text[range.end..]
                .find('\n')
                .map_or(text.len(), |i| range.end + i);
            end - start
        })
        .max()
}

/// The longest source line a report shows whole; past it the report is [`plain`].
const EXCERPT_LINE_MAX: usize = 4096;

/// `path:line:column: severity[code]: message`, and its help and note, for when an excerpt
/// cannot be drawn or would be too long to read.
fn plain(path: &str, text: &str, diag: &Diagnostic) -> String {
    let index = reel_syntax::LineIndex::new(text);
    let at = index.line_col(text, clamp(text, diag.primary.span).start);
    let mut out = format!(
        "{path}:{}:{}: {}[{}]: {}\n",
        at.line,
        at.column,
        diag.severity.as_str(),
        diag.code,
        diag.message
    );
    for (what, said) in [("help", &diag.help), ("note", &diag.note)] {
        if let Some(said) = said {
            out.push_str(&format!("  = {what}: {said}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use reel_syntax::{Code, Span};

    const FLOW: &str = "flow hello {\n  input name: string\n  step greeting = \"hi ${input.nme}\"\n  step unused = upper(greeting)\n  output greeting\n}\n";

    fn span_of(needle: &str) -> Span {
        let start = FLOW.find(needle).unwrap();
        Span::new(start, start + needle.len())
    }

    fn sample() -> Vec<Diagnostic> {
        vec![
            Diagnostic::error(
                Code::NameUnknownInput,
                span_of("nme"),
                "unknown input `nme`",
            )
            .with_label("no input named `nme`")
            .with_secondary(span_of("name"), "`name` is declared here")
            .with_help("did you mean `name`?")
            .with_note("inputs are read as `input.NAME`"),
            Diagnostic::warning(
                Code::LintUnusedStep,
                span_of("unused"),
                "step `unused` is never used",
            )
            .with_help("refer to it, or remove it"),
        ]
    }

    #[test]
    fn errors_and_warnings_with_labels_help_and_note() {
        insta::assert_snapshot!(render_terminal("hello.reel", FLOW, &sample(), false));
    }

    #[test]
    fn a_secondary_label_above_the_primary_stays_in_one_excerpt() {
        let diag = Diagnostic::error(Code::NameDuplicate, span_of("unused"), "duplicate step")
            .with_secondary(span_of("hello"), "");
        insta::assert_snapshot!(render_terminal("hello.reel", FLOW, &[diag], false));
    }

    #[test]
    fn an_empty_span_at_the_end_of_the_file() {
        let text = "flow a {\n  step x =\n";
        let diag = Diagnostic::error(
            Code::SyntaxUnexpectedToken,
            Span::new(text.len(), text.len()),
            "unexpected end of file",
        )
        .with_label("expected `}`");
        insta::assert_snapshot!(render_terminal("a.reel", text, &[diag], false));
    }

    #[test]
    fn a_line_too_long_to_show_is_named_not_drawn() {
        let text = format!("flow a {{\n  step x = {}\n}}\n", "b".repeat(100_000));
        let at = text.find('b').unwrap();
        let diag = Diagnostic::error(
            Code::NameUnknown,
            Span::new(at, at + 100_000),
            "unknown name `bbbb…` (100000 characters)",
        )
        .with_help("declare it, or correct the name");
        let out = render_terminal("a.reel", &text, &[diag], false);
        insta::assert_snapshot!(out);
    }

    #[test]
    fn color_only_when_asked() {
        let plain = render_terminal("hello.reel", FLOW, &sample(), false);
        let colored = render_terminal("hello.reel", FLOW, &sample(), true);
        assert!(!plain.contains('\u{1b}'));
        assert!(colored.contains('\u{1b}'));
    }

    #[test]
    fn no_diagnostics_render_as_nothing() {
        assert_eq!(render_terminal("hello.reel", FLOW, &[], true), "");
    }

    proptest! {
        #[test]
        fn any_span_renders_without_panicking(
            text in "[a-zé\\t\\n{} ]{0,40}",
            a in 0u32..50,
            b in 0u32..50,
            c in 0u32..50,
            d in 0u32..50,
        ) {
            let diag = Diagnostic::error(Code::NameUnknown, Span { start: a, end: b }, "m")
                .with_secondary(Span { start: c, end: d }, "s");
            let out = render_terminal("p.reel", &text, &[diag], false);
            prop_assert!(out.contains("name.unknown"));
        }
    }
}

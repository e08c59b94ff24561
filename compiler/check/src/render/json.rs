//! Diagnostics for tools: the objects of `reel check --format json`, as `docs/cli.md` fixes them.
//!
//! Each diagnostic becomes one object:
//! `file`, `line`, `column`, `end_line`, `end_column` (1-based, columns in characters, the end
//! exclusive; where the primary label is), `severity` (`"error"` or `"warning"`), `code`,
//! `message`, `labels` (the secondary places: `file`, `line`, `column`, `end_line`, `end_column`,
//! `message`), and `help` (the help line, or `null`), which the contract allows beyond its fields.

use reel_syntax::{Diagnostic, LineIndex, Span};
use serde_json::{Map, Value, json};

use super::Region;

/// One JSON object per diagnostic of the file at `path` with text `text`, in the given order.
pub fn to_json(path: &str, text: &str, diags: &[Diagnostic]) -> Vec<Value> {
    let index = LineIndex::new(text);
    diags
        .iter()
        .map(|diag| {
            let mut object = place(path, &index, text, diag.primary.span);
            object.insert("severity".into(), json!(diag.severity.as_str()));
            object.insert("code".into(), json!(diag.code.as_str()));
            object.insert("message".into(), json!(diag.message));
            let labels = diag
                .secondary
                .iter()
                .map(|label| {
                    let mut object = place(path, &index, text, label.span);
                    object.insert("message".into(), json!(label.message));
                    Value::Object(object)
                })
                .collect();
            object.insert("labels".into(), Value::Array(labels));
            object.insert("help".into(), json!(diag.help));
            Value::Object(object)
        })
        .collect()
}

fn place(path: &str, index: &LineIndex, text: &str, span: Span) -> Map<String, Value> {
    let region = Region::of(index, text, span);
    let mut object = Map::new();
    object.insert("file".into(), json!(path));
    object.insert("line".into(), json!(region.line));
    object.insert("column".into(), json!(region.column));
    object.insert("end_line".into(), json!(region.end_line));
    object.insert("end_column".into(), json!(region.end_column));
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_syntax::Code;

    #[test]
    fn every_field_of_the_contract() {
        let text = "flow a {\n  step b = input.nme\n}\n";
        let at = text.find("nme").unwrap();
        let diag = Diagnostic::error(
            Code::NameUnknownInput,
            Span::new(at, at + 3),
            "unknown input",
        )
        .with_label("not declared")
        .with_secondary(Span::new(5, 6), "in this flow")
        .with_help("declare it with `input nme: string`");
        let warning = Diagnostic::warning(Code::LintUnusedStep, Span::new(16, 17), "unused step");
        insta::assert_json_snapshot!(to_json("dir/a.reel", text, &[diag, warning]));
    }

    #[test]
    fn nothing_for_no_diagnostics() {
        assert!(to_json("a.reel", "", &[]).is_empty());
    }
}

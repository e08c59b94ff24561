//! Diagnostics for code scanning: one SARIF 2.1.0 log (`reel check --format sarif`).
//!
//! One run whose driver is `reel`, with one rule per diagnostic code that occurs. Columns count
//! Unicode code points (the run says so with `columnKind`), ends are exclusive as in SARIF, the
//! help line is appended to the message, secondary labels are `relatedLocations`, and
//! machine-applicable fixes are SARIF `fixes`.

use std::collections::BTreeMap;

use reel_syntax::{Diagnostic, LineIndex, Severity, Span};
use serde_json::{Value, json};

use super::Region;

/// The schema a SARIF 2.1.0 log names in its `$schema`.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The SARIF 2.1.0 log of the diagnostics of several files, given as `(path, text, diagnostics)`.
pub fn to_sarif(files: &[(&str, &str, &[Diagnostic])]) -> Value {
    let mut rules: BTreeMap<&str, Severity> = BTreeMap::new();
    for (_, _, diags) in files {
        for diag in diags.iter() {
            rules.entry(diag.code.as_str()).or_insert(diag.severity);
        }
    }
    let rule_index: BTreeMap<&str, usize> = rules
        .keys()
        .enumerate()
        .map(|(i, code)| (*code, i))
        .collect();

    let mut results = Vec::new();
    for (path, text, diags) in files {
        let index = LineIndex::new(text);
        let at = |span: Span| location(path, &index, text, span);
        for diag in diags.iter() {
            let mut message = diag.message.clone();
            if let Some(help) = &diag.help {
                message.push_str("\nhelp: ");
                message.push_str(help);
            }
            let mut primary = at(diag.primary.span);
            if !diag.primary.message.is_empty() {
                primary["message"] = json!({ "text": diag.primary.message });
            }
            let mut result = json!({
                "ruleId": diag.code.as_str(),
                "ruleIndex": rule_index[diag.code.as_str()],
                "level": diag.severity.as_str(),
                "message": { "text": message },
                "locations": [primary],
            });
            if !diag.secondary.is_empty() {
                let related: Vec<Value> = diag
                    .secondary
                    .iter()
                    .enumerate()
                    .map(|(id, label)| {
                        let mut related = at(label.span);
                        related["id"] = json!(id);
                        if !label.message.is_empty() {
                            related["message"] = json!({ "text": label.message });
                        }
                        related
                    })
                    .collect();
                result["relatedLocations"] = Value::Array(related);
            }
            if !diag.fixes.is_empty() {
                let fixes: Vec<Value> = diag
                    .fixes
                    .iter()
                    .map(|fix| {
                        json!({
                            "description": { "text": fix.title },
                            "artifactChanges": [{
                                "artifactLocation": { "uri": uri(path) },
                                "replacements": [{
                                    "deletedRegion": region(&index, text, fix.span),
                                    "insertedContent": { "text": fix.replacement },
                                }],
                            }],
                        })
                    })
                    .collect();
                result["fixes"] = Value::Array(fixes);
            }
            results.push(result);
        }
    }

    let rules: Vec<Value> = rules
        .iter()
        .map(|(code, severity)| {
            json!({
                "id": code,
                "shortDescription": { "text": describe(code) },
                "defaultConfiguration": { "level": severity.as_str() },
            })
        })
        .collect();

    json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "reel",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                },
            },
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    })
}

fn location(path: &str, index: &LineIndex, text: &str, span: Span) -> Value {
    json!({
        "physicalLocation": {
            "artifactLocation": { "uri": uri(path) },
            "region": region(index, text, span),
        },
    })
}

fn region(index: &LineIndex, text: &str, span: Span) -> Value {
    let region = Region::of(index, text, span);
    json!({
        "startLine": region.line,
        "startColumn": region.column,
        "endLine": region.end_line,
        "endColumn": region.end_column,
    })
}

/// A short description of the rule behind `code`: `syntax.unexpected-token` reads
/// "unexpected token (syntax)".
fn describe(code: &str) -> String {
    match code.split_once('.') {
        Some((area, rest)) => format!("{} ({area})", rest.replace(['-', '.'], " ")),
        None => code.replace('-', " "),
    }
}

/// `path` as a URI reference: relative paths stay relative (with forward slashes), absolute ones
/// become `file://` URIs, and characters a URI cannot hold are percent-encoded.
fn uri(path: &str) -> String {
    let slashed = path.replace('\\', "/");
    let bytes = slashed.as_bytes();
    let windows_absolute =
        bytes.len() >= 3 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' && bytes[2] == b'/';
    let (prefix, rest) = if slashed.starts_with("//") {
        ("file:", slashed.as_str())
    } else if slashed.starts_with('/') {
        ("file://", slashed.as_str())
    } else if windows_absolute {
        ("file:///", slashed.as_str())
    } else if slashed
        .split('/')
        .next()
        .is_some_and(|first| first.contains(':'))
    {
        // A colon in the first segment would read as a URI scheme.
        ("./", slashed.as_str())
    } else {
        ("", slashed.as_str())
    };
    let mut out = String::from(prefix);
    for byte in rest.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_syntax::Code;

    fn sample() -> (String, Vec<Diagnostic>) {
        let text = "flow a {\n  step b = input.nme\n  step c = 1\n}\n".to_string();
        let at = text.find("nme").unwrap();
        let c = text.find("c =").unwrap();
        let diags = vec![
            Diagnostic::error(
                Code::NameUnknownInput,
                Span::new(at, at + 3),
                "unknown input",
            )
            .with_label("not declared")
            .with_secondary(Span::new(5, 6), "in this flow")
            .with_help("did you mean `name`?")
            .with_fix("replace with `name`", Span::new(at, at + 3), "name"),
            Diagnostic::warning(
                Code::LintUnusedStep,
                Span::new(c, c + 1),
                "step `c` is never used",
            ),
            Diagnostic::error(Code::NameUnknownInput, Span::new(at, at + 3), "again"),
        ];
        (text, diags)
    }

    #[test]
    fn a_log_with_rules_results_related_locations_and_fixes() {
        let (text, diags) = sample();
        let mut log = to_sarif(&[("flows/a.reel", &text, &diags), ("b.reel", "", &[])]);
        // The version changes with every release; the snapshot is about the shape.
        assert_eq!(
            log["runs"][0]["tool"]["driver"]["version"],
            env!("CARGO_PKG_VERSION")
        );
        log["runs"][0]["tool"]["driver"]["version"] = json!("[version]");
        insta::assert_json_snapshot!(log);
    }

    #[test]
    fn one_rule_per_code_and_results_point_at_theirs() {
        let (text, diags) = sample();
        let log = to_sarif(&[("a.reel", &text, &diags)]);
        let run = &log["runs"][0];
        let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        for result in run["results"].as_array().unwrap() {
            let index = result["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[index]["id"], result["ruleId"]);
        }
    }

    #[test]
    fn an_empty_log_still_has_one_run() {
        let log = to_sarif(&[]);
        assert_eq!(log["version"], "2.1.0");
        assert_eq!(log["runs"][0]["results"], json!([]));
        assert_eq!(log["runs"][0]["tool"]["driver"]["rules"], json!([]));
    }

    #[test]
    fn uris_are_references_with_forward_slashes() {
        assert_eq!(uri("flows/a.reel"), "flows/a.reel");
        assert_eq!(uri("flows\\a.reel"), "flows/a.reel");
        assert_eq!(uri("/tmp/my flows/a.reel"), "file:///tmp/my%20flows/a.reel");
        assert_eq!(uri("C:\\flows\\a.reel"), "file:///C:/flows/a.reel");
        assert_eq!(uri("a:b.reel"), "./a:b.reel");
        assert_eq!(uri("é#1.reel"), "%C3%A9%231.reel");
    }

    #[test]
    fn rule_descriptions_read_as_words() {
        assert_eq!(
            describe("syntax.unexpected-token"),
            "unexpected token (syntax)"
        );
        assert_eq!(describe("plain"), "plain");
    }
}

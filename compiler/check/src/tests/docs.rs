//! The documentation keeps up with the code: every diagnostic code is in `docs/diagnostics.md`
//! with an example that triggers it, and every Rust file under `compiler/` opens with a `//!` doc.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::diagnostics;

/// The prefixes of diagnostic codes (`docs/diagnostics.md` groups them by these).
const PREFIXES: [&str; 11] = [
    "syntax", "name", "type", "taint", "tool", "meta", "dag", "lint", "flow", "input", "call",
];

/// `compiler/` of this repository.
fn compiler_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every `.rs` file below `dir`, sorted; build output (`target`) is skipped.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a readable directory entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The text of `src` before its test module: everything from a `#[cfg(test)]` that opens an
/// inline `mod … {` to the end of the file is left out (test modules come last in this code
/// base), while a `#[cfg(test)] mod name;` declaration is simply skipped.
fn non_test_code(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            let rest = trimmed.trim_start_matches("#[cfg(test)]").trim();
            let item = if rest.is_empty() {
                lines[i + 1..]
                    .iter()
                    .map(|l| l.trim())
                    .find(|l| !l.is_empty())
                    .unwrap_or("")
            } else {
                rest
            };
            if item.starts_with("mod ") && item.ends_with('{') {
                break;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// String literals of the form `"prefix.kebab-name"` in `code`.
fn code_literals(code: &str) -> Vec<String> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for (open, _) in code.match_indices('"') {
        // An opening quote follows neither a word character nor a backslash.
        if open > 0 && (bytes[open - 1].is_ascii_alphanumeric() || bytes[open - 1] == b'\\') {
            continue;
        }
        let rest = &code[open + 1..];
        let Some(prefix) = PREFIXES.iter().find(|p| rest.starts_with(&format!("{p}."))) else {
            continue;
        };
        let name_len = rest[prefix.len() + 1..]
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || *b == b'-')
            .count();
        let end = prefix.len() + 1 + name_len;
        if name_len > 0 && rest[end..].starts_with('"') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

/// Every diagnostic code the non-test code of the syntax crate and the checker mentions.
fn source_codes() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    for crate_src in ["syntax/src", "check/src"] {
        for file in rust_files(&compiler_dir().join(crate_src)) {
            let in_tests = file.components().any(|c| c.as_os_str() == "tests")
                || file.file_name().is_some_and(|n| n == "tests.rs");
            if in_tests {
                continue;
            }
            codes.extend(code_literals(&non_test_code(&read(&file))));
        }
    }
    codes
}

fn diagnostics_md() -> String {
    read(&compiler_dir().join("../docs/diagnostics.md"))
}

/// `(code, section text)` for every `### \`code\`` heading of `docs/diagnostics.md`.
fn documented_sections(doc: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            let code = heading.trim().trim_matches('`').to_string();
            sections.push((code, String::new()));
        } else if line.starts_with("## ") || line.starts_with("# ") {
            // A new group ends the section before it.
            sections.push((String::new(), String::new()));
        } else if let Some((_, text)) = sections.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    sections.retain(|(code, _)| !code.is_empty());
    sections
}

/// The first ```` ```reel ```` block of `text`.
fn first_reel_block(text: &str) -> Option<String> {
    let start = text.find("```reel\n")? + "```reel\n".len();
    let len = text[start..].find("```")?;
    Some(text[start..start + len].to_string())
}

#[test]
fn the_scan_finds_the_codes_it_should() {
    let codes = source_codes();
    // One built with `Diagnostic::error`, one chosen in a `let`, one in the lexer, one warning.
    for code in [
        "name.unknown",
        "type.argument",
        "syntax.unclosed-delimiter",
        "lint.unused-step",
    ] {
        assert!(codes.contains(code), "{code} not found in {codes:?}");
    }
    // Codes that only tests build must not count.
    assert!(!codes.contains("syntax.unexpected-eof"), "{codes:?}");
    assert!(
        codes.len() >= 50,
        "only {} codes found: {codes:?}",
        codes.len()
    );
}

#[test]
fn every_diagnostic_code_is_documented() {
    let documented: BTreeSet<String> = documented_sections(&diagnostics_md())
        .into_iter()
        .map(|(code, _)| code)
        .collect();
    let missing: Vec<String> = source_codes().difference(&documented).cloned().collect();
    assert!(
        missing.is_empty(),
        "these codes are emitted but have no `### \\`code\\`` section in docs/diagnostics.md: {missing:?}"
    );
}

#[test]
fn every_documented_code_is_still_emitted() {
    let emitted = source_codes();
    let stale: Vec<String> = documented_sections(&diagnostics_md())
        .into_iter()
        .map(|(code, _)| code)
        .filter(|code| !emitted.contains(code))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/diagnostics.md documents codes the compiler no longer emits: {stale:?}"
    );
}

#[test]
fn every_documented_example_gives_its_code() {
    let mut wrong = Vec::new();
    for (code, text) in documented_sections(&diagnostics_md()) {
        let Some(example) = first_reel_block(&text) else {
            wrong.push(format!("{code}: no ```reel example"));
            continue;
        };
        let got: Vec<&str> = diagnostics(&example).iter().map(|d| d.code).collect();
        if !got.contains(&code.as_str()) {
            wrong.push(format!("{code}: the example gives {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/diagnostics.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_rust_file_under_compiler_starts_with_a_module_doc() {
    let offenders: Vec<String> = rust_files(&compiler_dir())
        .into_iter()
        .filter(|file| !read(file).starts_with("//!"))
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "these files do not start with a `//!` line (the house rule): {offenders:#?}"
    );
}

#[test]
fn the_literal_scan_and_the_test_cut_behave() {
    let code = "let a = \"type.mismatch\";\nlet b = \"x\" ; let c = \"not.a-code\";\n#[cfg(test)]\nmod tests {\n    const X: &str = \"lint.fake\";\n}\n";
    let kept = non_test_code(code);
    assert_eq!(code_literals(&kept), vec!["type.mismatch".to_string()]);
    let declared = "#[cfg(test)]\nmod tests;\nconst Y: &str = \"dag.cycle\";\n";
    assert_eq!(
        code_literals(&non_test_code(declared)),
        vec!["dag.cycle".to_string()]
    );
}

//! The documentation keeps up with the code: `docs/diagnostics.md` is the catalogue of codes
//! rendered (`REEL_BLESS=1` rewrites it), every code is reported somewhere and its example gives
//! it, no code is written as a string literal outside the catalogue, and every Rust file under
//! `compiler/` opens with a `//!` doc.

use std::fs;
use std::path::{Path, PathBuf};

use reel_syntax::Code;
use reel_syntax::codes::{GROUPS, PAGE_INTRO};

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

/// The non-test code of the syntax crate and the checker, by file, the catalogue itself left out.
fn source_files() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for crate_src in ["syntax/src", "check/src"] {
        for file in rust_files(&compiler_dir().join(crate_src)) {
            let in_tests = file.components().any(|c| c.as_os_str() == "tests")
                || file.file_name().is_some_and(|n| n == "tests.rs");
            let catalogue = file.ends_with("syntax/src/codes.rs");
            if !in_tests && !catalogue {
                let code = non_test_code(&read(&file));
                out.push((file, code));
            }
        }
    }
    out
}

/// Whether `code` names `Code::{variant}` (and not a longer variant that starts the same).
fn mentions(code: &str, variant: &str) -> bool {
    let needle = format!("Code::{variant}");
    code.match_indices(&needle).any(|(at, _)| {
        !code[at + needle.len()..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// `docs/diagnostics.md` as the catalogue renders it: the page's opening, then one section per
/// group (its heading and intro) with one subsection per code: its severity, then its text.
fn render_catalogue() -> String {
    let mut out = format!("{PAGE_INTRO}\n");
    for group in GROUPS {
        out.push_str(&format!(
            "---\n\n## `{}.` — {}\n\n",
            group.prefix, group.title
        ));
        if !group.intro.is_empty() {
            out.push_str(group.intro);
            out.push('\n');
        }
        for code in Code::ALL
            .iter()
            .filter(|c| c.group().prefix == group.prefix)
        {
            let severity = match code.severity() {
                reel_syntax::Severity::Error => "Error",
                reel_syntax::Severity::Warning => "Warning",
            };
            out.push_str(&format!("### `{code}`\n\n**{severity}.** {}\n", code.doc()));
        }
    }
    // Sections are separated by a blank line; the page ends with one newline.
    out.trim_end().to_string() + "\n"
}

fn diagnostics_md_path() -> PathBuf {
    compiler_dir().join("../docs/diagnostics.md")
}

/// The first ```` ```reel ```` block of `text`.
fn first_reel_block(text: &str) -> Option<String> {
    let start = text.find("```reel\n")? + "```reel\n".len();
    let len = text[start..].find("```")?;
    Some(text[start..start + len].to_string())
}

#[test]
// edge: a test reads its own switch to rewrite the page it checks; nothing the compiler does.
#[allow(clippy::disallowed_methods)]
fn docs_diagnostics_md_is_the_catalogue_rendered() {
    let rendered = render_catalogue();
    let path = diagnostics_md_path();
    if std::env::var_os("REEL_BLESS").is_some() {
        fs::write(&path, &rendered).expect("docs/diagnostics.md is writable");
    }
    let on_disk = read(&path);
    if on_disk != rendered {
        let first = on_disk
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(on_disk.lines().count().min(rendered.lines().count()));
        panic!(
            "docs/diagnostics.md differs from the catalogue (compiler/syntax/src/codes.rs and \
             codes/*.md) from line {}; run with REEL_BLESS=1 to rewrite it, and review the diff",
            first + 1
        );
    }
}

#[test]
fn every_group_has_codes_and_every_code_a_section() {
    let doc = render_catalogue();
    for group in GROUPS {
        assert!(
            Code::ALL.iter().any(|c| c.group().prefix == group.prefix),
            "the group `{}` has no code",
            group.prefix
        );
    }
    for code in Code::ALL {
        assert_eq!(
            doc.matches(&format!("\n### `{code}`\n")).count(),
            1,
            "{code}"
        );
    }
}

#[test]
fn no_code_is_a_string_literal_outside_the_catalogue() {
    let mut found = Vec::new();
    for (file, code) in source_files() {
        for literal in code_literals(&code) {
            found.push(format!("{}: \"{literal}\"", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "write these as `Code::…` from reel_syntax::codes: {found:#?}"
    );
}

#[test]
fn every_code_of_the_catalogue_is_reported_somewhere() {
    let sources = source_files();
    let unused: Vec<&Code> = Code::ALL
        .iter()
        .filter(|code| {
            let variant = format!("{code:?}");
            !sources.iter().any(|(_, src)| mentions(src, &variant))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "the catalogue has codes the compiler never reports: {unused:?}"
    );
}

#[test]
fn every_documented_example_gives_its_code() {
    let mut wrong = Vec::new();
    for code in Code::ALL {
        let Some(example) = first_reel_block(code.doc()) else {
            wrong.push(format!("{code}: no ```reel example"));
            continue;
        };
        let got: Vec<Code> = diagnostics(&example).iter().map(|d| d.code).collect();
        if !got.contains(code) {
            wrong.push(format!("{code}: the example gives {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "compiler/syntax/src/codes:\n{}",
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
fn the_scans_and_the_test_cut_behave() {
    assert!(mentions(
        "Diagnostic::error(Code::TypeIndex, s, m)",
        "TypeIndex"
    ));
    assert!(!mentions("Code::TypeIndexed", "TypeIndex"));
    let code = "let a = \"type.mismatch\";\nlet b = \"x\" ; let c = \"not.a-code\";\n#[cfg(test)]\nmod tests {\n    const X: &str = \"lint.fake\";\n}\n";
    let kept = non_test_code(code);
    assert_eq!(code_literals(&kept), vec!["type.mismatch".to_string()]);
    let declared = "#[cfg(test)]\nmod tests;\nconst Y: &str = \"dag.cycle\";\n";
    assert_eq!(
        code_literals(&non_test_code(declared)),
        vec!["dag.cycle".to_string()]
    );
}

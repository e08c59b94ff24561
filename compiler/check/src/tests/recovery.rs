//! Recovery: one mistake gives one error. Each fixture in `recovery/` is a flow with one
//! mistake; its first line names the codes it must give (`// expect: CODE, …`), and its
//! rendering is snapshotted beside its source. A name declared by a broken entry, or a builtin
//! in a broken call, is never reported unknown because of it.

use super::diagnostics;
use crate::render::terminal::render_terminal;

/// The fixtures, by file stem, sorted.
fn fixtures() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tests/recovery");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("the recovery fixtures are in the repository")
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.extension().is_some_and(|e| e == "reel"))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            (stem, std::fs::read_to_string(&p).expect("readable fixture"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn one_mistake_gives_one_error() {
    let cases = fixtures();
    assert!(cases.len() >= 10, "{} fixtures", cases.len());
    let mut wrong = Vec::new();
    for (name, src) in cases {
        let expected: Vec<&str> = src
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// expect:"))
            .unwrap_or_else(|| panic!("{name}: the first line says `// expect: CODE, …`"))
            .split(',')
            .map(str::trim)
            .collect();
        let diags = diagnostics(&src);
        let codes: Vec<&str> = diags.iter().map(|d| d.code.as_str()).collect();
        if codes != expected {
            wrong.push(format!("{name}: expected {expected:?}, got {diags:#?}"));
            continue;
        }
        let rendered = render_terminal("test.reel", &src, &diags, false);
        insta::assert_snapshot!(
            name.as_str(),
            format!("----- SOURCE\n{src}\n----- DIAGNOSTICS\n{rendered}")
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

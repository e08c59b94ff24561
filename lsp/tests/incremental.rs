//! The results kept per segment across edits equal those of a fresh server, as data: each
//! fixture in `tests/incremental/` is a file and, after `=== edits`, one edit per line, applied
//! in order to one database; after each edit the semantic tokens (full, and by range over
//! every window of lines), the document symbols and the folding ranges are compared with those
//! of a new database given the edited text; so is the symbols' JSON the server makes from the
//! pieces it kept from the answer before (`outline::document_symbols_json`), with what
//! `serde_json` makes of the new database's symbols.
//!
//! An edit line is `VERB<TAB>A<TAB>B`, `\n` in `A` and `B` a line break:
//! - `replace`, `A`, `B`: the first `A` becomes `B`;
//! - `delete`, `A`: the first `A` goes;
//! - `type`, `A`, `B`: `B` typed after the first `A`, one character per edit (as keys are).
//!
//! The fixtures also run on their first text alone: the reference examples of the repository.

use std::path::Path;

use reel_compiler::{RootDb, SourceFile};
use reel_lsp::ide::{Ctx, outline, pieces, tokens};
use salsa::Setter;
use tower_lsp_server::lsp_types::{DocumentSymbolResponse, Position, Range};

/// The texts a fixture goes through: its first text, then one per edit (a typed text gives one
/// per character).
fn texts(fixture: &str) -> Vec<String> {
    let (first, edits) = fixture
        .split_once("=== edits\n")
        .expect("a fixture has an `=== edits` line");
    let first: String = first
        .lines()
        .skip_while(|l| l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut out = vec![first];
    for line in edits.lines().filter(|l| !l.is_empty()) {
        let unescape = |s: &str| s.replace("\\n", "\n");
        let mut fields = line.split('\t');
        let verb = fields.next().unwrap_or_default();
        let a = unescape(fields.next().expect("an edit names its text"));
        let b = unescape(fields.next().unwrap_or_default());
        let text = out.last().unwrap().clone();
        let at = text
            .find(&a)
            .unwrap_or_else(|| panic!("`{a}` is not in the text at `{line}`"));
        match verb {
            "replace" => out.push(format!("{}{b}{}", &text[..at], &text[at + a.len()..])),
            "delete" => out.push(format!("{}{}", &text[..at], &text[at + a.len()..])),
            "type" => {
                let at = at + a.len();
                for (i, _) in b.char_indices().skip(1).chain([(b.len(), ' ')]) {
                    out.push(format!("{}{}{}", &text[..at], &b[..i], &text[at..]));
                }
            }
            other => panic!("unknown edit `{other}` in `{line}`"),
        }
    }
    out
}

/// Everything a whole-file request answers, as text to compare (and to read when they differ).
fn answers(cx: &Ctx<'_>) -> Vec<String> {
    let mut out = vec![
        format!("tokens {:?}", tokens::semantic_tokens(cx)),
        format!("symbols {:?}", outline::document_symbols(cx)),
        format!("folds {:?}", outline::folding_ranges(cx)),
    ];
    let lines = cx.text.lines().count() as u32;
    for start in (0..lines).step_by(3) {
        for len in [1, 7, 40] {
            let range = Range::new(Position::new(start, 0), Position::new(start + len, 0));
            out.push(format!(
                "range {start}+{len} {:?}",
                tokens::semantic_tokens_in(cx, cx.lines.span(range))
            ));
        }
    }
    out
}

/// Runs the fixture; the number of segments whose results were kept, in its first text.
fn check(name: &str, fixture: &str) -> usize {
    let texts = texts(fixture);
    let mut db = RootDb::default();
    let file = SourceFile::new(
        &db,
        "t.reel".into(),
        "/tmp".into(),
        texts[0].as_str().into(),
    );
    let kept_segments = pieces::segments(&db, file)
        .iter()
        .filter(|s| s.group.is_some())
        .count();
    // The JSON of the document symbols made from the last answer's pieces, kept across edits.
    let mut kept_json = outline::SymbolsJson::default();
    let mut reused = 0;
    for (step, text) in texts.iter().enumerate() {
        file.set_text(&mut db).to(text.as_str().into());
        let mut kept = answers(&Ctx::new(&db, file));
        let json = outline::document_symbols_json(&Ctx::new(&db, file), &mut kept_json)
            .expect("symbols are JSON");
        kept.push(format!("symbols json {}", String::from_utf8(json).unwrap()));
        reused += kept_json.reused();
        let fresh_db = RootDb::default();
        let fresh = SourceFile::new(
            &fresh_db,
            "t.reel".into(),
            "/tmp".into(),
            text.as_str().into(),
        );
        let mut want = answers(&Ctx::new(&fresh_db, fresh));
        let whole =
            DocumentSymbolResponse::Nested(outline::document_symbols(&Ctx::new(&fresh_db, fresh)));
        want.push(format!(
            "symbols json {}",
            serde_json::to_string(&whole).unwrap()
        ));
        assert!(!want[0].ends_with("[]"), "{name}: the file has tokens");
        assert_eq!(kept.len(), want.len());
        for (got, want) in kept.iter().zip(&want) {
            assert_eq!(got, want, "{name}, text {step}:\n{text}");
        }
    }
    // A fixture with kept segments and edits reuses some group's JSON from the answer before.
    if kept_segments > 1 && texts.len() > 1 {
        assert!(reused > 0, "{name}: no group's symbols JSON was reused");
    }
    kept_segments
}

#[test]
fn results_kept_across_edits_equal_a_fresh_servers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/incremental");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let fixture = std::fs::read_to_string(&path).unwrap();
        let kept = check(&path.display().to_string(), &fixture);
        assert!(kept > 1, "{}: the flow is split in groups", path.display());
        n += 1;
    }
    assert!(n > 0, "no fixture in {}", dir.display());
}

#[test]
fn the_reference_examples_edited_equal_a_fresh_servers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/reference");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "reel") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // A step typed on the line after the first flow's opening, and a line taken out.
        let open = text.find("{\n").expect("a flow opens") + 2;
        let edits = format!(
            "=== edits\ntype\t{}\t  step typed = len(\"ab\")\\n\ndelete\t  step typed = len(\"ab\")\\n\n",
            text[..open].replace('\n', "\\n")
        );
        check(&path.display().to_string(), &format!("{text}{edits}"));
    }
}

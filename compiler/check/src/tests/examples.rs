//! The reference examples check clean and build.

use super::db_with;
use crate::{build_flow, file_diagnostics, flow_names};

/// The reference examples, by file name.
pub fn reference_examples() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/reference");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the reference examples are in the repository") {
        let path = entry.expect("readable directory").path();
        if path.extension().is_some_and(|e| e == "reel") {
            let text = std::fs::read_to_string(&path).expect("readable example");
            out.push((
                path.file_name().unwrap().to_string_lossy().to_string(),
                text,
            ));
        }
    }
    out.sort();
    assert!(out.len() >= 5);
    out
}

#[test]
fn reference_examples_check_clean_and_build() {
    for (name, text) in reference_examples() {
        let (db, file) = db_with(&name, &text);
        let diags = file_diagnostics(&db, file);
        assert!(diags.is_empty(), "{name}: {diags:#?}");
        for flow in flow_names(&db, file) {
            let spec =
                build_flow(&db, file, &flow).unwrap_or_else(|| panic!("{name}: {flow} builds"));
            assert!(spec.verify_digest(), "{name}");
            let binary = reel_flowspec::FlowSpec::from_binary(&spec.to_binary());
            assert_eq!(
                binary.as_ref(),
                Some(&spec),
                "{name}: its binary form reads back"
            );
        }
    }
}

#[test]
fn the_assembled_syntax_is_the_parse_of_the_whole_file() {
    use crate::parse_file;
    use crate::queries::{file_comments, file_syntax};
    for (name, text) in reference_examples() {
        // Each example, and each of its prefixes cut at a line end (half-written files).
        let cuts = text.match_indices('\n').map(|(i, _)| i + 1);
        for cut in cuts.chain([text.len()]) {
            let text = &text[..cut];
            let (db, file) = db_with(&name, text);
            let whole = parse_file(&db, file);
            let assembled = file_syntax(&db, file);
            assert_eq!(
                assembled.file.items, whole.file.items,
                "{name} cut at {cut}"
            );
            assert_eq!(file_comments(&db, file), &whole.file.comments, "{name}");
        }
    }
}

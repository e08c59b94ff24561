//! Properties of the whole compiler on random valid flows: they check clean, `reel fmt` keeps
//! their meaning (the same semantic digests) and is idempotent, and no cut of them makes the
//! checker panic.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use reel_bench::generate::{FLOW_NAME, generate};
use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics};

fn digests(text: &str) -> BTreeMap<String, String> {
    let db = RootDb::default();
    let file = SourceFile::new(&db, "p.reel".into(), "/".into(), Arc::from(text));
    let diags = file_diagnostics(&db, file);
    assert!(diags.is_empty(), "{diags:#?}\n--- source ---\n{text}");
    let spec = build_flow(&db, file, FLOW_NAME).expect("a clean flow builds");
    spec.steps
        .iter()
        .map(|s| (s.id.clone(), s.semantic_digest.clone()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn formatting_keeps_meaning_and_is_idempotent(seed in any::<u64>(), steps in 3usize..40) {
        let text = generate(steps, seed).text;
        let before = digests(&text);
        let formatted = reel_syntax::format::format(&text).expect("a valid flow formats");
        prop_assert_eq!(&before, &digests(&formatted));
        let again = reel_syntax::format::format(&formatted).expect("formatted text formats");
        prop_assert_eq!(formatted, again);
    }

    #[test]
    fn no_cut_of_a_valid_flow_makes_the_checker_panic(seed in any::<u64>(), steps in 2usize..15, a in 0.0f64..1.0, b in 0.0f64..1.0) {
        let text = generate(steps, seed).text;
        let cut = |x: f64| {
            let mut i = (x * text.len() as f64) as usize;
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let (lo, hi) = if a < b { (cut(a), cut(b)) } else { (cut(b), cut(a)) };
        let pieces = [
            text[..lo].to_string(),
            text[lo..].to_string(),
            format!("{}{}", &text[..lo], &text[hi..]),
        ];
        for piece in pieces {
            let db = RootDb::default();
            let file = SourceFile::new(&db, "p.reel".into(), "/".into(), Arc::from(piece.as_str()));
            let _ = file_diagnostics(&db, file);
            if let Some(name) = reel_compiler::flow_names(&db, file).first() {
                let _ = build_flow(&db, file, name);
            }
        }
    }
}

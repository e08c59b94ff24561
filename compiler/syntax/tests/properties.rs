//! Property tests of the parser and the formatter: generated valid files format to a fixed point
//! with their meaning and comments intact, and no input makes either of them panic.

mod flowgen;
mod support;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use reel_syntax::format::format;
use reel_syntax::parse;

/// Parses and formats `src`; when it parses cleanly, checks every promise of the formatter.
fn survive(src: &str) {
    let parsed = parse(src);
    let formatted = format(src);
    if parsed.diagnostics.is_empty() {
        support::check_format(src);
    } else {
        assert!(
            formatted.is_err(),
            "a file with errors was formatted:\n{src}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_files_format_to_a_fixed_point_with_their_meaning_and_comments(
        src in flowgen::file()
    ) {
        support::check_format(&src);
    }

    #[test]
    fn random_bytes_never_make_the_parser_or_formatter_panic(
        bytes in vec(any::<u8>(), 0..300)
    ) {
        survive(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn random_token_soup_never_makes_the_parser_or_formatter_panic(
        src in "([a-z_]{1,6}|[0-9]{1,3}(ms|s|\\.5)?|[{}\\[\\]()\",:.?=!<>+*/%&|$\\\\]| |\n|//[a-z ]*\n|flow|step|tool|input|output|if|then|else|for|in){0,80}"
    ) {
        survive(&src);
    }

    #[test]
    fn cuts_and_splices_of_valid_files_never_make_the_parser_or_formatter_panic(
        a in flowgen::file(),
        b in flowgen::file(),
        cuts in [any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>()],
    ) {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        let (i, j) = (cuts[0].index(a.len() + 1), cuts[1].index(a.len() + 1));
        let (lo, hi) = (i.min(j), i.max(j));
        let (k, l) = (cuts[2].index(b.len() + 1), cuts[3].index(b.len() + 1));
        let (from, to) = (k.min(l), k.max(l));
        let variants = [
            a[..lo].to_vec(),
            a[lo..].to_vec(),
            [&a[..lo], &a[hi..]].concat(),
            [&a[..lo], &b[from..to], &a[lo..]].concat(),
            [&a[..lo], &b[from..]].concat(),
        ];
        for v in &variants {
            survive(&String::from_utf8_lossy(v));
        }
    }
}

//! "Did you mean": the closest known name to a misspelt one.

/// The candidate closest to `name`, if one is close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        let score = strsim::jaro_winkler(name, c);
        let close = score >= 0.8
            || strsim::damerau_levenshtein(name, c) <= (name.len().max(c.len()) / 3).max(1)
            || name.eq_ignore_ascii_case(c);
        if close && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn finds_typos_and_ignores_strangers() {
        assert_eq!(closest("greting", ["greeting", "shout"]), Some("greeting"));
        assert_eq!(closest("URL", ["url", "json"]), Some("url"));
        assert_eq!(closest("zzz", ["greeting", "shout"]), None);
    }
}

//! Reading a FlowSpec from JSON: the `format`/`version` gate, then the shape.

use std::ops::ControlFlow;

use serde_json::Value;

use crate::spec::{FORMAT_VERSION, FlowSpec, OLDEST_VERSION};

/// The value of every FlowSpec's `format` member.
pub const FORMAT: &str = "reel.flowspec";

/// Why a text is not a FlowSpec this reader can use.
#[derive(Debug)]
pub enum SpecError {
    /// The text is not JSON, or its shape is not a FlowSpec's.
    Json(serde_json::Error),
    /// `format` is missing or is not `"reel.flowspec"`.
    Format {
        /// What `format` held, if it was a string.
        found: Option<String>,
    },
    /// `version` is missing or is not the one this reader reads.
    Version {
        /// What `version` held (null when missing).
        found: Value,
    },
    /// The text nests arrays and objects deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::Json(e) => write!(f, "not a valid FlowSpec: {e}"),
            SpecError::Format { found: Some(found) } => write!(
                f,
                "not a FlowSpec: `format` is \"{found}\", expected \"{FORMAT}\""
            ),
            SpecError::Format { found: None } => write!(
                f,
                "not a FlowSpec: no string `format` member (expected \"{FORMAT}\")"
            ),
            SpecError::Version { found: Value::Null } => write!(
                f,
                "FlowSpec has no `version`; this reader reads versions {OLDEST_VERSION} to {FORMAT_VERSION}"
            ),
            SpecError::Version { found } => write!(
                f,
                "FlowSpec version {found} is not supported: this reader reads versions \
                 {OLDEST_VERSION} to {FORMAT_VERSION} only (rebuild the flow with this reel)"
            ),
            SpecError::TooDeep => write!(
                f,
                "not a valid FlowSpec: arrays and objects nest deeper than {MAX_JSON_DEPTH} levels"
            ),
        }
    }
}

impl std::error::Error for SpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpecError::Json(e) => Some(e),
            _ => None,
        }
    }
}

/// The deepest nesting of JSON arrays and objects a FlowSpec may have. The compiler's nesting
/// limit (256 levels of an expression or type, see `reel_syntax::nesting`) keeps every spec it
/// writes well inside it (a record literal, the deepest form, takes three JSON levels per two
/// levels of source, about 400 in all); the passes over a spec that was read (digests,
/// evaluation) stay within a 2 MiB stack at this depth.
pub const MAX_JSON_DEPTH: usize = 512;

/// What [`scan_json`] reports as it walks a text's structure.
pub(crate) enum Mark {
    /// An array or object opened; `depth` counts it and those holding it.
    Open { depth: usize },
    /// A string starts at byte `at` (its opening quote), inside `depth` arrays and objects.
    Str { at: usize, depth: usize },
}

/// Walks the arrays, objects and strings of `text` (brackets in strings do not count; the text
/// need not be valid JSON), telling `visit` of each opening and each string until it breaks
/// with an answer; `None` when it never does.
pub(crate) fn scan_json<R>(text: &str, mut visit: impl FnMut(Mark) -> ControlFlow<R>) -> Option<R> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                if let ControlFlow::Break(r) = visit(Mark::Str { at: i, depth }) {
                    return Some(r);
                }
                // Strings are most of a spec's bytes: jump through each to its closing quote.
                i += 1;
                loop {
                    let Some(k) = bytes
                        .get(i..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                    else {
                        // Unterminated: the reader reports it.
                        return None;
                    };
                    if bytes[i + k] == b'\\' {
                        i += k + 2;
                    } else {
                        i += k + 1;
                        break;
                    }
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if let ControlFlow::Break(r) = visit(Mark::Open { depth }) {
                    return Some(r);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether `text` nests arrays and objects at most `max` deep (brackets in strings do not count;
/// the text need not be valid JSON).
fn nests_within(text: &str, max: usize) -> bool {
    scan_json(text, |mark| match mark {
        Mark::Open { depth } if depth > max => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_none()
}

/// Reads `text` as a `T` without serde_json's fixed limit of 128 levels, which a spec within
/// the compiler's nesting limit may pass; [`nests_within`] has bounded the depth before.
fn read_deep<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = T::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

impl FlowSpec {
    /// Reads a FlowSpec, refusing another `format` or `version` before looking at the rest.
    ///
    /// Digests are not checked here; call [`FlowSpec::verify_digest`] where it matters.
    pub fn from_json(text: &str) -> Result<FlowSpec, SpecError> {
        // One pass in the common case: a text that reads as a FlowSpec is refused afterwards if
        // its `format` or `version` is not ours. Only a text that does not read is looked at
        // again, as a plain value, so that a newer or foreign document is reported as such
        // rather than by the first member this reader does not understand.
        let accept = |spec: FlowSpec| {
            if spec.format != FORMAT {
                return Err(SpecError::Format {
                    found: Some(spec.format),
                });
            }
            if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&spec.version) {
                return Err(SpecError::Version {
                    found: spec.version.into(),
                });
            }
            Ok(spec)
        };
        // Nearly every spec nests far less than serde_json's own limit of 128 levels: read with
        // that limit, it needs no scan of its depth first (a spec of many steps is tens of MiB).
        let read = || serde_json::from_str::<FlowSpec>(text);
        if let Ok(spec) = crate::de::reading_text_of(text.len(), read) {
            return accept(spec);
        }
        if !nests_within(text, MAX_JSON_DEPTH) {
            return Err(SpecError::TooDeep);
        }
        match read_deep::<FlowSpec>(text) {
            Ok(spec) => accept(spec),
            Err(shape) => {
                let value: Value = read_deep(text).map_err(SpecError::Json)?;
                let format = value.get("format").and_then(Value::as_str);
                if format != Some(FORMAT) {
                    return Err(SpecError::Format {
                        found: format.map(str::to_owned),
                    });
                }
                let version = value.get("version").cloned().unwrap_or(Value::Null);
                let known = u64::from(OLDEST_VERSION)..=u64::from(FORMAT_VERSION);
                if !version.as_u64().is_some_and(|v| known.contains(&v)) {
                    return Err(SpecError::Version { found: version });
                }
                // The shape error of the first pass carries line and column.
                Err(SpecError::Json(shape))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::sample_spec;

    fn error_of(text: &str) -> String {
        match FlowSpec::from_json(text) {
            Ok(_) => "accepted".into(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn round_trips_pretty_and_canonical() {
        let mut spec = sample_spec();
        spec.seal();
        let pretty = FlowSpec::from_json(&spec.to_json_pretty()).map_err(|e| e.to_string());
        assert_eq!(pretty.as_ref(), Ok(&spec));
        let compact = FlowSpec::from_json(&spec.to_json()).map_err(|e| e.to_string());
        assert_eq!(compact.as_ref(), Ok(&spec));
        assert_eq!(
            compact.map(|s| s.to_json_pretty()),
            Ok(spec.to_json_pretty()),
            "the stored form reads back to the same document"
        );
        // RFC 8785 writes `0.0` as `0`, so the canonical text reads back equal up to number
        // representation: same canonical text, same digests.
        let canonical = FlowSpec::from_json(&spec.to_canonical_json()).map_err(|e| e.to_string());
        assert_eq!(
            canonical.as_ref().map(FlowSpec::to_canonical_json),
            Ok(spec.to_canonical_json())
        );
        assert!(canonical.is_ok_and(|s| s.verify_digest()));
    }

    #[test]
    fn nesting_past_the_limit_is_refused_before_reading_and_brackets_in_strings_do_not_count() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(nests_within(&deep(MAX_JSON_DEPTH), MAX_JSON_DEPTH));
        assert!(!nests_within(&deep(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH));
        assert!(nests_within(r#"[["[[\"[[", "\\"], "{{"]"#, 2));
        assert_eq!(
            error_of(&deep(100_000)),
            "not a valid FlowSpec: arrays and objects nest deeper than 512 levels"
        );
        // Within it, serde_json's own limit of 128 levels no longer applies.
        assert!(error_of(&deep(500)).contains("no string `format` member"));
    }

    #[test]
    fn refuses_other_formats_and_versions() {
        let mut value = serde_json::to_value(sample_spec()).unwrap_or_default();
        // A document that reads as a FlowSpec in every other member is still refused.
        let mut readable = value.clone();
        readable["format"] = "reel.journal".into();
        let readable_format = readable.to_string();
        value["version"] = 4.into();
        let wrong_version = value.to_string();
        value["version"] = "1".into();
        let string_version = value.to_string();
        value["format"] = "reel.journal".into();
        let wrong_format = value.to_string();
        let table = [
            ("not json", "{".to_owned()),
            ("array", "[]".to_owned()),
            ("no format", r#"{"version": 1}"#.to_owned()),
            ("wrong format", wrong_format),
            ("wrong format, readable shape", readable_format),
            ("no version", r#"{"format": "reel.flowspec"}"#.to_owned()),
            ("wrong version", wrong_version),
            ("string version", string_version),
            (
                "bad shape",
                r#"{"format": "reel.flowspec", "version": 1, "name": 3}"#.to_owned(),
            ),
        ];
        let rendered: String = table
            .iter()
            .map(|(label, text)| format!("{label}: {}\n", error_of(text)))
            .collect();
        insta::assert_snapshot!(rendered);
    }
}

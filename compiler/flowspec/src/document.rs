//! Reading a FlowSpec from JSON: the `format`/`version` gate, then the shape.

use serde_json::Value;

use crate::spec::{FORMAT_VERSION, FlowSpec};

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
                "FlowSpec has no `version`; this reader reads version {FORMAT_VERSION}"
            ),
            SpecError::Version { found } => write!(
                f,
                "FlowSpec version {found} is not supported: this reader reads version \
                 {FORMAT_VERSION} only (rebuild the flow with this reel)"
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

impl FlowSpec {
    /// Reads a FlowSpec, refusing another `format` or `version` before looking at the rest.
    ///
    /// Digests are not checked here; call [`FlowSpec::verify_digest`] where it matters.
    pub fn from_json(text: &str) -> Result<FlowSpec, SpecError> {
        // One pass in the common case: a text that reads as a FlowSpec is refused afterwards if
        // its `format` or `version` is not ours. Only a text that does not read is looked at
        // again, as a plain value, so that a newer or foreign document is reported as such
        // rather than by the first member this reader does not understand.
        match serde_json::from_str::<FlowSpec>(text) {
            Ok(spec) => {
                if spec.format != FORMAT {
                    return Err(SpecError::Format {
                        found: Some(spec.format),
                    });
                }
                if spec.version != FORMAT_VERSION {
                    return Err(SpecError::Version {
                        found: spec.version.into(),
                    });
                }
                Ok(spec)
            }
            Err(shape) => {
                let value: Value = serde_json::from_str(text).map_err(SpecError::Json)?;
                let format = value.get("format").and_then(Value::as_str);
                if format != Some(FORMAT) {
                    return Err(SpecError::Format {
                        found: format.map(str::to_owned),
                    });
                }
                let version = value.get("version").cloned().unwrap_or(Value::Null);
                if version.as_u64() != Some(u64::from(FORMAT_VERSION)) {
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
    fn refuses_other_formats_and_versions() {
        let mut value = serde_json::to_value(sample_spec()).unwrap_or_default();
        // A document that reads as a FlowSpec in every other member is still refused.
        let mut readable = value.clone();
        readable["format"] = "reel.journal".into();
        let readable_format = readable.to_string();
        value["version"] = 2.into();
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

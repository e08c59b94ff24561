//! Canonical JSON (RFC 8785) and SHA-256 digests of values and specs.
//!
//! RFC 8785 writes every number as an IEEE double in its shortest form, so `1.0` and `1` have
//! the same canonical text (`1`), and an integer beyond 2^53 is written rounded. Object keys are
//! sorted by their UTF-16 code units and no whitespace is emitted.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// Why a value could not be canonicalised.
#[derive(Debug)]
pub struct CanonicalError(serde_json::Error);

impl std::fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write canonical JSON: {}", self.0)
    }
}

impl std::error::Error for CanonicalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The RFC 8785 text of any serialisable value.
///
/// Fails when `value`'s `Serialize` fails, has a map with non-string keys, repeats a key, or
/// holds a non-finite float: none of which a [`Value`] can do (see [`canonical_json`]).
pub fn to_canonical_string<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    serde_json_canonicalizer::to_string(value).map_err(CanonicalError)
}

/// The RFC 8785 text of a JSON value.
pub fn canonical_json(value: &Value) -> String {
    // A `Value` has string keys, no duplicate keys (it is a map), no raw fragments and only
    // finite numbers (serde_json refuses to build a non-finite `Number`), which are exactly the
    // canonicaliser's failure cases; so this cannot fail.
    serde_json_canonicalizer::to_string(value)
        .expect("a serde_json::Value always has a canonical form")
}

/// Lowercase hex SHA-256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 (lowercase hex) of the canonical JSON of any serialisable value.
pub fn digest<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    to_canonical_string(value).map(|text| sha256_hex(text.as_bytes()))
}

/// SHA-256 (lowercase hex) of the canonical JSON of a JSON value.
pub fn digest_value(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        let value = json!({ "b": [1, 2.0, "x"], "a": { "d": null, "c": true } });
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":true,"d":null},"b":[1,2,"x"]}"#
        );
    }

    #[test]
    fn numbers_follow_rfc_8785() {
        assert_eq!(canonical_json(&json!(1.0)), "1");
        assert_eq!(canonical_json(&json!(1.5)), "1.5");
        assert_eq!(canonical_json(&json!(1e21)), "1e+21");
        assert_eq!(canonical_json(&json!(-0.0)), "0");
    }

    #[test]
    fn generic_and_value_forms_agree() {
        let value = json!({ "z": 1, "a": "é\n" });
        assert_eq!(
            to_canonical_string(&value).map_err(|e| e.to_string()),
            Ok(canonical_json(&value))
        );
        assert_eq!(
            digest(&value).map_err(|e| e.to_string()),
            Ok(digest_value(&value))
        );
    }

    #[test]
    fn non_string_keys_are_an_error_not_a_panic() {
        let map: HashMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
        assert!(to_canonical_string(&map).is_err());
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            digest_value(&json!({})),
            sha256_hex(b"{}"),
            "the digest is of the canonical text"
        );
    }
}

//! Canonical JSON (RFC 8785), SHA-256 digests of values and specs, and the names values are
//! recorded under.
//!
//! RFC 8785 writes every number as an IEEE double in its shortest form, so `1.0` and `1` have
//! the same canonical text (`1`), and an integer beyond 2^53 is written rounded. Object keys are
//! sorted by their UTF-16 code units and no whitespace is emitted.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

mod writer;

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

/// The canonical text of any serialisable value: that of its JSON value (see [`canonical_json`]).
///
/// Fails when `value`'s `Serialize` fails or has a map with non-string keys, which a [`Value`]
/// cannot hold.
pub fn to_canonical_string<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    // Written straight from `value`: the same text as through a `Value`, without building one.
    writer::write(value, None).map_err(CanonicalError)
}

/// The canonical text of a JSON value: RFC 8785 (JCS), except that an integer beyond 2^53 is
/// written with all its digits instead of as the nearest double.
///
/// Reel's integers are 64-bit: `1234567890123456789` must come back as it went in, and RFC 8785
/// would write it `1234567890123456800`. Every value without such an integer is written exactly
/// as RFC 8785 says (the published vectors pass), so digests of everything else are the ones
/// RFC 8785 gives; floats keep RFC 8785's form (`1e+21`, `0`).
pub fn canonical_json(value: &Value) -> String {
    writer::write_value(value)
}

/// The canonical text of `value` without the member `key` of its top-level object: a spec's
/// digest is of the spec without its `digest`.
pub(crate) fn canonical_without<T: Serialize + ?Sized>(
    value: &T,
    key: &'static str,
) -> Result<String, CanonicalError> {
    writer::write(value, Some(key)).map_err(CanonicalError)
}

/// Lowercase hex SHA-256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha256_hex_parts(&[bytes])
}

/// [`sha256_hex`] of the concatenation of `parts`, without concatenating them first.
pub fn sha256_hex_parts(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    sha256_hex_of(hasher)
}

/// Lowercase hex of what `hasher` has been given (64 characters).
pub(crate) fn sha256_hex_of(hasher: Sha256) -> String {
    // Into a fixed buffer at once: `hex::encode` pushes one char at a time, and a run digests
    // every value it stores.
    let mut text = [0u8; 64];
    hex::encode_to_slice(hasher.finalize(), &mut text).expect("32 bytes are 64 hex digits");
    String::from_utf8(text.to_vec()).expect("hex digits are ASCII")
}

/// SHA-256 (lowercase hex) of the canonical JSON of any serialisable value.
pub fn digest<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    to_canonical_string(value).map(|text| sha256_hex(text.as_bytes()))
}

/// SHA-256 (lowercase hex) of the canonical JSON of a JSON value.
pub fn digest_value(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

/// The longest canonical JSON of a value named by itself rather than by its digest: a name
/// is then never longer than a digest (64 characters, the `=` included).
pub const LITERAL_MAX: usize = 63;

/// The name of the value whose canonical JSON is `text`: `=` and the text itself when it is at
/// most [`LITERAL_MAX`] bytes, else its digest.
///
/// A value's name is what the journal records for it. A short value named by itself needs no
/// row of its own in the store (a durable step's commit writes fewer pages, a replay reads it
/// with the event), and two values have the same name exactly when they are the same value,
/// as with digests. A digest is 64 hex digits and a literal name starts with `=`, so the two
/// forms never meet. Journals written before names existed name every value by its digest:
/// compare names with [`same_value`], which sees through the two forms.
pub fn name_text(text: &str) -> String {
    if text.len() <= LITERAL_MAX {
        let mut name = String::with_capacity(text.len() + 1);
        name.push('=');
        name.push_str(text);
        name
    } else {
        sha256_hex(text.as_bytes())
    }
}

/// [`name_text`] of a JSON value.
pub fn name_value(value: &Value) -> String {
    name_text(&canonical_json(value))
}

/// The canonical JSON a name stands for when the value is named by itself.
pub fn literal(name: &str) -> Option<&str> {
    name.strip_prefix('=')
}

/// The digest of the value `name` names, whichever form the name has: what stays the same
/// across the two forms (an effect's idempotency key is made from it).
pub fn name_digest(name: &str) -> std::borrow::Cow<'_, str> {
    match literal(name) {
        Some(text) => std::borrow::Cow::Owned(sha256_hex(text.as_bytes())),
        None => std::borrow::Cow::Borrowed(name),
    }
}

/// Whether two names name the same value: equal names, or the same value named in both forms
/// (a journal written before short values were named by themselves, against a name made now).
pub fn same_value(a: &str, b: &str) -> bool {
    a == b || (literal(a).is_some() != literal(b).is_some() && name_digest(a) == name_digest(b))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The RFC 8785 canonicaliser this crate used before it wrote canonical text itself: the
    /// oracle for every value without an integer beyond 2^53.
    fn rfc8785(value: &Value) -> String {
        serde_json_canonicalizer::to_string(value).expect("a Value has a canonical form")
    }

    /// Whether `value` holds an integer beyond 2^53, where Reel writes every digit and RFC 8785
    /// the nearest double.
    fn has_big_integer(value: &Value) -> bool {
        match value {
            Value::Number(n) => {
                n.as_u64().is_some_and(|u| u > 1 << 53)
                    || n.as_i64().is_some_and(|i| i.unsigned_abs() > 1 << 53)
            }
            Value::Array(items) => items.iter().any(has_big_integer),
            Value::Object(map) => map.values().any(has_big_integer),
            _ => false,
        }
    }

    /// What this crate wrote for a value with an integer beyond 2^53 before it wrote canonical
    /// text itself: RFC 8785's layout, integers by their digits.
    fn rfc8785_with_exact_integers(value: &Value, out: &mut String) {
        match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    rfc8785_with_exact_integers(item, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&rfc8785(&Value::String(key.clone())));
                    out.push(':');
                    rfc8785_with_exact_integers(item, out);
                }
                out.push('}');
            }
            other => out.push_str(&rfc8785(other)),
        }
    }

    /// JSON values with keys and strings that sort and escape differently: ASCII, control
    /// characters, quotes, non-ASCII below and above U+FFFF; numbers of every kind.
    fn json_value() -> impl Strategy<Value = Value> {
        let text = || {
            proptest::string::string_regex(
                "[a-c\\x00-\\x1f\"\\\\/\u{7f}\u{e9}\u{20ac}\u{fb33}\u{1f600}]{0,6}",
            )
            .expect("a valid pattern")
        };
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-100i64..100).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(text(), inner, 0..6)
                    .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_writer_writes_what_rfc_8785_writes(value in json_value()) {
            let ours = canonical_json(&value);
            if has_big_integer(&value) {
                let mut exact = String::new();
                rfc8785_with_exact_integers(&value, &mut exact);
                prop_assert_eq!(ours, exact);
            } else {
                prop_assert_eq!(ours, rfc8785(&value));
            }
        }

        #[test]
        fn writing_straight_from_a_type_is_writing_its_value(value in json_value()) {
            // A struct, a map and a sequence around the value: through `to_value` or not, the
            // same text.
            #[derive(serde::Serialize)]
            struct Around<'a> {
                zeta: &'a Value,
                alpha: Vec<&'a Value>,
                #[serde(rename = "é")]
                accent: Option<u8>,
                unit: (),
                tag: Tag,
            }
            #[derive(serde::Serialize)]
            enum Tag {
                Plain,
                Wrapped(u32),
                Pair(u8, i8),
                Shape { b: bool, a: f64 },
            }
            for tag in [Tag::Plain, Tag::Wrapped(7), Tag::Pair(1, -1), Tag::Shape { b: true, a: 0.5 }] {
                let around = Around { zeta: &value, alpha: vec![&value], accent: None, unit: (), tag };
                let through = serde_json::to_value(&around).expect("to a value");
                prop_assert_eq!(
                    to_canonical_string(&around).map_err(|e| e.to_string()),
                    Ok(canonical_json(&through))
                );
            }
        }
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        let value = json!({ "b": [1, 2.0, "x"], "a": { "d": null, "c": true } });
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":true,"d":null},"b":[1,2,"x"]}"#
        );
    }

    #[test]
    fn integers_beyond_two_to_the_53_keep_every_digit() {
        let big: i64 = 1_234_567_890_123_456_789;
        assert_eq!(canonical_json(&json!(big)), "1234567890123456789");
        assert_eq!(canonical_json(&json!(-big)), "-1234567890123456789");
        assert_eq!(canonical_json(&json!(u64::MAX)), "18446744073709551615");
        assert_eq!(canonical_json(&json!(i64::MIN)), "-9223372036854775808");
        // Inside a document, the rest is laid out as RFC 8785 says.
        assert_eq!(
            canonical_json(&json!({"b": [big, 1.5, 1e21, "\u{1f}é"], "a": null, "\u{e9}": -0.0})),
            "{\"a\":null,\"b\":[1234567890123456789,1.5,1e+21,\"\\u001fé\"],\"é\":0}"
        );
        // At 2^53 and below both forms agree, so such values keep their RFC 8785 digests.
        let edge = 9_007_199_254_740_992_i64;
        assert_eq!(canonical_json(&json!(edge)), rfc8785(&json!(edge)));
        assert_eq!(canonical_json(&json!(-edge)), rfc8785(&json!(-edge)));
        assert_eq!(canonical_json(&json!(edge + 1)), "9007199254740993");
    }

    #[test]
    // The vector is the RFC's own, digits and all.
    #[allow(clippy::excessive_precision)]
    fn the_published_rfc_8785_vectors_pass() {
        // RFC 8785, section 3.2.2 and appendix B (numbers), and the sorting example of 3.2.3.
        let doc = json!({
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u{20ac}$\u{000F}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/",
            "literals": [null, true, false]
        });
        assert_eq!(
            canonical_json(&doc),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        let sorting = json!({
            "\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\u{1f600}": "Emoji: Grinning Face", "\u{0080}": "Control",
            "\u{00f6}": "Latin Small Letter O With Diaeresis"
        });
        let text = canonical_json(&sorting);
        let keys: Vec<&str> = ["\r", "1", "\u{80}", "ö", "€", "\u{1f600}", "\u{fb33}"].to_vec();
        let mut at = 0;
        for key in keys {
            let quoted = serde_json::to_string(key).unwrap();
            let found = text[at..].find(&quoted).expect(key) + at;
            at = found + quoted.len();
        }
        for (n, written) in [
            (0.0, "0"),
            (-0.0, "0"),
            (5e-324, "5e-324"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (9007199254740994.0, "9007199254740994"),
        ] {
            assert_eq!(canonical_json(&json!(n)), written, "{n}");
        }
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

    #[test]
    fn short_values_are_named_by_themselves_and_long_ones_by_digest() {
        // Input and name side by side: the boundary is the canonical text's length.
        let short = "x".repeat(LITERAL_MAX - 2);
        let long = "x".repeat(LITERAL_MAX - 1);
        let cases = [
            (json!(42), "=42".to_string()),
            (
                json!({"b": [1, 2], "a": "é"}),
                r#"={"a":"é","b":[1,2]}"#.to_string(),
            ),
            (json!(short), format!("=\"{short}\"")),
            (json!(long), sha256_hex(format!("\"{long}\"").as_bytes())),
        ];
        for (value, name) in cases {
            assert_eq!(name_value(&value), name, "{value}");
            assert!(name.len() <= 64, "no name is longer than a digest");
        }
    }

    #[test]
    fn a_value_is_the_same_in_either_form_of_its_name() {
        let value = json!({"n": 1});
        let named = name_value(&value);
        let digest = digest_value(&value);
        assert_eq!(literal(&named), Some(r#"{"n":1}"#));
        assert_eq!(name_digest(&named), digest);
        assert_eq!(name_digest(&digest), digest);
        assert!(same_value(&named, &digest));
        assert!(same_value(&digest, &named));
        assert!(same_value(&named, &named));
        assert!(!same_value(&named, &name_value(&json!({"n": 2}))));
        assert!(!same_value(&named, &digest_value(&json!({"n": 2}))));
        assert!(!same_value(&digest, &digest_value(&json!({"n": 2}))));
    }
}

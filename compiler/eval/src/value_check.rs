//! Whether a JSON value belongs to a Reel type: for tool results, run inputs and the output.

use reel_flowspec::{Duration, Type};
use serde_json::Value;

use crate::values::short;

/// Where and how a value fails its type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Path from the checked value to the failing part (`.items[2].name`); empty for the root.
    pub path: String,
    /// The type expected there.
    pub expected: Type,
    /// The value found there, shortened; `(missing)` for an absent record field.
    pub found: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.path.is_empty() {
            write!(f, "at `{}`: ", self.path)?;
        }
        match self.expected {
            Type::Secret => write!(f, "a secret is never a value, found {}", self.found),
            _ => write!(f, "expected {}, found {}", self.expected, self.found),
        }
    }
}

impl std::error::Error for Mismatch {}

/// Checks `value` against `ty`.
///
/// An `int` (a JSON number written without fraction or exponent) is accepted for `float`, but
/// `2.0` is not an `int`. A `duration` is its text (`"250ms"`). `T?` accepts null. A record
/// needs its required fields; optional ones may be absent and extra fields are allowed. `json`
/// accepts anything; `secret` accepts nothing, since a secret never appears in a value.
pub fn check_value(value: &Value, ty: &Type) -> Result<(), Mismatch> {
    let mut path = String::new();
    check_at(value, ty, &mut path)
}

fn check_at(value: &Value, ty: &Type, path: &mut String) -> Result<(), Mismatch> {
    let fail = |path: &String| Mismatch {
        path: path.clone(),
        expected: ty.clone(),
        found: short(value),
    };
    let ok = match ty {
        Type::Json | Type::Error => true,
        Type::Secret => false,
        Type::String => value.is_string(),
        Type::Int => value.is_i64() || value.is_u64(),
        Type::Float => value.is_number(),
        Type::Bool => value.is_boolean(),
        Type::Null => value.is_null(),
        Type::Duration => value.as_str().and_then(Duration::parse).is_some(),
        Type::Optional { inner } => {
            if value.is_null() {
                return Ok(());
            }
            // A value that fails right here fails `T?`, not just `T`; deeper failures keep theirs.
            return check_at(value, inner, path)
                .map_err(|m| if m.path == *path { fail(path) } else { m });
        }
        Type::List { item } => {
            let Value::Array(items) = value else {
                return Err(fail(path));
            };
            for (i, element) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                check_at(element, item, path)?;
                path.truncate(len);
            }
            true
        }
        Type::Record { fields } => {
            let Value::Object(map) = value else {
                return Err(fail(path));
            };
            for field in fields {
                let len = path.len();
                push_key(path, &field.name);
                match map.get(&field.name) {
                    Some(v) => check_at(v, &field.ty, path)?,
                    None if field.ty.is_nullable() => {}
                    None => {
                        return Err(Mismatch {
                            path: path.clone(),
                            expected: field.ty.clone(),
                            found: "(missing)".into(),
                        });
                    }
                }
                path.truncate(len);
            }
            true
        }
    };
    if ok { Ok(()) } else { Err(fail(path)) }
}

/// `.name` for an identifier, `["other key"]` for anything else.
fn push_key(path: &mut String, key: &str) {
    let mut chars = key.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if identifier {
        path.push('.');
        path.push_str(key);
    } else {
        path.push('[');
        path.push_str(&Value::from(key).to_string());
        path.push(']');
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rec(fields: &[(&str, Type)]) -> Type {
        Type::record(fields.iter().map(|(n, t)| (n.to_string(), t.clone())))
    }

    fn outcome(value: Value, ty: &Type) -> String {
        match check_value(&value, ty) {
            Ok(()) => "ok".into(),
            Err(m) => m.to_string(),
        }
    }

    #[test]
    fn scalars() {
        assert!(check_value(&json!(1), &Type::Float).is_ok());
        assert!(check_value(&json!(1.0), &Type::Int).is_err());
        assert!(check_value(&json!(u64::MAX), &Type::Int).is_ok());
        assert!(check_value(&json!("250ms"), &Type::Duration).is_ok());
        assert!(check_value(&json!(" 2s"), &Type::Duration).is_err());
        assert!(check_value(&json!(250), &Type::Duration).is_err());
        assert!(check_value(&json!({"a": [1]}), &Type::Json).is_ok());
        assert!(check_value(&Value::Null, &Type::optional(Type::Int)).is_ok());
        assert!(check_value(&Value::Null, &Type::Int).is_err());
        assert!(check_value(&json!("s3cr3t"), &Type::Secret).is_err());
    }

    #[test]
    fn nested_mismatches_name_their_path() {
        let item = rec(&[
            ("name", Type::String),
            ("score", Type::optional(Type::Float)),
            ("tags", Type::list(Type::String)),
        ]);
        let ty = rec(&[
            ("items", Type::list(item)),
            ("other-key", Type::optional(Type::Bool)),
        ]);
        let good = json!({
            "items": [
                { "name": "a", "tags": [] },
                { "name": "b", "score": 1, "tags": ["x"], "extra": true },
                { "name": "c", "score": null, "tags": [] }
            ]
        });
        let cases = [
            ("good", good.clone()),
            ("not a record", json!([1])),
            (
                "bad name",
                json!({ "items": [{ "name": "a", "tags": [] }, { "name": 7, "tags": [] }] }),
            ),
            ("missing name", json!({ "items": [{ "tags": [] }] })),
            (
                "bad tag",
                json!({ "items": [{ "name": "a", "tags": ["x", false] }] }),
            ),
            (
                "bad score",
                json!({ "items": [{ "name": "a", "score": "high", "tags": [] }] }),
            ),
            ("quoted key", json!({ "items": [], "other-key": "yes" })),
            (
                "long value",
                json!({ "items": [{ "name": ["a very long list of words", "that goes on", "and on and on"], "tags": [] }] }),
            ),
        ];
        let rendered: String = cases
            .into_iter()
            .map(|(label, value)| format!("{label}: {}\n", outcome(value, &ty)))
            .collect();
        insta::assert_snapshot!(rendered);
    }

    #[test]
    fn a_secret_type_names_the_rule() {
        assert_eq!(
            outcome(json!("x"), &Type::Secret),
            r#"a secret is never a value, found "x""#
        );
    }
}

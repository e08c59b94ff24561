//! Operations on JSON values that operators and builtins share: numbers, equality, ordering, and
//! the short rendering of a value inside an error message.

use std::cmp::Ordering;

use reel_flowspec::Type;
use serde_json::{Number, Value};

use crate::error::{EvalError, codes};

/// The longest rendering of a value in a message, in characters.
const SHORT_LIMIT: usize = 60;

/// A value as it appears in an error message: compact JSON, cut short when long.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHORT_LIMIT {
        return text;
    }
    let mut cut: String = text.chars().take(SHORT_LIMIT - 1).collect();
    cut.push('…');
    cut
}

/// A JSON number as the evaluator computes with it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// Written as an integer in JSON; i128 holds every i64 and u64 without loss.
    Int(i128),
    /// Written with a fraction or exponent, or typed `float`.
    Float(f64),
}

impl Num {
    /// The number in `value`, if it is one, read as the JSON writes it.
    pub fn of(value: &Value) -> Option<Num> {
        let Value::Number(n) = value else {
            return None;
        };
        Some(if let Some(i) = n.as_i64() {
            Num::Int(i128::from(i))
        } else if let Some(u) = n.as_u64() {
            Num::Int(i128::from(u))
        } else {
            Num::Float(n.as_f64().unwrap_or(f64::NAN))
        })
    }

    /// The number in `value` when the expression producing it has type `ty`.
    ///
    /// An expression typed `float` is a float even when its value is written as an integer
    /// (an `int` passed for a `float`, or `2.0` canonicalised to `2`), so `x / 2` with `x: float`
    /// divides as floats whatever the JSON spelling.
    pub fn typed(value: &Value, ty: &Type) -> Option<Num> {
        let n = Num::of(value)?;
        Some(match (n, ty.strip_optional()) {
            (Num::Int(i), Type::Float) => Num::Float(i as f64),
            _ => n,
        })
    }

    /// The number as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// The JSON value, or `eval.overflow` when it cannot be one.
    pub fn into_value(self) -> Result<Value, EvalError> {
        match self {
            Num::Int(i) => int_value(i),
            Num::Float(f) => float_value(f),
        }
    }
}

/// An integer result as JSON; integers live in [i64::MIN, u64::MAX].
pub fn int_value(i: i128) -> Result<Value, EvalError> {
    if let Ok(small) = i64::try_from(i) {
        Ok(Value::from(small))
    } else if let Ok(big) = u64::try_from(i) {
        Ok(Value::from(big))
    } else {
        Err(EvalError::new(
            codes::OVERFLOW,
            "integer result does not fit in 64 bits",
        ))
    }
}

/// A float result as JSON; JSON has no NaN or infinity.
pub fn float_value(f: f64) -> Result<Value, EvalError> {
    Number::from_f64(f).map(Value::Number).ok_or_else(|| {
        EvalError::new(
            codes::OVERFLOW,
            format!("float result {f} is not a finite number"),
        )
    })
}

/// Exact order of two numbers, integers against floats included.
pub fn cmp_num(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        // JSON floats are never NaN, and `-0.0 == 0.0` must hold.
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        (Num::Int(x), Num::Float(y)) => cmp_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => cmp_int_float(y, x).reverse(),
    }
}

/// `i` against `f` without rounding `i` to a float first (2^53 + 1 > 2^53 as a float).
fn cmp_int_float(i: i128, f: f64) -> Ordering {
    // Every i128 lies strictly inside ±2^127, and every finite float outside it is beyond all.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f.is_nan() || f >= LIMIT {
        return Ordering::Less;
    }
    if f < -LIMIT {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    match i.cmp(&(whole as i128)) {
        Ordering::Equal => (0.0_f64)
            .partial_cmp(&(f - whole))
            .unwrap_or(Ordering::Equal),
        other => other,
    }
}

/// Deep equality: numbers by value (`1 == 1.0`), objects regardless of key order.
pub fn deep_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => match (Num::of(a), Num::of(b)) {
            (Some(x), Some(y)) => cmp_num(x, y) == Ordering::Equal,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| deep_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| deep_eq(v, w)))
        }
        _ => a == b,
    }
}

/// The order of two values that are both numbers or both strings; `None` otherwise.
pub fn cmp_values(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => Some(cmp_num(Num::of(a)?, Num::of(b)?)),
    }
}

/// Whether an expression of type `ty` holds a duration (`duration` or `duration?`).
pub fn is_duration(ty: &Type) -> bool {
    matches!(ty.strip_optional(), Type::Duration)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_compare_exactly() {
        assert_eq!(
            cmp_num(
                Num::Int(9_007_199_254_740_993),
                Num::Float(9_007_199_254_740_992.0)
            ),
            Ordering::Greater
        );
        assert_eq!(cmp_num(Num::Int(1), Num::Float(1.0)), Ordering::Equal);
        assert_eq!(cmp_num(Num::Int(1), Num::Float(1.5)), Ordering::Less);
        assert_eq!(cmp_num(Num::Int(-1), Num::Float(-1.5)), Ordering::Greater);
        assert_eq!(cmp_num(Num::Float(-0.5), Num::Int(0)), Ordering::Less);
        assert_eq!(
            cmp_num(Num::Int(i128::MAX), Num::Float(1e300)),
            Ordering::Less
        );
        assert_eq!(cmp_num(Num::Float(-0.0), Num::Float(0.0)), Ordering::Equal);
    }

    #[test]
    fn deep_equality_ignores_number_spelling_and_key_order() {
        assert!(deep_eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!deep_eq(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(!deep_eq(&json!("1"), &json!(1)));
    }

    #[test]
    fn typed_numbers_follow_the_expression_type() {
        assert_eq!(Num::typed(&json!(2), &Type::Float), Some(Num::Float(2.0)));
        assert_eq!(Num::typed(&json!(2), &Type::Json), Some(Num::Int(2)));
        assert_eq!(
            Num::typed(&json!(2), &Type::optional(Type::Float)),
            Some(Num::Float(2.0))
        );
    }

    #[test]
    fn results_must_fit_json() {
        assert_eq!(int_value(i128::from(u64::MAX)), Ok(json!(u64::MAX)));
        assert!(int_value(i128::from(u64::MAX) + 1).is_err());
        assert!(float_value(f64::INFINITY).is_err());
    }

    #[test]
    fn short_cuts_long_values() {
        let long = json!("x".repeat(100));
        assert_eq!(short(&long).chars().count(), SHORT_LIMIT);
        assert!(short(&long).ends_with('…'));
        assert_eq!(short(&json!([1, "a"])), r#"[1,"a"]"#);
    }
}

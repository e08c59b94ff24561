//! The one table of builtin functions: signature help, docs, arity, typing for the checker and
//! the implementation for the evaluator, side by side so they cannot drift apart.
//!
//! Typing accepts `json` (checked when evaluated) and the error type (already reported) for
//! every parameter, and never a secret. Implementations check every argument's value, since a
//! `json` argument may hold anything, and fail with `eval.type` naming what they found.

use std::cmp::Ordering;
use std::collections::HashMap;

use reel_flowspec::Type;
use reel_flowspec::canonical::canonical_json;
use serde_json::Value;

use crate::error::{EvalError, codes};
use crate::scope::Scope;
use crate::values::{Num, cmp_num, deep_eq, float_value, int_value, short};

/// The most elements `range` produces; longer ranges are refused rather than allocated.
pub const RANGE_LIMIT: u64 = 1_000_000;

/// A typing function: the argument types (arity already checked) to the result type.
pub type TypingFn = fn(&[Type]) -> Result<Type, ArgTypeError>;

/// An implementation: the argument values (arity already checked) to the result.
pub type EvalFn = fn(&[Value], &mut dyn Scope) -> Result<Value, EvalError>;

/// One builtin function.
pub struct Builtin {
    /// The name it is called by.
    pub name: &'static str,
    /// Its forms for signature help, one per overload (`split(text: string, sep: string) -> list<string>`).
    pub signatures: &'static [&'static str],
    /// One line for hover and completion.
    pub doc: &'static str,
    /// Fewest arguments.
    pub min_args: usize,
    /// Most arguments; `None` for any number.
    pub max_args: Option<usize>,
    /// Whether the result depends on its arguments alone (`now` and `random` do not).
    pub pure: bool,
    /// The checker's rule.
    pub typing: TypingFn,
    /// The evaluator's implementation.
    pub eval: EvalFn,
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin").field("name", &self.name).finish()
    }
}

/// An argument the typing rule refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgTypeError {
    /// The argument's position, from 0.
    pub index: usize,
    /// What it should be, in words (`a list of numbers or strings`).
    pub expected: String,
}

impl std::fmt::Display for ArgTypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "argument {} should be {}", self.index + 1, self.expected)
    }
}

/// Why a call does not type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallTypeError {
    /// Too few or too many arguments.
    Arity {
        /// What the builtin takes, in words (`1 to 3 arguments`).
        takes: String,
        /// How many it was given.
        given: usize,
    },
    /// An argument of the wrong type.
    Arg(ArgTypeError),
}

impl std::fmt::Display for CallTypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallTypeError::Arity { takes, given } => write!(f, "takes {takes}, given {given}"),
            CallTypeError::Arg(e) => e.fmt(f),
        }
    }
}

impl Builtin {
    /// Whether `n` arguments are allowed.
    pub fn accepts_arity(&self, n: usize) -> bool {
        n >= self.min_args && self.max_args.is_none_or(|max| n <= max)
    }

    /// How many arguments it takes, in words.
    pub fn arity_text(&self) -> String {
        let plural = |n: usize| if n == 1 { "argument" } else { "arguments" };
        match self.max_args {
            Some(max) if max == self.min_args => format!("{max} {}", plural(max)),
            Some(max) => format!("{} to {max} arguments", self.min_args),
            None => format!("at least {} {}", self.min_args, plural(self.min_args)),
        }
    }

    /// The result type of a call with these argument types.
    pub fn type_of(&self, args: &[Type]) -> Result<Type, CallTypeError> {
        if !self.accepts_arity(args.len()) {
            return Err(CallTypeError::Arity {
                takes: self.arity_text(),
                given: args.len(),
            });
        }
        (self.typing)(args).map_err(CallTypeError::Arg)
    }

    /// The result of a call with these argument values.
    pub fn call(&self, args: &[Value], scope: &mut dyn Scope) -> Result<Value, EvalError> {
        if !self.accepts_arity(args.len()) {
            return Err(EvalError::new(
                codes::ARITY,
                format!(
                    "`{}` takes {}, given {}",
                    self.name,
                    self.arity_text(),
                    args.len()
                ),
            ));
        }
        (self.eval)(args, scope)
    }
}

/// The builtin called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// Every builtin, in alphabetical order, for completion.
pub fn builtins() -> &'static [Builtin] {
    &BUILTINS
}

static BUILTINS: [Builtin; 26] = [
    Builtin {
        name: "contains",
        signatures: &[
            "contains(list: list<T>, value: T) -> bool",
            "contains(text: string, part: string) -> bool",
            "contains(object: json, key: string) -> bool",
        ],
        doc: "Whether a list holds a value (deep equality), a string a substring, or an object a key.",
        min_args: 2,
        max_args: Some(2),
        pure: true,
        typing: ty_contains,
        eval: ev_contains,
    },
    Builtin {
        name: "ends_with",
        signatures: &["ends_with(text: string, suffix: string) -> bool"],
        doc: "Whether the text ends with the suffix.",
        min_args: 2,
        max_args: Some(2),
        pure: true,
        typing: ty_str_str_bool,
        eval: ev_ends_with,
    },
    Builtin {
        name: "flatten",
        signatures: &["flatten(lists: list<list<T>>) -> list<T>"],
        doc: "The elements of the inner lists, in order: one level of nesting removed.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_flatten,
        eval: ev_flatten,
    },
    Builtin {
        name: "join",
        signatures: &["join(parts: list<string>, sep: string) -> string"],
        doc: "The strings joined with the separator between them.",
        min_args: 2,
        max_args: Some(2),
        pure: true,
        typing: ty_join,
        eval: ev_join,
    },
    Builtin {
        name: "keys",
        signatures: &["keys(object: json) -> list<string>"],
        doc: "An object's keys, sorted.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_keys,
        eval: ev_keys,
    },
    Builtin {
        name: "len",
        signatures: &["len(value: list<T> | string | json) -> int"],
        doc: "The number of elements of a list, characters of a string, or keys of an object.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_len,
        eval: ev_len,
    },
    Builtin {
        name: "lower",
        signatures: &["lower(text: string) -> string"],
        doc: "The text in lower case.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_str_str,
        eval: ev_lower,
    },
    Builtin {
        name: "max",
        signatures: &["max(values: list<T>) -> T?", "max(a: T, b: T, ...) -> T"],
        doc: "The largest of numbers or of strings; null for an empty list.",
        min_args: 1,
        max_args: None,
        pure: true,
        typing: ty_extremum,
        eval: ev_max,
    },
    Builtin {
        name: "min",
        signatures: &["min(values: list<T>) -> T?", "min(a: T, b: T, ...) -> T"],
        doc: "The smallest of numbers or of strings; null for an empty list.",
        min_args: 1,
        max_args: None,
        pure: true,
        typing: ty_extremum,
        eval: ev_min,
    },
    Builtin {
        name: "now",
        signatures: &["now() -> string"],
        doc: "The run's logical time as RFC 3339 text; the same when the run is replayed.",
        min_args: 0,
        max_args: Some(0),
        pure: false,
        typing: ty_now,
        eval: ev_now,
    },
    Builtin {
        name: "parse_json",
        signatures: &["parse_json(text: string) -> json"],
        doc: "The JSON value the text holds.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_parse_json,
        eval: ev_parse_json,
    },
    Builtin {
        name: "random",
        signatures: &["random() -> float"],
        doc: "A float in [0, 1) from the run's seeded generator; the same when replayed.",
        min_args: 0,
        max_args: Some(0),
        pure: false,
        typing: ty_random,
        eval: ev_random,
    },
    Builtin {
        name: "range",
        signatures: &[
            "range(end: int) -> list<int>",
            "range(start: int, end: int) -> list<int>",
            "range(start: int, end: int, step: int) -> list<int>",
        ],
        doc: "The ints from start (default 0) up to but not including end, by step (default 1).",
        min_args: 1,
        max_args: Some(3),
        pure: true,
        typing: ty_range,
        eval: ev_range,
    },
    Builtin {
        name: "replace",
        signatures: &["replace(text: string, from: string, to: string) -> string"],
        doc: "The text with every occurrence of `from` replaced by `to`.",
        min_args: 3,
        max_args: Some(3),
        pure: true,
        typing: ty_replace,
        eval: ev_replace,
    },
    Builtin {
        name: "sort",
        signatures: &["sort(values: list<T>) -> list<T>"],
        doc: "Numbers or strings in ascending order (stable).",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_sort,
        eval: ev_sort,
    },
    Builtin {
        name: "split",
        signatures: &["split(text: string, sep: string) -> list<string>"],
        doc: "The parts of the text between separators; an empty separator splits characters.",
        min_args: 2,
        max_args: Some(2),
        pure: true,
        typing: ty_split,
        eval: ev_split,
    },
    Builtin {
        name: "starts_with",
        signatures: &["starts_with(text: string, prefix: string) -> bool"],
        doc: "Whether the text starts with the prefix.",
        min_args: 2,
        max_args: Some(2),
        pure: true,
        typing: ty_str_str_bool,
        eval: ev_starts_with,
    },
    Builtin {
        name: "sum",
        signatures: &[
            "sum(values: list<int>) -> int",
            "sum(values: list<float>) -> float",
        ],
        doc: "The sum of the numbers: 0 for an empty list, an int when all are ints.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_sum,
        eval: ev_sum,
    },
    Builtin {
        name: "to_float",
        signatures: &["to_float(value: int | float | string) -> float"],
        doc: "The number as a float; a string is read as a number.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_to_float,
        eval: ev_to_float,
    },
    Builtin {
        name: "to_int",
        signatures: &["to_int(value: int | float | string) -> int"],
        doc: "The number as an int, truncated toward zero; a string is read as a number.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_to_int,
        eval: ev_to_int,
    },
    Builtin {
        name: "to_json",
        signatures: &["to_json(value: T) -> string"],
        doc: "The value's canonical JSON text (RFC 8785).",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_any_to_string,
        eval: ev_to_json,
    },
    Builtin {
        name: "to_string",
        signatures: &["to_string(value: T) -> string"],
        doc: "A string as itself, anything else as its canonical JSON text.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_any_to_string,
        eval: ev_to_string,
    },
    Builtin {
        name: "trim",
        signatures: &["trim(text: string) -> string"],
        doc: "The text without leading and trailing whitespace.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_str_str,
        eval: ev_trim,
    },
    Builtin {
        name: "unique",
        signatures: &["unique(values: list<T>) -> list<T>"],
        doc: "The list without repeats (deep equality), keeping first occurrences in order.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_unique,
        eval: ev_unique,
    },
    Builtin {
        name: "upper",
        signatures: &["upper(text: string) -> string"],
        doc: "The text in upper case.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_str_str,
        eval: ev_upper,
    },
    Builtin {
        name: "values",
        signatures: &["values(object: json) -> list<T>"],
        doc: "An object's values, in the order of its sorted keys.",
        min_args: 1,
        max_args: Some(1),
        pure: true,
        typing: ty_values,
        eval: ev_values,
    },
];

// ---------------------------------------------------------------------------------------------
// Typing

fn arg_ty(args: &[Type], i: usize) -> &Type {
    args.get(i).unwrap_or(&Type::Error)
}

fn need(ok: bool, index: usize, expected: &str) -> Result<(), ArgTypeError> {
    if ok {
        Ok(())
    } else {
        Err(ArgTypeError {
            index,
            expected: expected.into(),
        })
    }
}

fn contains_secret(t: &Type) -> bool {
    match t {
        Type::Secret => true,
        Type::List { item } => contains_secret(item),
        Type::Optional { inner } => contains_secret(inner),
        Type::Record { fields } => fields.iter().any(|f| contains_secret(&f.ty)),
        _ => false,
    }
}

fn is_str(t: &Type) -> bool {
    t.is_assignable_to(&Type::String)
}

fn is_num(t: &Type) -> bool {
    t.is_assignable_to(&Type::Float)
}

/// The element type of a list argument; `json` and the error type stand for any list.
fn list_item(t: &Type) -> Option<Type> {
    match t {
        Type::List { item } => Some((**item).clone()),
        Type::Json => Some(Type::Json),
        Type::Error => Some(Type::Error),
        _ => None,
    }
}

/// Element types that numbers-or-strings builtins take; `null` is the element of `[]`.
fn is_ordered(t: &Type) -> bool {
    matches!(
        t,
        Type::Int | Type::Float | Type::String | Type::Json | Type::Error | Type::Null
    )
}

fn ty_len(args: &[Type]) -> Result<Type, ArgTypeError> {
    let t = arg_ty(args, 0);
    need(
        matches!(
            t,
            Type::List { .. } | Type::Record { .. } | Type::String | Type::Json | Type::Error
        ),
        0,
        "a list, a string or an object",
    )?;
    Ok(Type::Int)
}

fn ty_keys(args: &[Type]) -> Result<Type, ArgTypeError> {
    let t = arg_ty(args, 0);
    need(
        matches!(t, Type::Record { .. } | Type::Json | Type::Error),
        0,
        "an object",
    )?;
    Ok(Type::list(Type::String))
}

fn ty_values(args: &[Type]) -> Result<Type, ArgTypeError> {
    match arg_ty(args, 0) {
        Type::Record { fields } => {
            let mut types = fields.iter().map(|f| Some(f.ty.clone()));
            let first = types.next().flatten();
            let joined = types.fold(first, |acc, t| match (acc, t) {
                (Some(a), Some(b)) => Type::join(&a, &b),
                _ => None,
            });
            Ok(Type::list(joined.unwrap_or(Type::Json)))
        }
        Type::Json => Ok(Type::list(Type::Json)),
        Type::Error => Ok(Type::list(Type::Error)),
        _ => Err(ArgTypeError {
            index: 0,
            expected: "an object".into(),
        }),
    }
}

fn ty_contains(args: &[Type]) -> Result<Type, ArgTypeError> {
    let (container, value) = (arg_ty(args, 0), arg_ty(args, 1));
    match container {
        Type::List { item } => need(
            !contains_secret(value)
                && (value.is_assignable_to(item) || item.is_assignable_to(value)),
            1,
            &format!("a value comparable with {item}"),
        )?,
        Type::String => need(is_str(value), 1, "a string")?,
        Type::Record { .. } => need(is_str(value), 1, "a string (a key)")?,
        Type::Json | Type::Error => need(!contains_secret(value), 1, "any value but a secret")?,
        _ => need(false, 0, "a list, a string or an object")?,
    }
    Ok(Type::Bool)
}

fn ty_str_str_bool(args: &[Type]) -> Result<Type, ArgTypeError> {
    need(is_str(arg_ty(args, 0)), 0, "a string")?;
    need(is_str(arg_ty(args, 1)), 1, "a string")?;
    Ok(Type::Bool)
}

fn ty_str_str(args: &[Type]) -> Result<Type, ArgTypeError> {
    need(is_str(arg_ty(args, 0)), 0, "a string")?;
    Ok(Type::String)
}

fn ty_split(args: &[Type]) -> Result<Type, ArgTypeError> {
    need(is_str(arg_ty(args, 0)), 0, "a string")?;
    need(is_str(arg_ty(args, 1)), 1, "a string")?;
    Ok(Type::list(Type::String))
}

fn ty_join(args: &[Type]) -> Result<Type, ArgTypeError> {
    let item = list_item(arg_ty(args, 0));
    need(
        item.is_some_and(|t| is_str(&t) || t == Type::Null),
        0,
        "a list of strings",
    )?;
    need(is_str(arg_ty(args, 1)), 1, "a string")?;
    Ok(Type::String)
}

fn ty_replace(args: &[Type]) -> Result<Type, ArgTypeError> {
    for i in 0..3 {
        need(is_str(arg_ty(args, i)), i, "a string")?;
    }
    Ok(Type::String)
}

fn ty_any_to_string(args: &[Type]) -> Result<Type, ArgTypeError> {
    need(
        !contains_secret(arg_ty(args, 0)),
        0,
        "any value but a secret",
    )?;
    Ok(Type::String)
}

fn ty_to_int(args: &[Type]) -> Result<Type, ArgTypeError> {
    let t = arg_ty(args, 0);
    need(is_num(t) || is_str(t), 0, "a number or a numeric string")?;
    Ok(Type::Int)
}

fn ty_to_float(args: &[Type]) -> Result<Type, ArgTypeError> {
    let t = arg_ty(args, 0);
    need(is_num(t) || is_str(t), 0, "a number or a numeric string")?;
    Ok(Type::Float)
}

fn ty_parse_json(args: &[Type]) -> Result<Type, ArgTypeError> {
    need(is_str(arg_ty(args, 0)), 0, "a string")?;
    Ok(Type::Json)
}

fn ty_extremum(args: &[Type]) -> Result<Type, ArgTypeError> {
    if args.len() == 1 {
        let expected = "a list of numbers or of strings";
        let item = list_item(arg_ty(args, 0)).ok_or_else(|| ArgTypeError {
            index: 0,
            expected: expected.into(),
        })?;
        return match item {
            Type::Int | Type::Float | Type::String => Ok(Type::optional(item)),
            Type::Json | Type::Error | Type::Null => Ok(item),
            _ => Err(ArgTypeError {
                index: 0,
                expected: expected.into(),
            }),
        };
    }
    let (mut seen, mut json, mut error) = (None::<Type>, false, false);
    for (i, t) in args.iter().enumerate() {
        match t {
            Type::Json => json = true,
            Type::Error => error = true,
            Type::Int | Type::Float | Type::String => {
                seen = Some(match seen {
                    None => t.clone(),
                    Some(s) if s == *t => s,
                    Some(Type::Int | Type::Float) if *t != Type::String => Type::Float,
                    Some(Type::String) => need(false, i, "a string, like the arguments before it")
                        .map(|()| Type::Error)?,
                    Some(_) => need(false, i, "a number, like the arguments before it")
                        .map(|()| Type::Error)?,
                });
            }
            _ => need(false, i, "a number or a string")?,
        }
    }
    Ok(if error {
        Type::Error
    } else if json {
        Type::Json
    } else {
        seen.unwrap_or(Type::Json)
    })
}

fn ty_sum(args: &[Type]) -> Result<Type, ArgTypeError> {
    match list_item(arg_ty(args, 0)) {
        Some(Type::Int | Type::Null) => Ok(Type::Int),
        // A json list sums to some number, and an int is accepted as a float.
        Some(Type::Float | Type::Json) => Ok(Type::Float),
        Some(Type::Error) => Ok(Type::Error),
        _ => Err(ArgTypeError {
            index: 0,
            expected: "a list of numbers".into(),
        }),
    }
}

fn ty_range(args: &[Type]) -> Result<Type, ArgTypeError> {
    for (i, t) in args.iter().enumerate() {
        need(t.is_assignable_to(&Type::Int), i, "an int")?;
    }
    Ok(Type::list(Type::Int))
}

fn ty_sort(args: &[Type]) -> Result<Type, ArgTypeError> {
    match list_item(arg_ty(args, 0)) {
        Some(item) if is_ordered(&item) => Ok(Type::list(item)),
        _ => Err(ArgTypeError {
            index: 0,
            expected: "a list of numbers or of strings".into(),
        }),
    }
}

fn ty_unique(args: &[Type]) -> Result<Type, ArgTypeError> {
    match list_item(arg_ty(args, 0)) {
        Some(item) if !contains_secret(&item) => Ok(Type::list(item)),
        _ => Err(ArgTypeError {
            index: 0,
            expected: "a list".into(),
        }),
    }
}

fn ty_flatten(args: &[Type]) -> Result<Type, ArgTypeError> {
    let expected = || ArgTypeError {
        index: 0,
        expected: "a list of lists".into(),
    };
    match list_item(arg_ty(args, 0)).ok_or_else(expected)? {
        Type::List { item } => Ok(Type::List { item }),
        t @ (Type::Json | Type::Error | Type::Null) => Ok(Type::list(t)),
        _ => Err(expected()),
    }
}

fn ty_now(_: &[Type]) -> Result<Type, ArgTypeError> {
    Ok(Type::String)
}

fn ty_random(_: &[Type]) -> Result<Type, ArgTypeError> {
    Ok(Type::Float)
}

// ---------------------------------------------------------------------------------------------
// Evaluation

static NULL: Value = Value::Null;

fn arg(args: &[Value], i: usize) -> &Value {
    args.get(i).unwrap_or(&NULL)
}

fn wrong(name: &str, i: usize, expected: &str, found: &Value) -> EvalError {
    EvalError::type_error(format!(
        "argument {} of `{name}` must be {expected}, found {}",
        i + 1,
        short(found)
    ))
}

fn wrong_element(name: &str, i: usize, expected: &str, found: &Value) -> EvalError {
    EvalError::type_error(format!(
        "element {i} of the list given to `{name}` must be {expected}, found {}",
        short(found)
    ))
}

fn text<'a>(name: &str, args: &'a [Value], i: usize) -> Result<&'a str, EvalError> {
    let v = arg(args, i);
    v.as_str().ok_or_else(|| wrong(name, i, "a string", v))
}

fn list<'a>(name: &str, args: &'a [Value], i: usize) -> Result<&'a [Value], EvalError> {
    match arg(args, i) {
        Value::Array(items) => Ok(items),
        other => Err(wrong(name, i, "a list", other)),
    }
}

fn count(n: usize) -> Value {
    Value::from(n as u64)
}

fn ev_len(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    match arg(args, 0) {
        Value::Array(items) => Ok(count(items.len())),
        Value::String(s) => Ok(count(s.chars().count())),
        Value::Object(map) => Ok(count(map.len())),
        other => Err(wrong("len", 0, "a list, a string or an object", other)),
    }
}

/// An object's entries sorted by key, whatever order the map keeps.
fn sorted_entries<'a>(
    name: &str,
    args: &'a [Value],
) -> Result<Vec<(&'a String, &'a Value)>, EvalError> {
    match arg(args, 0) {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Ok(entries)
        }
        other => Err(wrong(name, 0, "an object", other)),
    }
}

fn ev_keys(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let entries = sorted_entries("keys", args)?;
    Ok(Value::Array(
        entries
            .into_iter()
            .map(|(k, _)| Value::from(k.as_str()))
            .collect(),
    ))
}

fn ev_values(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let entries = sorted_entries("values", args)?;
    Ok(Value::Array(
        entries.into_iter().map(|(_, v)| v.clone()).collect(),
    ))
}

fn ev_contains(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let needle = arg(args, 1);
    let found = match arg(args, 0) {
        Value::Array(items) => items.iter().any(|v| deep_eq(v, needle)),
        Value::String(s) => s.contains(
            needle
                .as_str()
                .ok_or_else(|| wrong("contains", 1, "a string to look for in a string", needle))?,
        ),
        Value::Object(map) => map.contains_key(
            needle
                .as_str()
                .ok_or_else(|| wrong("contains", 1, "a string key to look up", needle))?,
        ),
        other => return Err(wrong("contains", 0, "a list, a string or an object", other)),
    };
    Ok(Value::Bool(found))
}

fn ev_starts_with(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let (s, prefix) = (text("starts_with", args, 0)?, text("starts_with", args, 1)?);
    Ok(Value::Bool(s.starts_with(prefix)))
}

fn ev_ends_with(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let (s, suffix) = (text("ends_with", args, 0)?, text("ends_with", args, 1)?);
    Ok(Value::Bool(s.ends_with(suffix)))
}

fn ev_lower(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    Ok(Value::from(text("lower", args, 0)?.to_lowercase()))
}

fn ev_upper(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    Ok(Value::from(text("upper", args, 0)?.to_uppercase()))
}

fn ev_trim(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    Ok(Value::from(text("trim", args, 0)?.trim()))
}

fn ev_split(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let (s, sep) = (text("split", args, 0)?, text("split", args, 1)?);
    let parts: Vec<Value> = if sep.is_empty() {
        s.chars().map(|c| Value::from(c.to_string())).collect()
    } else {
        s.split(sep).map(Value::from).collect()
    };
    Ok(Value::Array(parts))
}

fn ev_join(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let (items, sep) = (list("join", args, 0)?, text("join", args, 1)?);
    let mut parts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        parts.push(
            item.as_str()
                .ok_or_else(|| wrong_element("join", i, "a string", item))?,
        );
    }
    Ok(Value::from(parts.join(sep)))
}

fn ev_replace(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let s = text("replace", args, 0)?;
    let (from, to) = (text("replace", args, 1)?, text("replace", args, 2)?);
    Ok(Value::from(s.replace(from, to)))
}

fn ev_to_string(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    Ok(match arg(args, 0) {
        Value::String(s) => Value::from(s.as_str()),
        other => Value::from(canonical_json(other)),
    })
}

fn ev_to_json(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    Ok(Value::from(canonical_json(arg(args, 0))))
}

/// The number a string spells, for `to_int` and `to_float`: an integer, else a finite float.
fn parse_number(name: &str, s: &str) -> Result<Num, EvalError> {
    let t = s.trim();
    if let Ok(i) = t.parse::<i128>() {
        return Ok(Num::Int(i));
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(Num::Float(f)),
        _ => Err(EvalError::new(
            codes::PARSE,
            format!(
                "`{name}` cannot read {} as a number",
                short(&Value::from(s))
            ),
        )),
    }
}

fn ev_to_int(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let v = arg(args, 0);
    let n = match v {
        Value::Number(_) => Num::of(v),
        Value::String(s) => Some(parse_number("to_int", s)?),
        _ => None,
    };
    let too_big = || {
        EvalError::new(
            codes::OVERFLOW,
            format!("`to_int` of {} does not fit in 64 bits", short(v)),
        )
    };
    match n {
        Some(Num::Int(i)) => int_value(i).map_err(|_| too_big()),
        Some(Num::Float(f)) => {
            let t = f.trunc();
            // 2^64 is the first float past u64::MAX; anything below -2^63 is past i64::MIN.
            if (-9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&t) {
                int_value(t as i128)
            } else {
                Err(too_big())
            }
        }
        None => Err(wrong("to_int", 0, "a number or a numeric string", v)),
    }
}

fn ev_to_float(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let v = arg(args, 0);
    let n = match v {
        Value::Number(_) => Num::of(v),
        Value::String(s) => Some(parse_number("to_float", s)?),
        _ => None,
    };
    match n {
        Some(n) => float_value(n.as_f64()),
        None => Err(wrong("to_float", 0, "a number or a numeric string", v)),
    }
}

fn ev_parse_json(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let s = text("parse_json", args, 0)?;
    serde_json::from_str(s).map_err(|e| {
        EvalError::new(
            codes::PARSE,
            format!("`parse_json` cannot parse {}: {e}", short(&Value::from(s))),
        )
    })
}

/// Whether every value is a number, or every value is a string; `eval.type` at the first that
/// breaks the pattern set by the first value.
fn check_ordered(name: &str, values: &[&Value], listed: bool) -> Result<(), EvalError> {
    let Some(first) = values.first() else {
        return Ok(());
    };
    let numbers = first.is_number();
    for (i, v) in values.iter().enumerate() {
        let fits = if numbers {
            v.is_number()
        } else {
            v.is_string()
        };
        if !fits {
            let expected = match (i, numbers) {
                (0, _) => "a number or a string",
                (_, true) => "a number, like the first",
                (_, false) => "a string, like the first",
            };
            return Err(if listed {
                wrong_element(name, i, expected, v)
            } else {
                wrong(name, i, expected, v)
            });
        }
    }
    Ok(())
}

/// The order of two values already checked to be both numbers or both strings.
fn order(a: &Value, b: &Value) -> Ordering {
    match (a, b, Num::of(a), Num::of(b)) {
        (Value::String(x), Value::String(y), _, _) => x.cmp(y),
        (_, _, Some(x), Some(y)) => cmp_num(x, y),
        _ => Ordering::Equal,
    }
}

/// `min` or `max`: over a list (null when empty) or over two or more arguments.
fn extremum(name: &str, args: &[Value], wanted: Ordering) -> Result<Value, EvalError> {
    let (values, listed): (Vec<&Value>, bool) = if args.len() == 1 {
        match arg(args, 0) {
            Value::Array(items) => (items.iter().collect(), true),
            other => {
                return Err(wrong(name, 0, "a list of numbers or of strings", other));
            }
        }
    } else {
        (args.iter().collect(), false)
    };
    check_ordered(name, &values, listed)?;
    let mut best: Option<&Value> = None;
    for v in values {
        // Ties keep the first, so `max(1, 1.0)` is `1`.
        if best.is_none_or(|b| order(v, b) == wanted) {
            best = Some(v);
        }
    }
    Ok(best.cloned().unwrap_or(Value::Null))
}

fn ev_min(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    extremum("min", args, Ordering::Less)
}

fn ev_max(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    extremum("max", args, Ordering::Greater)
}

fn ev_sum(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let items = list("sum", args, 0)?;
    let mut int_total: Option<i128> = Some(0);
    let mut float_total = 0.0_f64;
    for (i, item) in items.iter().enumerate() {
        let n = Num::of(item).ok_or_else(|| wrong_element("sum", i, "a number", item))?;
        float_total += n.as_f64();
        int_total =
            match (int_total, n) {
                (Some(total), Num::Int(x)) => Some(total.checked_add(x).ok_or_else(|| {
                    EvalError::new(codes::OVERFLOW, "`sum` does not fit in 64 bits")
                })?),
                _ => None,
            };
    }
    match int_total {
        Some(total) => int_value(total)
            .map_err(|_| EvalError::new(codes::OVERFLOW, "`sum` does not fit in 64 bits")),
        None => float_value(float_total),
    }
}

fn range_arg(args: &[Value], i: usize) -> Result<i128, EvalError> {
    let v = arg(args, i);
    match Num::of(v) {
        Some(Num::Int(n)) => Ok(n),
        _ => Err(wrong("range", i, "an int", v)),
    }
}

fn ev_range(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let (start, end, step) = match args.len() {
        1 => (0, range_arg(args, 0)?, 1),
        2 => (range_arg(args, 0)?, range_arg(args, 1)?, 1),
        _ => (
            range_arg(args, 0)?,
            range_arg(args, 1)?,
            range_arg(args, 2)?,
        ),
    };
    if step == 0 {
        return Err(EvalError::new(codes::RANGE, "`range` step must not be 0"));
    }
    // Every operand fits in 65 bits, so these i128 differences cannot overflow.
    let span = if step > 0 { end - start } else { start - end };
    let len = if span <= 0 {
        0
    } else {
        (span + step.abs() - 1) / step.abs()
    };
    if len > i128::from(RANGE_LIMIT) {
        return Err(EvalError::new(
            codes::RANGE,
            format!("`range` would make {len} elements; the limit is {RANGE_LIMIT}"),
        ));
    }
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut n = start;
    for _ in 0..len {
        out.push(int_value(n)?);
        n += step;
    }
    Ok(Value::Array(out))
}

fn ev_sort(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let items = list("sort", args, 0)?;
    let refs: Vec<&Value> = items.iter().collect();
    check_ordered("sort", &refs, true)?;
    let mut sorted = items.to_vec();
    sorted.sort_by(order);
    Ok(Value::Array(sorted))
}

fn ev_unique(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let items = list("unique", args, 0)?;
    // Equal values have equal canonical text (numbers are written as doubles), so only values
    // in the same bucket need the exact comparison.
    let mut buckets: HashMap<String, Vec<usize>> = HashMap::new();
    let mut kept: Vec<Value> = Vec::new();
    for item in items {
        let bucket = buckets.entry(canonical_json(item)).or_default();
        if !bucket
            .iter()
            .any(|&k| kept.get(k).is_some_and(|v| deep_eq(v, item)))
        {
            bucket.push(kept.len());
            kept.push(item.clone());
        }
    }
    Ok(Value::Array(kept))
}

fn ev_flatten(args: &[Value], _: &mut dyn Scope) -> Result<Value, EvalError> {
    let items = list("flatten", args, 0)?;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Array(inner) => out.extend(inner.iter().cloned()),
            other => return Err(wrong_element("flatten", i, "a list", other)),
        }
    }
    Ok(Value::Array(out))
}

fn ev_now(_: &[Value], scope: &mut dyn Scope) -> Result<Value, EvalError> {
    Ok(Value::from(scope.now()))
}

fn ev_random(_: &[Value], scope: &mut dyn Scope) -> Result<Value, EvalError> {
    float_value(scope.random())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scope::MapScope;

    const REQUIRED: [&str; 26] = [
        "len",
        "keys",
        "values",
        "contains",
        "starts_with",
        "ends_with",
        "lower",
        "upper",
        "trim",
        "split",
        "join",
        "replace",
        "to_string",
        "to_int",
        "to_float",
        "parse_json",
        "to_json",
        "min",
        "max",
        "sum",
        "range",
        "sort",
        "unique",
        "flatten",
        "now",
        "random",
    ];

    #[test]
    fn the_table_is_complete_and_well_formed() {
        for name in REQUIRED {
            assert!(builtin(name).is_some(), "{name} is missing");
        }
        let names: Vec<&str> = builtins().iter().map(|b| b.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "the table is in alphabetical order");
        for b in builtins() {
            assert!(!b.doc.is_empty() && !b.signatures.is_empty(), "{}", b.name);
            assert!(
                b.signatures
                    .iter()
                    .all(|s| s.starts_with(&format!("{}(", b.name))),
                "{}",
                b.name
            );
            assert!(b.max_args.is_none_or(|max| max >= b.min_args), "{}", b.name);
        }
        assert!(builtin("nope").is_none());
    }

    fn run(name: &str, args: &[Value]) -> String {
        let mut scope = MapScope {
            now: "2024-05-01T12:00:00Z".into(),
            random: 0.25,
            ..MapScope::default()
        };
        match builtin(name) {
            None => format!("no builtin {name}"),
            Some(b) => match b.call(args, &mut scope) {
                Ok(v) => v.to_string(),
                Err(e) => format!("error {e}"),
            },
        }
    }

    fn table(cases: &[(&str, Vec<Value>)]) -> String {
        cases
            .iter()
            .map(|(name, args)| {
                let shown: Vec<String> = args.iter().map(Value::to_string).collect();
                format!("{name}({})  =>  {}\n", shown.join(", "), run(name, args))
            })
            .collect()
    }

    #[test]
    fn collections() {
        insta::assert_snapshot!(table(&[
            ("len", vec![json!([1, 2, 3])]),
            ("len", vec![json!("héllo")]),
            ("len", vec![json!({ "a": 1, "b": 2 })]),
            ("len", vec![json!(5)]),
            ("len", vec![Value::Null]),
            ("keys", vec![json!({ "b": 1, "a": 2 })]),
            ("keys", vec![json!([1])]),
            ("values", vec![json!({ "b": 1, "a": 2 })]),
            ("values", vec![json!("ab")]),
            (
                "contains",
                vec![json!([1, { "a": [2] }]), json!({ "a": [2.0] })]
            ),
            ("contains", vec![json!([1, 2]), json!(3)]),
            ("contains", vec![json!("haystack"), json!("st")]),
            ("contains", vec![json!("haystack"), json!(1)]),
            ("contains", vec![json!({ "k": null }), json!("k")]),
            ("contains", vec![json!({ "k": null }), json!(["k"])]),
            ("contains", vec![json!(1), json!(1)]),
            ("min", vec![json!([3, 1.5, 2])]),
            ("min", vec![json!([])]),
            ("min", vec![json!(["b", "a"])]),
            ("min", vec![json!(4), json!(2), json!(3)]),
            ("min", vec![json!([1, "a"])]),
            ("min", vec![json!(3)]),
            ("max", vec![json!([3, 1.5, 2])]),
            ("max", vec![json!([1, 1.0])]),
            ("max", vec![json!("a"), json!("c"), json!("b")]),
            ("max", vec![json!(1), json!("a")]),
            ("max", vec![json!([true])]),
            ("sum", vec![json!([1, 2, 3])]),
            ("sum", vec![json!([1, 2.5])]),
            ("sum", vec![json!([])]),
            ("sum", vec![json!([i64::MAX, 1])]),
            ("sum", vec![json!([i64::MAX, i64::MAX, i64::MAX])]),
            ("sum", vec![json!([1, "2"])]),
            ("sum", vec![json!({ "a": 1 })]),
            ("range", vec![json!(4)]),
            ("range", vec![json!(2), json!(5)]),
            ("range", vec![json!(10), json!(0), json!(-3)]),
            ("range", vec![json!(0), json!(10), json!(4)]),
            ("range", vec![json!(5), json!(2)]),
            ("range", vec![json!(-2)]),
            ("range", vec![json!(0), json!(5), json!(0)]),
            ("range", vec![json!(2_000_000)]),
            ("range", vec![json!(i64::MIN), json!(i64::MAX)]),
            ("range", vec![json!(1.5)]),
            ("range", vec![json!(0), json!("5")]),
            ("sort", vec![json!([3, 1.5, 2, -1])]),
            ("sort", vec![json!(["b", "a", "B"])]),
            ("sort", vec![json!([])]),
            ("sort", vec![json!([1, "a"])]),
            ("sort", vec![json!([null])]),
            ("sort", vec![json!("cba")]),
            (
                "unique",
                vec![json!([1, 1.0, "1", [1], [1.0], { "a": 1 }, { "a": 1 }, 2])]
            ),
            ("unique", vec![json!(1)]),
            ("flatten", vec![json!([[1, 2], [], [[3]]])]),
            ("flatten", vec![json!([[1], 2])]),
            ("flatten", vec![json!({ "a": [1] })]),
        ]));
    }

    #[test]
    fn strings() {
        insta::assert_snapshot!(table(&[
            ("starts_with", vec![json!("reel"), json!("re")]),
            ("starts_with", vec![json!("reel"), json!(1)]),
            ("ends_with", vec![json!("reel"), json!("el")]),
            ("ends_with", vec![json!(["reel"]), json!("el")]),
            ("lower", vec![json!("ÀBC")]),
            ("lower", vec![json!(1)]),
            ("upper", vec![json!("straße")]),
            ("upper", vec![Value::Null]),
            ("trim", vec![json!("  a b \n")]),
            ("trim", vec![json!(true)]),
            ("split", vec![json!("a,b,,c"), json!(",")]),
            ("split", vec![json!("abc"), json!("")]),
            ("split", vec![json!(""), json!(",")]),
            ("split", vec![json!("a"), json!(null)]),
            ("join", vec![json!(["a", "b"]), json!(", ")]),
            ("join", vec![json!([]), json!(",")]),
            ("join", vec![json!(["a", 1]), json!(",")]),
            ("join", vec![json!("ab"), json!(",")]),
            ("replace", vec![json!("a-b-c"), json!("-"), json!("+")]),
            ("replace", vec![json!("ab"), json!(""), json!("-")]),
            ("replace", vec![json!("ab"), json!("a"), json!(1)]),
        ]));
    }

    #[test]
    fn conversions() {
        insta::assert_snapshot!(table(&[
            ("to_string", vec![json!("as is")]),
            ("to_string", vec![json!(1.0)]),
            ("to_string", vec![json!({ "b": [1, null], "a": true })]),
            ("to_string", vec![Value::Null]),
            ("to_json", vec![json!("quoted")]),
            ("to_json", vec![json!({ "b": 1, "a": 2.50 })]),
            ("to_int", vec![json!(42)]),
            ("to_int", vec![json!(-2.7)]),
            ("to_int", vec![json!("17")]),
            ("to_int", vec![json!(" 3.9 ")]),
            ("to_int", vec![json!("12abc")]),
            ("to_int", vec![json!("NaN")]),
            ("to_int", vec![json!(1e30)]),
            ("to_int", vec![json!("99999999999999999999")]),
            ("to_int", vec![json!(true)]),
            ("to_float", vec![json!(2)]),
            ("to_float", vec![json!("2.5e3")]),
            ("to_float", vec![json!("inf")]),
            ("to_float", vec![json!([1])]),
            ("parse_json", vec![json!(r#"{"a": [1, 2.5]}"#)]),
            ("parse_json", vec![json!("{oops")]),
            ("parse_json", vec![json!(1)]),
            ("now", vec![]),
            ("random", vec![]),
            ("len", vec![]),
            ("max", vec![]),
            ("range", vec![json!(1), json!(2), json!(3), json!(4)]),
        ]));
    }

    #[test]
    fn random_must_be_a_json_number() {
        let mut scope = MapScope {
            random: f64::NAN,
            ..MapScope::default()
        };
        let result = builtin("random").map(|b| b.call(&[], &mut scope));
        assert!(matches!(result, Some(Err(e)) if e.code == codes::OVERFLOW));
    }

    fn typing(name: &str, args: &[Type]) -> String {
        let shown: Vec<String> = args.iter().map(Type::to_string).collect();
        let result = match builtin(name) {
            None => format!("no builtin {name}"),
            Some(b) => match b.type_of(args) {
                Ok(t) => t.to_string(),
                Err(e) => format!("error: {e}"),
            },
        };
        format!("{name}({})  =>  {result}\n", shown.join(", "))
    }

    #[test]
    fn typing_rules() {
        use Type::*;
        let ints = Type::list(Int);
        let floats = Type::list(Float);
        let strings = Type::list(String);
        let rec = Type::record([("a".to_owned(), Int), ("b".to_owned(), Float)]);
        let cases: Vec<(&str, Vec<Type>)> = vec![
            ("len", vec![ints.clone()]),
            ("len", vec![String]),
            ("len", vec![rec.clone()]),
            ("len", vec![Json]),
            ("len", vec![Error]),
            ("len", vec![Int]),
            ("len", vec![Type::optional(String)]),
            ("len", vec![Secret]),
            ("len", vec![]),
            ("keys", vec![rec.clone()]),
            ("keys", vec![ints.clone()]),
            ("values", vec![rec.clone()]),
            ("values", vec![Json]),
            ("contains", vec![ints.clone(), Int]),
            ("contains", vec![ints.clone(), Float]),
            ("contains", vec![ints.clone(), String]),
            ("contains", vec![String, String]),
            ("contains", vec![rec.clone(), String]),
            ("contains", vec![Json, Secret]),
            ("split", vec![String, String]),
            ("split", vec![Duration, String]),
            ("join", vec![strings.clone(), String]),
            ("join", vec![ints.clone(), String]),
            ("join", vec![Type::list(Json), String]),
            ("replace", vec![String, String, Int]),
            ("to_string", vec![rec.clone()]),
            ("to_string", vec![Secret]),
            ("to_json", vec![Type::list(Secret)]),
            ("to_int", vec![Float]),
            ("to_int", vec![String]),
            ("to_int", vec![Bool]),
            ("to_float", vec![Json]),
            ("parse_json", vec![String]),
            ("min", vec![ints.clone()]),
            ("min", vec![floats.clone()]),
            ("min", vec![strings.clone()]),
            ("min", vec![Type::list(Json)]),
            ("min", vec![Type::list(Bool)]),
            ("min", vec![Int]),
            ("max", vec![Int, Int, Int]),
            ("max", vec![Int, Float]),
            ("max", vec![String, String]),
            ("max", vec![Int, Json]),
            ("max", vec![Int, String]),
            ("max", vec![String, Int]),
            ("max", vec![Int, Error]),
            ("max", vec![Bool, Int]),
            ("sum", vec![ints.clone()]),
            ("sum", vec![floats.clone()]),
            ("sum", vec![Type::list(Json)]),
            ("sum", vec![Json]),
            ("sum", vec![strings.clone()]),
            ("range", vec![Int]),
            ("range", vec![Int, Int, Int]),
            ("range", vec![Int, Float]),
            ("range", vec![Int, Int, Int, Int]),
            ("sort", vec![strings.clone()]),
            ("sort", vec![Type::list(rec.clone())]),
            ("unique", vec![Type::list(rec.clone())]),
            ("flatten", vec![Type::list(ints.clone())]),
            ("flatten", vec![Type::list(Json)]),
            ("flatten", vec![ints.clone()]),
            ("now", vec![]),
            ("random", vec![]),
            ("random", vec![Int]),
        ];
        let rendered: std::string::String = cases
            .iter()
            .map(|(name, args)| typing(name, args))
            .collect();
        insta::assert_snapshot!(rendered);
    }
}

//! A run's inputs: given values checked against the flow's declarations, defaults filled in.

use reel_flowspec::{FlowSpec, Type};
use serde_json::{Map, Value};

/// Checks `given` against the flow's inputs and fills in defaults. The error says what to fix.
pub fn resolve_inputs(
    spec: &FlowSpec,
    given: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let mut problems = Vec::new();
    for name in given.keys() {
        if !spec.inputs.iter().any(|i| &i.name == name) {
            let known: Vec<&str> = spec.inputs.iter().map(|i| i.name.as_str()).collect();
            problems.push(if known.is_empty() {
                format!(
                    "the flow `{}` takes no inputs, but `{name}` was given",
                    spec.name
                )
            } else {
                format!(
                    "the flow `{}` has no input `{name}` (its inputs: {})",
                    spec.name,
                    known.join(", ")
                )
            });
        }
    }
    let mut out = Map::new();
    for input in &spec.inputs {
        match given.get(&input.name) {
            Some(v) => match reel_eval::check_value(v, &input.ty) {
                Ok(()) => {
                    out.insert(input.name.clone(), v.clone());
                }
                Err(m) => problems.push(format!(
                    "the input `{}` must be {}: {m}",
                    input.name,
                    describe(&input.ty)
                )),
            },
            None => match &input.default {
                Some(d) => {
                    out.insert(input.name.clone(), d.clone());
                }
                None if input.ty.is_nullable() => {
                    out.insert(input.name.clone(), Value::Null);
                }
                None => problems.push(format!(
                    "the input `{}` ({}) is required: give it with --input {}=VALUE",
                    input.name, input.ty, input.name
                )),
            },
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems.join("\n"))
    }
}

fn describe(ty: &Type) -> String {
    format!("of type `{ty}`")
}

/// Parses `--input NAME=VALUE` as the contract says: verbatim for `string` inputs, else JSON
/// when it parses as JSON, else the text as a string.
pub fn parse_input_value(spec: &FlowSpec, name: &str, text: &str) -> Value {
    let is_string = spec
        .inputs
        .iter()
        .find(|i| i.name == name)
        .is_some_and(|i| matches!(i.ty.strip_optional(), Type::String));
    if is_string {
        return Value::String(text.to_string());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

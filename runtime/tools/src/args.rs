//! Reading a call's arguments by shape, with `tool.args` errors that name the argument.
//!
//! A null argument counts as absent: `T?` parameters may be left out or be null, and both mean
//! the same thing to every built-in tool.

use serde_json::{Map, Value};

use crate::api::{ToolError, codes};
use crate::text::{Secrets, short_json};

/// The arguments of one call of a built-in tool.
pub(crate) struct Args<'a> {
    tool: &'a str,
    map: &'a Map<String, Value>,
    secrets: &'a Secrets,
}

impl<'a> Args<'a> {
    /// The arguments `map` of a call of `tool`.
    pub(crate) fn new(tool: &'a str, map: &'a Map<String, Value>, secrets: &'a Secrets) -> Self {
        Args { tool, map, secrets }
    }

    /// The call's secrets, to scrub text before it is shortened for a message.
    pub(crate) fn secrets(&self) -> &'a Secrets {
        self.secrets
    }

    /// The argument `name` unless it is absent or null.
    pub(crate) fn optional(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// The argument `name`, which must be given (null included).
    pub(crate) fn required(&self, name: &str, expected: &str) -> Result<&'a Value, ToolError> {
        self.map.get(name).ok_or_else(|| {
            ToolError::new(
                codes::ARGS,
                format!(
                    "`{}` needs the argument `{name}` ({expected}); add it to the step",
                    self.tool
                ),
                false,
            )
        })
    }

    /// The error for argument `name` holding `found` where `expected` belongs.
    pub(crate) fn wrong(&self, name: &str, expected: &str, found: &Value) -> ToolError {
        let found = short_json(&self.secrets.value(found.clone()), 120);
        ToolError::new(
            codes::ARGS,
            format!(
                "argument `{name}` of `{}` must be {expected}, found {found}",
                self.tool
            ),
            false,
        )
    }

    /// The string argument `name`, which must be given.
    pub(crate) fn string(&self, name: &str) -> Result<&'a str, ToolError> {
        let value = self.required(name, "a string")?;
        value
            .as_str()
            .ok_or_else(|| self.wrong(name, "a string", value))
    }

    /// The string argument `name`, if given.
    pub(crate) fn opt_string(&self, name: &str) -> Result<Option<&'a str>, ToolError> {
        match self.optional(name) {
            None => Ok(None),
            Some(value) => value
                .as_str()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a string", value)),
        }
    }

    /// The argument `name` as an object whose values are strings; empty when not given.
    pub(crate) fn string_map(&self, name: &str) -> Result<Vec<(&'a str, &'a str)>, ToolError> {
        const EXPECTED: &str = "an object whose values are strings";
        let Some(value) = self.optional(name) else {
            return Ok(Vec::new());
        };
        let Some(object) = value.as_object() else {
            return Err(self.wrong(name, EXPECTED, value));
        };
        object
            .iter()
            .map(|(key, v)| match v.as_str() {
                Some(s) => Ok((key.as_str(), s)),
                None => {
                    let found = short_json(&self.secrets.value(v.clone()), 80);
                    Err(ToolError::new(
                        codes::ARGS,
                        format!(
                            "argument `{name}` of `{}` must be {EXPECTED}, but `{key}` is {found}; \
                             write it as a string (`to_string(...)`)",
                            self.tool
                        ),
                        false,
                    ))
                }
            })
            .collect()
    }

    /// The argument `name` as a non-empty list of strings.
    pub(crate) fn string_list(&self, name: &str) -> Result<Vec<String>, ToolError> {
        const EXPECTED: &str = "a non-empty list of strings";
        let value = self.required(name, EXPECTED)?;
        let items = match value.as_array() {
            Some(items) if !items.is_empty() => items,
            _ => return Err(self.wrong(name, EXPECTED, value)),
        };
        items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.wrong(name, EXPECTED, value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with<T>(args: Value, f: impl FnOnce(&Args) -> T) -> T {
        let map = args.as_object().cloned().unwrap_or_default();
        let secrets = Secrets::new(&[("tok".to_string(), "s3cr3t".to_string())]);
        f(&Args::new("exec", &map, &secrets))
    }

    #[test]
    fn null_counts_as_absent() {
        with(json!({"cwd": null}), |a| {
            assert_eq!(a.opt_string("cwd"), Ok(None));
            assert_eq!(a.string_map("env"), Ok(vec![]));
        });
    }

    #[test]
    fn wrong_shapes_name_the_argument_and_what_was_found() {
        let err = with(json!({"cmd": "ls"}), |a| a.string_list("cmd")).unwrap_err();
        assert_eq!(err.code, codes::ARGS);
        assert!(!err.retryable);
        assert!(err.message.contains("`cmd`"), "{}", err.message);
        assert!(err.message.contains("\"ls\""), "{}", err.message);

        let err = with(json!({"cmd": ["ls", 1]}), |a| a.string_list("cmd")).unwrap_err();
        assert!(err.message.contains("[\"ls\",1]"), "{}", err.message);

        let err = with(json!({"cmd": []}), |a| a.string_list("cmd")).unwrap_err();
        assert!(err.message.contains("non-empty"), "{}", err.message);

        let err = with(json!({}), |a| a.string_list("cmd")).unwrap_err();
        assert!(
            err.message.contains("needs the argument `cmd`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn map_values_must_be_strings() {
        let err = with(json!({"env": {"A": "x", "B": 2}}), |a| {
            a.string_map("env").err()
        })
        .unwrap();
        assert!(err.message.contains("`B` is 2"), "{}", err.message);
        let ok = with(json!({"env": {"A": "x"}}), |a| {
            a.string_map("env").map(|v| {
                v.into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
            })
        });
        assert_eq!(ok, Ok(vec!["A=x".to_string()]));
    }

    #[test]
    fn found_values_are_scrubbed() {
        let err = with(json!({"url": ["s3cr3t"]}), |a| a.string("url").err()).unwrap();
        assert!(!err.message.contains("s3cr3t"), "{}", err.message);
        assert!(err.message.contains("{secret:tok}"), "{}", err.message);
    }
}

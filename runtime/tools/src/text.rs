//! Secret scrubbing and the shortening of text that ends up in messages, logs and causes.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::api::{ToolError, ToolOutput, scrub};

/// The secret values of one call, longest first so a secret that contains another is replaced
/// whole rather than leaving its remainder visible.
#[derive(Clone, Debug, Default)]
pub(crate) struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// The secrets of a call, ready to scrub with.
    pub(crate) fn new(secrets: &[(String, String)]) -> Secrets {
        let mut kept: Vec<(String, String)> = secrets
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .cloned()
            .collect();
        kept.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
        Secrets(kept)
    }

    /// `text` with every secret value replaced by `{secret:NAME}`.
    pub(crate) fn text(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_string();
        }
        scrub(text, &self.0)
    }

    /// `value` with every secret replaced in its strings and object keys.
    pub(crate) fn value(&self, value: Value) -> Value {
        if self.0.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.text(&s)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.text(&k), self.value(v)))
                    .collect::<Map<String, Value>>(),
            ),
            other => other,
        }
    }

    /// The error with its message, log and cause scrubbed.
    pub(crate) fn error(&self, error: ToolError) -> ToolError {
        ToolError {
            message: self.text(&error.message),
            log: self.text(&error.log),
            cause: error.cause.map(|c| self.value(c)),
            ..error
        }
    }

    /// The output with its value and log scrubbed.
    pub(crate) fn output(&self, output: ToolOutput) -> ToolOutput {
        ToolOutput {
            value: self.value(output.value),
            log: self.text(&output.log),
        }
    }
}

/// At most `max` characters of `text`, saying how much was left out.
///
/// Callers scrub first: cutting a secret in half would leave a piece no scrub can recognise.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            format!("{}… ({rest} more characters)", &text[..cut])
        }
    }
}

/// The last `lines` lines of `text`, and at most `max` characters of them.
pub(crate) fn tail(text: &str, lines: usize, max: usize) -> String {
    let trimmed = text.trim_end();
    let start = trimmed
        .char_indices()
        .rev()
        .filter(|&(_, c)| c == '\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    let kept = &trimmed[start..];
    let count = kept.chars().count();
    if count <= max {
        return kept.to_string();
    }
    match kept.char_indices().nth(count - max) {
        Some((cut, _)) => format!("…{}", &kept[cut..]),
        None => kept.to_string(),
    }
}

/// A value as short JSON text for a message.
pub(crate) fn short_json(value: &Value, max: usize) -> String {
    clip(&value.to_string(), max)
}

/// A duration as a person writes it in a flow (`250ms`, `10s`).
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secrets() -> Secrets {
        Secrets::new(&[
            ("short".to_string(), "abc".to_string()),
            ("long".to_string(), "abcdef".to_string()),
            ("empty".to_string(), String::new()),
        ])
    }

    #[test]
    fn longest_secret_is_replaced_first() {
        assert_eq!(
            secrets().text("x abcdef abc"),
            "x {secret:long} {secret:short}"
        );
    }

    #[test]
    fn values_are_scrubbed_in_strings_and_keys() {
        let v = secrets().value(json!({"abc": ["abcdef", 1, {"k": "zabc"}]}));
        assert_eq!(
            v,
            json!({"{secret:short}": ["{secret:long}", 1, {"k": "z{secret:short}"}]})
        );
    }

    #[test]
    fn clip_keeps_short_text_and_counts_the_rest() {
        assert_eq!(clip("héllo", 10), "héllo");
        assert_eq!(clip("héllo", 2), "hé… (3 more characters)");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2, 100), "b\nc");
        assert_eq!(tail("a\nb\nc", 5, 100), "a\nb\nc");
        assert_eq!(tail("abcdef", 1, 3), "…def");
        assert_eq!(tail("", 3, 10), "");
    }

    #[test]
    fn durations_read_like_flow_literals() {
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_secs(10)), "10s");
    }
}

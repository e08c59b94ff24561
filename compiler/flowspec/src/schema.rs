//! The JSON Schema (draft 2020-12) of a sealed FlowSpec, kept in `docs/flowspec.schema.json`.

/// The schema's text, for tests that validate the specs they emit.
pub const SCHEMA: &str = include_str!("../../../docs/flowspec.schema.json");

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::sample::sample_spec;
    use crate::spec::FlowSpec;

    fn validator() -> jsonschema::Validator {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap_or_default();
        assert!(
            jsonschema::draft202012::meta::is_valid(&schema),
            "the schema is itself a valid draft 2020-12 schema"
        );
        match jsonschema::draft202012::new(&schema) {
            Ok(v) => v,
            Err(e) => panic!("the schema compiles: {e}"),
        }
    }

    fn errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
        validator
            .iter_errors(instance)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }

    fn sealed_value() -> Value {
        let mut spec = sample_spec();
        spec.seal();
        serde_json::to_value(&spec).unwrap_or_default()
    }

    #[test]
    fn the_sample_validates() {
        let validator = validator();
        let value = sealed_value();
        assert_eq!(errors(&validator, &value), Vec::<String>::new());
    }

    #[test]
    fn the_sample_covers_every_node_and_type() {
        let text = sealed_value().to_string();
        for op in [
            "lit", "interp", "list", "record", "input", "env", "secret", "step", "item", "index",
            "var", "member", "at", "call", "unary", "binary", "if", "for",
        ] {
            assert!(text.contains(&format!(r#""op":"{op}""#)), "node {op}");
        }
        for ty in [
            "string", "int", "float", "bool", "duration", "json", "secret", "null", "list",
            "record", "optional", "error",
        ] {
            assert!(text.contains(&format!(r#""type":"{ty}""#)), "type {ty}");
        }
    }

    #[test]
    fn bad_documents_fail() {
        let validator = validator();
        let mut cases: Vec<(&str, Value)> = Vec::new();

        let mut v = sealed_value();
        v["steps"][0]["colour"] = json!("red");
        cases.push(("unknown step field", v));

        let mut v = sealed_value();
        v["steps"][0]["timeout"] = json!("10 seconds");
        cases.push(("bad duration", v));

        let mut v = sealed_value();
        v["inputs"][0]["type"] = json!({ "type": "list" });
        cases.push(("list type without item", v));

        let mut v = sealed_value();
        v["steps"][4]["value"]["operator"] = json!("xor");
        cases.push(("unknown operator", v));

        let mut v = sealed_value();
        v["steps"][4]["value"]["op"] = json!("pipe");
        cases.push(("unknown node", v));

        let mut v = sealed_value();
        v["version"] = json!(4);
        cases.push(("other version", v));

        let mut spec = sample_spec();
        spec.digest = String::new();
        cases.push(("unsealed", serde_json::to_value(&spec).unwrap_or_default()));

        for (label, value) in cases {
            assert!(
                !errors(&validator, &value).is_empty(),
                "{label} should fail validation"
            );
        }
    }

    #[test]
    fn serde_and_schema_agree_on_unknown_nodes() {
        let mut v = sealed_value();
        v["steps"][4]["value"]["op"] = json!("pipe");
        assert!(serde_json::from_value::<FlowSpec>(v).is_err());
    }
}

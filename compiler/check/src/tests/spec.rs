//! FlowSpecs: they validate against the published schema, and their semantic digests ignore layout.

use serde_json::Value;

use super::db_with;
use super::examples::reference_examples;
use crate::{build_flow, flow_names};

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(reel_flowspec::SCHEMA).expect("the schema is JSON");
    jsonschema::draft202012::new(&schema).expect("the schema compiles")
}

fn specs_of(name: &str, text: &str) -> Vec<reel_flowspec::FlowSpec> {
    let (db, file) = db_with(name, text);
    flow_names(&db, file)
        .iter()
        .map(|f| build_flow(&db, file, f).unwrap_or_else(|| panic!("{name}: {f} builds")))
        .collect()
}

#[test]
fn every_emitted_spec_validates_against_the_schema() {
    let validator = validator();
    let mut sources = reference_examples();
    sources.push(("everything.reel".into(), EVERYTHING.into()));
    for (name, text) in sources {
        for spec in specs_of(&name, &text) {
            let json = serde_json::to_value(&spec).expect("serializes");
            let errors: Vec<String> = validator
                .iter_errors(&json)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{name}: {errors:#?}");
            // And it reads back as the same spec.
            let back =
                reel_flowspec::FlowSpec::from_json(&spec.to_json_pretty()).expect("reads back");
            assert_eq!(back, spec);
        }
    }
}

/// A flow using every form of the language, to cover the schema.
const EVERYTHING: &str = r#"/// Uses every form.
tool classify {
  kind: "read"
  exec: ["python3", "classify.py"]
  input { text: string, hint: string? }
  output { severity: string, labels: list<string>, meta: { score: float } }
}

flow everything {
  /// The repository.
  input repo: string = "a/b"
  input limits: { max: int, ratio: float } = { max: 3, ratio: 0.5 }
  input tags: list<string> = ["x", "y"]
  input wait: duration = 2s
  input dry: bool?
  secret token
  env HOME

  step page = http.get {
    url: "https://example.com/${input.repo}?q=\"${len(input.tags)}\"\n"
    bearer: secret.token
    headers: { accept: "application/json", "x-home": env.HOME ?? "none" }
    retry: { max: 5, backoff: "fixed", base: 100ms, jitter: false }
    timeout: 5s
  }
  step kind = classify { text: to_string(page.body), hint: null }
  step labels = http.post {
    foreach: [for l in kind.labels if l != "": upper(l)]
    concurrency: 2
    when: !(input.dry ?? false) && kind.severity == "high" || kind.meta.score >= input.limits.ratio
    url: "https://example.com/labels"
    json: { name: item, position: index, neg: -index, rem: index % 2 }
  }
  step pause = sleep { for: input.wait, after: [labels] }
  step go = signal { name: "go", timeout: 7d }
  step pick = if len(labels ?? []) > input.limits.max then page.body["items"][0] else page.body?.items
  step calc = (input.limits.max * 2 - 1) / 3 + input.limits.ratio
  step joined = join(split("a,b", ","), "-") + "" + to_string(random() < 0.5) + now()

  output {
    kind: kind.severity
    labels: len(labels ?? [])
    pick: pick
    calc: calc
    joined: joined
    go: go
    woke: pause?.woke_at
  }
}
"#;

#[test]
fn the_everything_flow_checks_clean() {
    let (db, file) = db_with("everything.reel", EVERYTHING);
    let diags = crate::file_diagnostics(&db, file);
    assert!(diags.is_empty(), "{diags:#?}");
}

#[test]
fn moving_steps_and_editing_comments_keeps_semantic_digests() {
    let original = "flow f {\n  input n: int = 1\n  step a = echo { value: input.n }\n  step b = echo { value: a + 1 }\n  output b\n}\n";
    let moved = "// A comment.\nflow f {\n  input n: int = 1\n\n  /// Now documented, and first.\n  step b = echo {\n    value: a + 1\n  }\n  // Moved below.\n  step a = echo { value: input.n }\n  output b\n}\n";
    let changed = "flow f {\n  input n: int = 1\n  step a = echo { value: input.n }\n  step b = echo { value: a + 2 }\n  output b\n}\n";
    let digests = |text: &str| {
        let spec = specs_of("f.reel", text).remove(0);
        let mut d: Vec<(String, String)> = spec
            .steps
            .iter()
            .map(|s| (s.id.clone(), s.semantic_digest.clone()))
            .collect();
        d.sort();
        (d, spec.digest)
    };
    let (a, spec_a) = digests(original);
    let (b, spec_b) = digests(moved);
    let (c, _) = digests(changed);
    assert_eq!(a, b);
    assert_ne!(spec_a, spec_b, "the spec's own digest covers spans");
    assert_eq!(a[0], c[0]);
    assert_ne!(a[1], c[1]);
}

/// The spec of a flow with nested literals, built by the version-1 writer (before the types of
/// nested literals were left out), from `fixtures/nested.reel`.
const NESTED_V1: &str = include_str!("fixtures/nested.v1.json");
const NESTED_SOURCE: &str = include_str!("fixtures/nested.reel");

#[test]
fn a_nested_literal_is_written_in_size_linear_in_its_depth() {
    let size = |depth: usize| {
        let list = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let record = format!("{}1{}", "{ a: ".repeat(depth), " }".repeat(depth));
        let text =
            format!("flow f {{\n  step l = {list}\n  step r = {record}\n  output [l, r]\n}}\n");
        let spec = &specs_of("f.reel", &text)[0];
        assert_eq!(spec.version, 2);
        (spec.to_json().len(), spec.to_json_pretty().len())
    };
    let (small, large) = (size(50), size(100));
    // Twice the depth: about twice the text (it was four times). Indented, each line is also
    // indented by its depth, so about four times (it was eight).
    assert!(large.0 < small.0 * 5 / 2, "compact: {small:?} → {large:?}");
    assert!(large.1 < small.1 * 9 / 2, "indented: {small:?} → {large:?}");
}

#[test]
fn a_version_1_spec_still_reads_verifies_and_means_what_it_meant() {
    let old = reel_flowspec::FlowSpec::from_json(NESTED_V1).expect("a version-1 spec reads");
    assert_eq!(old.version, 1);
    assert!(
        old.verify_digest(),
        "its digests are computed as they were written"
    );
    assert_eq!(
        old.to_json_pretty(),
        NESTED_V1.trim_end(),
        "and it writes back unchanged"
    );
    let new = specs_of("nested.reel", NESTED_SOURCE).remove(0);
    assert_eq!(new.version, 2);
    assert!(new.verify_digest());
    assert!(new.to_json().len() < old.to_json().len());
    // The same program, typed the same: only the version and the digests differ.
    let strip = |spec: &reel_flowspec::FlowSpec| {
        let mut spec = spec.clone();
        spec.version = 0;
        spec.digest.clear();
        for step in &mut spec.steps {
            step.semantic_digest.clear();
        }
        spec
    };
    assert_eq!(strip(&old), strip(&new));
    // A step without nested literals keeps its semantic digest; one with them does not.
    let digest =
        |spec: &reel_flowspec::FlowSpec, id: &str| spec.step(id).map(|s| s.semantic_digest.clone());
    assert_eq!(digest(&old, "flat"), digest(&new, "flat"));
    assert_ne!(digest(&old, "grid"), digest(&new, "grid"));
    // The new text reads back to the same spec, types of nested literals included.
    let back = reel_flowspec::FlowSpec::from_json(&new.to_json()).expect("reads back");
    assert_eq!(back, new);
}

#[test]
fn a_flow_without_nested_literals_is_still_version_1() {
    for (name, text) in reference_examples() {
        for spec in specs_of(&name, &text) {
            let nested = spec.to_json().contains("\"op\":\"list\",\"type\"");
            assert!(spec.version == 1 || !nested, "{name}");
        }
    }
    let flat = &specs_of(
        "f.reel",
        "flow f {\n  step s = [1, 2]\n  output { s: s }\n}\n",
    )[0];
    assert_eq!(flat.version, 1);
}

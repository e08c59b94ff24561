//! The digests a FlowSpec carries: each step's semantic digest and the digest of the whole spec.
//!
//! The spec digest names the program a run started with, so it covers everything, spans and
//! paths included: it is the SHA-256 of the canonical JSON of the spec with its `digest` member
//! removed (not emptied). A step's semantic digest answers "does this step call the same thing
//! with the same arguments?" for replay, fork and caching, so it leaves out whatever can change
//! without changing behaviour: spans, doc comments, the tool's directory, and `deps` (derived
//! from the expressions and `after`, which are covered themselves).

use std::ops::ControlFlow;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::args::Args;
use crate::canonical::{canonical_without, sha256_hex, sha256_hex_of, to_canonical_string};
use crate::document::{Mark, scan_json};
use crate::spec::{
    Duration, Expr, FORMAT_VERSION, FlowSpec, OLDEST_VERSION, Repeat, RetrySpec, StepSpec,
    ToolKind, ToolSpec, writing_implied_types,
};
use crate::types::Type;

/// From how many steps [`in_two_halves`] digests and writes them on two threads (below, a
/// thread costs more than it saves).
const PARALLEL_STEPS_FROM: usize = 512;

/// Where the steps go in the canonical text of a spec written without them: just after the `[`
/// of its top-level `"steps":[]` (a record literal elsewhere may have a member of that name, so
/// only the top-level object's counts). `None` when there is no such member.
fn steps_list(text: &str) -> Option<usize> {
    const MEMBER: &[u8] = b"\"steps\":[]";
    // A string's inner quotes are escaped, so only a member name can match at a string's start.
    scan_json(text, |mark| match mark {
        Mark::Str { at, depth: 1 } if text.as_bytes()[at..].starts_with(MEMBER) => {
            ControlFlow::Break(at + MEMBER.len() - 1)
        }
        _ => ControlFlow::Continue(()),
    })
}

/// SHA-256 (hex) of a spec's canonical text given that text without its steps (`shell`, whose
/// top-level `steps` member is empty) and a writer of its steps' texts: `write` gives each
/// step's canonical text, in order, to the sink it is handed.
///
/// The steps are most of the text (megabytes for a big flow), so the text is never assembled:
/// the hash takes the shell up to its empty list, each step's text as it is written, and the
/// rest of the shell. An object's canonical text does not depend on where it sits, so this is
/// the digest of the whole text (a test holds it to that).
///
/// A big flow's steps are written in two halves at once (`split` cuts them), one on a thread of
/// its own: digesting and writing the steps were most of sealing, and sealing most of lowering
/// a checked flow, and each step's part is independent of the others. The first half goes into
/// the hash as it is written; the second, which the hash reaches only after the first, is kept
/// as one text until then. The digest is the same either way; only when the work is done
/// changes. `write` sets up what its thread needs (how the spec's version writes) itself.
fn digest_of_steps<S>(
    shell: &str,
    items: S,
    split: impl FnOnce(S) -> (S, S),
    write: impl Fn(S, &mut dyn FnMut(&str)) + Sync,
) -> String
where
    S: Send + std::ops::Deref<Target = [StepSpec]>,
{
    let at = steps_list(shell).expect("a spec's canonical text has its `steps` member");
    let mut hasher = Sha256::new();
    hasher.update(&shell.as_bytes()[..at]);
    // A step's text is a JSON object, never empty: the first one written has no comma before it.
    let mut any = false;
    let mut feed = |text: &str| {
        if any {
            hasher.update(b",");
        }
        any = true;
        hasher.update(text.as_bytes());
    };
    if items.len() < PARALLEL_STEPS_FROM {
        write(items, &mut feed);
    } else {
        let (first, second) = split(items);
        let rest = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                let mut kept = String::new();
                write(second, &mut |text| {
                    if !kept.is_empty() {
                        kept.push(',');
                    }
                    kept.push_str(text);
                });
                kept
            });
            write(first, &mut feed);
            // A panic there is one here, as it would have been without the thread.
            other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        if !rest.is_empty() {
            feed(&rest);
        }
    }
    hasher.update(&shell.as_bytes()[at..]);
    sha256_hex_of(hasher)
}

/// What a step's semantic digest covers; field names are part of the digest, so never rename.
#[derive(Serialize)]
struct StepSemantics<'a> {
    id: &'a str,
    tool: Option<&'a str>,
    kind: ToolKind,
    args: &'a Args,
    value: Option<&'a Expr>,
    when: Option<&'a Expr>,
    foreach: Option<&'a Expr>,
    concurrency: u32,
    after: Vec<&'a str>,
    retry: &'a RetrySpec,
    timeout: Option<Duration>,
    #[serde(rename = "type")]
    ty: &'a Type,
    contract: Option<ToolContract<'a>>,
}

/// The part of a user tool that decides what a call does.
#[derive(Serialize)]
struct ToolContract<'a> {
    name: &'a str,
    kind: ToolKind,
    exec: &'a [String],
    input: &'a Type,
    output: &'a Type,
    /// Left out when it is the default, so a tool without `repeat` keeps its digests.
    #[serde(skip_serializing_if = "Repeat::is_with_key")]
    repeat: Repeat,
}

/// Whether `expr`, or an expression inside it, is a nested literal whose type version 2 leaves
/// out.
fn implies_a_type(expr: &Expr) -> bool {
    // An explicit stack: expressions read from a spec may nest deeper than the compiler writes.
    let mut todo = vec![expr];
    while let Some(e) = todo.pop() {
        if e.type_is_implied() {
            return true;
        }
        todo.extend(e.node.children());
    }
    false
}

/// The canonical text of data this crate defines, written straight from it (no `Value` tree:
/// building one for a whole spec cost `reel build` more than checking the flow).
fn canonical<T: Serialize>(data: &T) -> String {
    // The spec types have only string map keys, and their only numbers are integers or live in a
    // `Value` (always finite): the two ways canonical writing can fail.
    to_canonical_string(data).expect("FlowSpec data always has a canonical form")
}

/// SHA-256 of what `step` calls and with what; `tool` is the called user tool's contract, if any.
///
/// Covers id, tool, kind, args, value, when, foreach, concurrency, after (as a set), retry,
/// timeout, type and the user tool's name, kind, exec, input, output and `repeat` (when not
/// the default). Leaves out spans, doc comments, deps and the tool's directory, so moving or
/// documenting a step, or moving the project, keeps the digest.
pub fn step_semantic_digest(step: &StepSpec, tool: Option<&ToolSpec>) -> String {
    let mut after: Vec<&str> = step.after.iter().map(String::as_str).collect();
    // `after` only orders; listing a step twice or in another order means the same thing.
    after.sort_unstable();
    after.dedup();
    let semantics = StepSemantics {
        id: &step.id,
        tool: step.tool.as_deref(),
        kind: step.kind,
        args: &step.args,
        value: step.value.as_ref(),
        when: step.when.as_ref(),
        foreach: step.foreach.as_ref(),
        concurrency: step.concurrency,
        after,
        retry: &step.retry,
        timeout: step.timeout,
        ty: &step.ty,
        contract: tool.map(|t| ToolContract {
            name: &t.name,
            kind: t.kind,
            exec: &t.exec,
            input: &t.input,
            output: &t.output,
            repeat: t.repeat,
        }),
    };
    sha256_hex(canonical(&semantics).as_bytes())
}

impl FlowSpec {
    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<&StepSpec> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// The user tool `step` calls, if it calls one.
    pub fn tool_of(&self, step: &StepSpec) -> Option<&ToolSpec> {
        step.tool.as_deref().and_then(|name| self.tools.get(name))
    }

    /// Sets `version` to the oldest that can read the spec (3 if a tool is declared `repeat:
    /// "never"`, 2 if a nested literal's type is left out, else 1), then fills every step's
    /// `semantic_digest`, then the spec's `digest`.
    pub fn seal(&mut self) {
        self.version = if self.tools.values().any(|t| t.repeat == Repeat::Never) {
            FORMAT_VERSION
        } else if self.exprs().any(implies_a_type) {
            2
        } else {
            OLDEST_VERSION
        };
        // Each step's digest and then its canonical text (which includes the digest) in one
        // pass: one pair of threads rather than two, and each step read once.
        let shell = self.shell_text();
        let implied = self.version >= 2;
        let tools = &self.tools;
        let steps = &mut self.steps[..];
        self.digest = digest_of_steps(
            &shell,
            steps,
            |s| s.split_at_mut(s.len() / 2),
            |half, sink| {
                writing_implied_types(implied, || {
                    for step in half.iter_mut() {
                        let tool = step.tool.as_deref().and_then(|name| tools.get(name));
                        step.semantic_digest = step_semantic_digest(step, tool);
                        sink(&canonical(&*step));
                    }
                })
            },
        );
    }

    /// Every top-level expression of the spec: arguments, values, conditions, the output.
    fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.steps
            .iter()
            .flat_map(|s| {
                s.args
                    .values()
                    .chain(s.value.as_ref())
                    .chain(s.when.as_ref())
                    .chain(s.foreach.as_ref())
            })
            .chain(self.output.as_ref().map(|o| &o.expr))
    }

    /// Runs `write` with nested literals' types left out if this is a version-2 spec, and all
    /// written if it is version 1, so that a stored version-1 spec keeps its text and digests.
    fn written<R>(&self, write: impl FnOnce() -> R) -> R {
        writing_implied_types(self.version >= 2, write)
    }

    /// SHA-256 of the canonical JSON of this spec without its `digest` member.
    pub fn compute_digest(&self) -> String {
        digest_of_steps(
            &self.shell_text(),
            &self.steps[..],
            |s| s.split_at(s.len() / 2),
            |half, sink| {
                self.written(|| {
                    for step in half {
                        sink(&canonical(step));
                    }
                })
            },
        )
    }

    /// The canonical text of this spec without its `digest` member and with no steps: what
    /// [`digest_of_steps`] puts the steps' texts into.
    fn shell_text(&self) -> String {
        // Every field named, none copied by `..`: a field added to the spec is a compile error
        // here rather than a digest that leaves it out.
        let FlowSpec {
            format,
            version,
            name,
            doc,
            span,
            inputs,
            secrets,
            env,
            tools,
            steps: _,
            output,
            digest: _,
        } = self;
        let shell = FlowSpec {
            format: format.clone(),
            version: *version,
            name: name.clone(),
            doc: doc.clone(),
            span: span.clone(),
            inputs: inputs.clone(),
            secrets: secrets.clone(),
            env: env.clone(),
            tools: tools.clone(),
            steps: Vec::new(),
            output: output.clone(),
            digest: String::new(),
        };
        // Same invariant as `canonical`.
        self.written(|| canonical_without(&shell, "digest"))
            .expect("FlowSpec data always has a canonical form")
    }

    /// Whether `digest` and every step's `semantic_digest` match the spec's content.
    pub fn verify_digest(&self) -> bool {
        self.written(|| {
            self.steps
                .iter()
                .all(|step| step.semantic_digest == step_semantic_digest(step, self.tool_of(step)))
        }) && self.digest == self.compute_digest()
    }

    /// The canonical JSON (RFC 8785) of the whole spec, `digest` included.
    pub fn to_canonical_json(&self) -> String {
        self.written(|| canonical(self))
    }

    /// The spec as compact JSON, fields in declaration order: what a store keeps (half the
    /// size of the indented form, so half the reading when a run resumes).
    pub fn to_json(&self) -> String {
        // Room for about a kilobyte a step (a step of `echo` writes 600 bytes) from the start:
        // grown by doubling, the text of a 1,000-step spec touched twice its size in fresh
        // memory, each page a fault, and room reserved but not written costs nothing.
        let mut out = Vec::with_capacity(4096 + 1024 * self.steps.len());
        // Same invariant as `to_value`: nothing in a spec can fail to serialise.
        self.written(|| serde_json::to_writer(&mut out, self))
            .expect("FlowSpec data always converts to JSON");
        // serde_json writes valid UTF-8 only.
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// The spec as indented JSON, fields in declaration order, for people to read.
    pub fn to_json_pretty(&self) -> String {
        // Same invariant as `to_value`: nothing in a spec can fail to serialise.
        self.written(|| serde_json::to_string_pretty(self))
            .expect("FlowSpec data always converts to JSON")
    }

    /// [`Self::to_json_pretty`] written to `out` as it is made: a 100,000-step spec's text is
    /// 120 MB, which `reel build` need not hold (or grow, copying it) to write it.
    pub fn write_json_pretty(&self, out: impl std::io::Write) -> std::io::Result<()> {
        self.written(|| serde_json::to_writer_pretty(out, self))
            .map_err(std::io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::sample::sample_spec;
    use crate::spec::Node;

    fn sealed() -> FlowSpec {
        let mut spec = sample_spec();
        spec.seal();
        spec
    }

    fn semantic(spec: &FlowSpec, id: &str) -> String {
        spec.step(id)
            .map(|s| s.semantic_digest.clone())
            .unwrap_or_default()
    }

    #[test]
    fn seal_fills_every_digest() {
        let spec = sealed();
        assert_eq!(spec.digest.len(), 64);
        assert!(spec.steps.iter().all(|s| s.semantic_digest.len() == 64));
        assert!(spec.verify_digest());
    }

    /// The digest as it was always computed: of the whole canonical text at once.
    fn whole_text_digest(spec: &FlowSpec) -> String {
        let text = spec.written(|| canonical_without(spec, "digest")).unwrap();
        sha256_hex(text.as_bytes())
    }

    #[test]
    fn the_spec_digest_is_of_the_whole_canonical_text() {
        let mut spec = sealed();
        assert_eq!(spec.compute_digest(), whole_text_digest(&spec));
        // A member named `steps` holding an empty list, in the output (written before the
        // spec's own `steps`): only the top-level one is where the steps go.
        if let Some(output) = spec.output.as_mut() {
            output.expr.node = Node::Lit {
                value: json!({"steps": [], "x": {"steps": []}}),
            };
        }
        spec.seal();
        assert_eq!(spec.compute_digest(), whole_text_digest(&spec));
        // No steps at all.
        spec.steps.clear();
        spec.seal();
        assert_eq!(spec.compute_digest(), whole_text_digest(&spec));
        // A string holding what the member looks like, escaped as JSON escapes it.
        spec.name = "\"steps\":[]".into();
        spec.seal();
        assert_eq!(spec.compute_digest(), whole_text_digest(&spec));
    }

    #[test]
    fn a_big_flow_gets_the_digests_one_thread_gives() {
        // Past PARALLEL_STEPS_FROM steps, half are digested on another thread: each digest
        // must still be its own step's, in order, and under the same version's writing.
        let mut spec = sample_spec();
        let model = spec.steps.clone();
        spec.steps = (0..PARALLEL_STEPS_FROM + 3)
            .map(|i| {
                let mut step = model[i % model.len()].clone();
                step.id = format!("{}{i}", step.id);
                step
            })
            .collect();
        spec.seal();
        assert!(spec.verify_digest());
        assert_eq!(spec.digest, whole_text_digest(&spec));
        let one_thread: Vec<String> = spec.written(|| {
            spec.steps
                .iter()
                .map(|step| step_semantic_digest(step, spec.tool_of(step)))
                .collect()
        });
        let sealed: Vec<String> = spec
            .steps
            .iter()
            .map(|s| s.semantic_digest.clone())
            .collect();
        assert_eq!(sealed, one_thread);
        let distinct: std::collections::HashSet<&String> = sealed.iter().collect();
        assert_eq!(
            distinct.len(),
            sealed.len(),
            "every step is digested, none twice"
        );
    }

    #[test]
    fn spans_docs_deps_and_tool_dir_leave_semantic_digests_alone() {
        let before = sealed();
        let mut after = before.clone();
        for step in &mut after.steps {
            step.span.line += 10;
            step.span.file = "elsewhere/flow.reel".into();
            step.name_span.column += 3;
            step.doc = Some("a new comment".into());
            step.deps.reverse();
            step.after.reverse();
        }
        for tool in after.tools.values_mut() {
            tool.dir = "/moved/project/tools".into();
            tool.doc = None;
            tool.span.line = 99;
        }
        after.seal();
        for step in &before.steps {
            assert_eq!(semantic(&before, &step.id), semantic(&after, &step.id));
        }
        assert_ne!(before.digest, after.digest, "the spec digest covers spans");
    }

    #[test]
    fn an_argument_changes_the_semantic_digest() {
        let before = sealed();
        let mut after = before.clone();
        if let Some(step) = after.steps.iter_mut().find(|s| s.id == "fetch")
            && let Some(url) = step.args.get_mut("url")
        {
            url.node = Node::Lit {
                value: json!("https://example.com/other"),
            };
        }
        after.seal();
        assert_ne!(semantic(&before, "fetch"), semantic(&after, "fetch"));
        assert_eq!(semantic(&before, "classify"), semantic(&after, "classify"));
    }

    #[test]
    fn a_tool_contract_change_reaches_its_callers_only() {
        let before = sealed();
        let mut after = before.clone();
        if let Some(tool) = after.tools.get_mut("classifier") {
            tool.exec.push("--fast".into());
        }
        after.seal();
        assert_ne!(semantic(&before, "classify"), semantic(&after, "classify"));
        assert_eq!(semantic(&before, "fetch"), semantic(&after, "fetch"));
    }

    #[test]
    fn repeat_never_reaches_its_callers_and_raises_the_version() {
        let before = sealed();
        let mut after = before.clone();
        if let Some(tool) = after.tools.get_mut("classifier") {
            tool.repeat = Repeat::Never;
        }
        after.seal();
        // An older reader would attempt its calls again: it must refuse the spec instead.
        assert_eq!(after.version, 3);
        assert_ne!(semantic(&before, "classify"), semantic(&after, "classify"));
        assert_eq!(semantic(&before, "fetch"), semantic(&after, "fetch"));
        let text = after.to_json();
        assert!(text.contains(r#""repeat":"never""#), "{text}");
        let back = FlowSpec::from_json(&text).expect("a version-3 spec reads back");
        assert_eq!(back, after);
        // The default is left out: a tool without `repeat` keeps its spec and digests.
        if let Some(tool) = after.tools.get_mut("classifier") {
            tool.repeat = Repeat::WithKey;
        }
        after.seal();
        assert_eq!(after.version, before.version);
        assert_eq!(after.digest, before.digest);
        assert!(!after.to_json().contains("repeat"));
    }

    #[test]
    fn verify_notices_tampering() {
        let mut spec = sealed();
        spec.name = "renamed".into();
        assert!(!spec.verify_digest());

        let mut spec = sealed();
        spec.steps[0].concurrency += 1;
        spec.digest = spec.compute_digest();
        assert!(!spec.verify_digest(), "a stale semantic digest is caught");
    }

    #[test]
    fn digest_leaves_out_the_digest_member() {
        let spec = sealed();
        let mut value = serde_json::to_value(&spec).unwrap_or_default();
        if let Value::Object(map) = &mut value {
            map.remove("digest");
        }
        assert_eq!(spec.digest, crate::canonical::digest_value(&value));
    }
}

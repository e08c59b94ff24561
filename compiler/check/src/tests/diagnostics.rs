//! One small flow per diagnostic, rendered as the terminal shows it (insta snapshots: source above, verdict below).

use super::diagnostics;
use crate::render::terminal::render_terminal;

/// Checks that `src` gives exactly one diagnostic, with `code`, and snapshots its rendering.
fn check_one(name: &str, code: &str, src: &str) {
    let diags = diagnostics(src);
    let codes: Vec<&str> = diags.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, vec![code], "{name}: {diags:#?}");
    let rendered = render_terminal("test.reel", src, &diags, false);
    insta::assert_snapshot!(
        name,
        format!("----- SOURCE\n{src}\n----- DIAGNOSTICS\n{rendered}")
    );
}

macro_rules! diagnostic {
    ($name:ident, $code:literal, $src:literal) => {
        #[test]
        fn $name() {
            check_one(stringify!($name), $code, $src);
        }
    };
}

// Syntax.
diagnostic!(
    syntax_missing_value,
    "syntax.unexpected-token",
    "flow f {\n  step a = echo { value: }\n}\n"
);
diagnostic!(
    syntax_unclosed_brace,
    "syntax.unclosed-delimiter",
    "flow f {\n  step a = echo { value: [1, 2 }\n}\n"
);
diagnostic!(
    syntax_stray_closer,
    "syntax.unmatched-delimiter",
    "flow f {\n  step a = echo { value: 1 }\n}\n}\n"
);
diagnostic!(
    syntax_unterminated_string,
    "syntax.unterminated-string",
    "flow f {\n  step a = echo { value: \"hello }\n}\n"
);
diagnostic!(
    syntax_invalid_escape,
    "syntax.invalid-escape",
    "flow f {\n  step a = echo { value: \"C:\\dir\" }\n}\n"
);
diagnostic!(
    syntax_unexpected_character,
    "syntax.unexpected-character",
    "flow f {\n  step a = echo { value: 1; }\n}\n"
);
diagnostic!(
    syntax_invalid_duration,
    "syntax.invalid-duration",
    "flow f {\n  step a = sleep { for: 10sec }\n}\n"
);
diagnostic!(
    syntax_fractional_duration,
    "syntax.invalid-duration",
    "flow f {\n  step a = sleep { for: 1.5s }\n}\n"
);
diagnostic!(
    syntax_invalid_number,
    "syntax.invalid-number",
    "flow f {\n  step a = echo { value: 99999999999999999999 }\n}\n"
);
diagnostic!(
    syntax_assign_in_block,
    "syntax.unexpected-token",
    "flow f {\n  step a = echo { value = 1 }\n}\n"
);

// Types as written.
diagnostic!(
    type_unknown,
    "type.unknown",
    "flow f {\n  input n: integer\n  output input.n\n}\n"
);
diagnostic!(
    type_bare_list,
    "type.unknown",
    "flow f {\n  input xs: list\n  output input.xs\n}\n"
);
diagnostic!(
    type_double_optional,
    "lint.double-optional",
    "flow f {\n  input n: int?? = null\n  output input.n\n}\n"
);
diagnostic!(
    type_duplicate_record_field,
    "name.duplicate-field",
    "flow f {\n  input p: { x: int, x: int }\n  output input.p\n}\n"
);
diagnostic!(
    type_secret_input,
    "type.secret-input",
    "flow f {\n  input token: secret\n  output 1\n}\n"
);

// Names.
diagnostic!(
    name_unknown_step,
    "name.unknown",
    "flow f {\n  step greeting = \"hi\"\n  step a = echo { value: greting }\n}\n"
);
diagnostic!(
    name_input_without_namespace,
    "name.unknown",
    "flow f {\n  input who: string\n  step a = echo { value: who }\n}\n"
);
diagnostic!(
    name_unknown_input,
    "name.unknown-input",
    "flow f {\n  input name: string\n  step a = echo { value: input.nme }\n}\n"
);
diagnostic!(
    name_unknown_env,
    "name.unknown-env",
    "flow f {\n  step a = echo { value: env.HOME }\n}\n"
);
diagnostic!(
    name_unknown_secret,
    "name.unknown-secret",
    "flow f {\n  secret token\n  step a = http.get { url: \"http://x\", bearer: secret.tokn }\n  output a.status\n}\n"
);
diagnostic!(
    name_bare_namespace,
    "name.bare-namespace",
    "flow f {\n  step a = echo { value: input }\n}\n"
);
diagnostic!(
    name_item_outside_foreach,
    "name.item-outside-foreach",
    "flow f {\n  step a = echo { value: item }\n}\n"
);
diagnostic!(
    name_item_in_when,
    "name.item-outside-foreach",
    "flow f {\n  step a = echo {\n    foreach: [1, 2]\n    when: item > 1\n    value: item\n  }\n}\n"
);
diagnostic!(
    name_unknown_function,
    "name.unknown-function",
    "flow f {\n  step a = echo { value: lenght([1]) }\n}\n"
);
diagnostic!(
    name_unknown_tool,
    "name.unknown-tool",
    "flow f {\n  step a = http.gett { url: \"http://x\" }\n}\n"
);
diagnostic!(
    name_duplicate_step,
    "name.duplicate",
    "flow f {\n  step a = echo { value: 1 }\n  step a = echo { value: 2 }\n}\n"
);
diagnostic!(
    name_step_shadows_input,
    "name.duplicate",
    "flow f {\n  input a: int\n  step a = echo { value: input.a }\n}\n"
);
diagnostic!(
    name_reserved_step,
    "name.reserved",
    "flow f {\n  step item = echo { value: 1 }\n}\n"
);
diagnostic!(
    name_duplicate_argument,
    "name.duplicate-argument",
    "flow f {\n  step a = echo {\n    value: 1\n    value: 2\n  }\n}\n"
);
diagnostic!(
    name_duplicate_record_key,
    "name.duplicate-field",
    "flow f {\n  step a = echo { value: { x: 1, x: 2 } }\n}\n"
);
diagnostic!(
    name_duplicate_flow,
    "name.duplicate",
    "flow f {\n  output 1\n}\n\nflow f {\n  output 2\n}\n"
);

// Types of expressions.
diagnostic!(
    type_mismatch_argument,
    "type.mismatch",
    "flow f {\n  step a = fs.read { path: 42 }\n  output a.text\n}\n"
);
diagnostic!(
    type_optional_argument,
    "type.optional",
    "flow f {\n  input path: string?\n  step a = fs.read { path: input.path }\n  output a.text\n}\n"
);
diagnostic!(
    type_optional_access,
    "type.optional-access",
    "flow f {\n  input flag: bool\n  step a = fs.read {\n    when: input.flag\n    path: \"x\"\n  }\n  output a.text\n}\n"
);
diagnostic!(
    type_unknown_field,
    "type.unknown-field",
    "flow f {\n  step a = fs.read { path: \"x\" }\n  output a.txt\n}\n"
);
diagnostic!(
    type_no_fields,
    "type.no-fields",
    "flow f {\n  input n: int\n  output input.n.value\n}\n"
);
diagnostic!(
    type_index_record,
    "type.index",
    "flow f {\n  input k: string\n  step a = fs.read { path: \"x\" }\n  output a[input.k]\n}\n"
);
diagnostic!(
    type_operator,
    "type.operator",
    "flow f {\n  input n: int\n  output \"count: \" + input.n\n}\n"
);
diagnostic!(
    type_optional_operand,
    "type.optional",
    "flow f {\n  input n: int?\n  output input.n + 1\n}\n"
);
diagnostic!(
    type_when_not_bool,
    "type.mismatch",
    "flow f {\n  input n: int\n  step a = echo {\n    when: input.n\n    value: 1\n  }\n}\n"
);
diagnostic!(
    type_foreach_not_list,
    "type.mismatch",
    "flow f {\n  input n: int\n  step a = echo {\n    foreach: input.n\n    value: item\n  }\n}\n"
);
diagnostic!(
    type_if_condition,
    "type.mismatch",
    "flow f {\n  input n: int\n  output if input.n then 1 else 2\n}\n"
);
diagnostic!(
    call_arity,
    "call.arity",
    "flow f {\n  input s: string\n  output split(input.s)\n}\n"
);
diagnostic!(
    call_argument_type,
    "type.argument",
    "flow f {\n  input n: int\n  output upper(input.n)\n}\n"
);
diagnostic!(
    needless_coalesce,
    "lint.needless-coalesce",
    "flow f {\n  input n: int\n  output input.n ?? 0\n}\n"
);

// The taint rule.
diagnostic!(
    taint_secret_in_interpolation,
    "taint.secret-in-expression",
    "flow f {\n  secret token\n  step a = http.get {\n    url: \"http://x\"\n    headers: { authorization: \"Bearer ${secret.token}\" }\n  }\n  output a.status\n}\n"
);
diagnostic!(
    taint_secret_in_call,
    "taint.secret-in-expression",
    "flow f {\n  secret token\n  output len(secret.token)\n}\n"
);
diagnostic!(
    taint_secret_to_string_parameter,
    "taint.secret-in-expression",
    "flow f {\n  secret token\n  step a = http.get { url: secret.token }\n  output a.status\n}\n"
);
diagnostic!(
    secret_parameter_needs_secret,
    "type.mismatch",
    "flow f {\n  input token: string\n  step a = http.get { url: \"http://x\", bearer: input.token }\n  output a.status\n}\n"
);

// Tool calls.
diagnostic!(
    tool_missing_argument,
    "tool.missing-argument",
    "flow f {\n  step a = fs.write { path: \"out.txt\" }\n}\n"
);
diagnostic!(
    tool_sleep_needs_for_or_until,
    "tool.missing-argument",
    "flow f {\n  step a = sleep {}\n}\n"
);
diagnostic!(
    tool_unknown_argument,
    "tool.unknown-argument",
    "flow f {\n  step a = fs.read { path: \"x\", encodng: \"utf8\" }\n  output a.text\n}\n"
);
diagnostic!(
    tool_conflicting_arguments,
    "tool.conflicting-arguments",
    "flow f {\n  step a = http.post { url: \"http://x\", json: {}, body: \"x\" }\n}\n"
);

// Meta-arguments.
diagnostic!(
    meta_constant_when,
    "lint.constant-when",
    "flow f {\n  step a = echo {\n    when: 1 > 2\n    value: 1\n  }\n}\n"
);
diagnostic!(
    meta_concurrency_without_foreach,
    "lint.concurrency-without-foreach",
    "flow f {\n  step a = echo {\n    concurrency: 2\n    value: 1\n  }\n}\n"
);
diagnostic!(
    meta_concurrency_zero,
    "meta.concurrency",
    "flow f {\n  step a = echo {\n    foreach: [1]\n    concurrency: 0\n    value: item\n  }\n}\n"
);
diagnostic!(
    meta_after_expression,
    "meta.after",
    "flow f {\n  step a = echo { value: 1 }\n  step b = echo {\n    after: [a.x]\n    value: 2\n  }\n}\n"
);
diagnostic!(
    meta_after_unknown,
    "name.unknown-step",
    "flow f {\n  step first = echo { value: 1 }\n  step b = echo {\n    after: [frist]\n    value: 2\n  }\n}\n"
);
diagnostic!(
    meta_after_itself,
    "dag.self-dependency",
    "flow f {\n  step b = echo {\n    after: [b]\n    value: 2\n  }\n}\n"
);
diagnostic!(
    meta_retry_unknown_setting,
    "meta.retry",
    "flow f {\n  step a = echo {\n    retry: { max: 3, backof: \"exp\" }\n    value: 1\n  }\n}\n"
);
diagnostic!(
    meta_retry_on_wait,
    "meta.retry",
    "flow f {\n  step a = signal {\n    name: \"go\"\n    retry: { max: 3 }\n  }\n}\n"
);
diagnostic!(
    meta_timeout_not_duration,
    "meta.duration",
    "flow f {\n  step a = echo {\n    timeout: 30\n    value: 1\n  }\n}\n"
);

// The DAG.
diagnostic!(
    dag_cycle,
    "dag.cycle",
    "flow f {\n  step a = echo { value: c }\n  step b = echo { value: a }\n  step c = echo { value: b }\n}\n"
);
diagnostic!(
    dag_self_reference,
    "dag.cycle",
    "flow f {\n  step a = echo { value: [a] }\n}\n"
);

// Declarations.
diagnostic!(
    flow_duplicate_output,
    "flow.duplicate-output",
    "flow f {\n  output 1\n  output 2\n}\n"
);
diagnostic!(
    input_default_not_constant,
    "input.default-not-constant",
    "flow f {\n  input a: int = 1\n  input b: int = input.a\n  output input.a + input.b\n}\n"
);
diagnostic!(
    input_default_wrong_type,
    "type.mismatch",
    "flow f {\n  input a: int = \"one\"\n  output input.a\n}\n"
);

// Warnings.
diagnostic!(
    unused_input,
    "lint.unused-input",
    "flow f {\n  input name: string\n  output 1\n}\n"
);
diagnostic!(
    unused_secret,
    "lint.unused-secret",
    "flow f {\n  secret token\n  output 1\n}\n"
);
diagnostic!(
    unused_env,
    "lint.unused-env",
    "flow f {\n  env HOME\n  output 1\n}\n"
);
diagnostic!(
    unused_step,
    "lint.unused-step",
    "flow f {\n  step page = http.get { url: \"http://x\" }\n  output 1\n}\n"
);

// User tools.
diagnostic!(
    tool_decl_builtin_name,
    "name.builtin-tool",
    "tool echo {\n  kind: \"pure\"\n  exec: [\"cat\"]\n}\n"
);
diagnostic!(
    tool_decl_missing_kind,
    "tool.missing-kind",
    "tool t {\n  exec: [\"cat\"]\n}\n"
);
diagnostic!(
    tool_decl_missing_exec,
    "tool.missing-exec",
    "tool t {\n  kind: \"pure\"\n}\n"
);
diagnostic!(
    tool_decl_invalid_kind,
    "tool.invalid-kind",
    "tool t {\n  kind: \"efect\"\n  exec: [\"cat\"]\n}\n"
);
diagnostic!(
    tool_decl_invalid_exec,
    "tool.invalid-exec",
    "tool t {\n  kind: \"pure\"\n  exec: \"python3 t.py\"\n}\n"
);
diagnostic!(
    tool_decl_unknown_entry,
    "tool.unknown-entry",
    "tool t {\n  kind: \"pure\"\n  exec: [\"cat\"]\n  exe: [\"cat\"]\n}\n"
);
diagnostic!(
    tool_decl_duplicate_entry,
    "tool.duplicate-entry",
    "tool t {\n  kind: \"pure\"\n  kind: \"read\"\n  exec: [\"cat\"]\n}\n"
);
diagnostic!(
    tool_decl_reserved_parameter,
    "tool.reserved-parameter",
    "tool t {\n  kind: \"pure\"\n  exec: [\"cat\"]\n  input { timeout: int }\n}\n"
);
diagnostic!(
    tool_decl_schema_value,
    "tool.invalid-schema",
    "tool t {\n  kind: \"pure\"\n  exec: [\"cat\"]\n  input: { text: string }\n}\n"
);
diagnostic!(
    tool_decl_result_checked,
    "type.unknown-field",
    "tool t {\n  kind: \"pure\"\n  exec: [\"cat\"]\n  input { text: string }\n  output { words: int }\n}\n\nflow f {\n  step a = t { text: \"x\" }\n  output a.word\n}\n"
);
diagnostic!(
    tool_decl_argument_type,
    "type.mismatch",
    "tool t {\n  kind: \"effect\"\n  exec: [\"cat\"]\n  input { count: int }\n}\n\nflow f {\n  step a = t { count: \"three\" }\n}\n"
);

#[test]
fn many_independent_mistakes_are_each_reported_once() {
    let src = r#"tool t {
  kind: "efect"
  exec: ["cat"]
}

flow f {
  input n: int = 1
  input n: int = 2
  secret token
  step a = echo { value: input.m }
  step b = fs.read { path: 42 }
  step c = echo { value: len(secret.token) }
  step d = echo { value: unknown_step }
  step e = http.gett { url: "x" }
  step g = sleep { for: 1s, until: "2026-01-01T00:00:00Z" }
  step h = echo { value: item }
  step i = echo { value: j }
  step j = echo { value: i }
  step k = echo { value: upper(1) }
  output {
    b: b.txt
  }
}
"#;
    let codes: Vec<&str> = diagnostics(src).iter().map(|d| d.code.as_str()).collect();
    assert_eq!(
        codes,
        vec![
            "tool.invalid-kind",
            "name.duplicate",
            "name.unknown-input",
            "type.mismatch",
            "taint.secret-in-expression",
            "name.unknown",
            "name.unknown-tool",
            "tool.conflicting-arguments",
            "name.item-outside-foreach",
            "dag.cycle",
            "type.argument",
            "type.unknown-field",
        ]
    );
}

diagnostic!(
    type_secret_in_record_input,
    "type.secret-input",
    "flow f {\n  input r: { k: secret }\n  output input.r\n}\n"
);
diagnostic!(
    type_secret_in_tool_output,
    "type.secret-nested",
    "tool t {\n  kind: \"read\"\n  exec: [\"cat\"]\n  output { token: secret }\n}\n"
);
diagnostic!(
    type_secret_inside_parameter,
    "type.secret-nested",
    "tool t {\n  kind: \"read\"\n  exec: [\"cat\"]\n  input { auth: { token: secret } }\n}\n"
);
diagnostic!(
    tool_echo_needs_value,
    "tool.missing-argument",
    "flow f {\n  step a = echo {}\n}\n"
);
diagnostic!(
    syntax_duration_too_long,
    "syntax.invalid-duration",
    "flow f {\n  step a = sleep { for: 99999999999999999999s }\n}\n"
);
diagnostic!(
    tool_decl_invalid_repeat,
    "tool.invalid-repeat",
    "tool t {\n  kind: \"effect\"\n  exec: [\"cat\"]\n  repeat: \"no\"\n}\n"
);
diagnostic!(
    tool_decl_repeat_on_a_read_tool,
    "tool.invalid-repeat",
    "tool t {\n  kind: \"read\"\n  exec: [\"cat\"]\n  repeat: \"never\"\n}\n"
);
diagnostic!(
    broken_tool_is_reported_once,
    "tool.invalid-kind",
    "tool t {\n  kind: \"efect\"\n  exec: [\"cat\"]\n}\n\nflow f {\n  step a = t { x: 1 }\n}\n"
);

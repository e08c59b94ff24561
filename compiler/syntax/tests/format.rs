//! `reel fmt` on whole files: the reference examples, and snapshots of messy inputs.

mod support;

use support::check_format;

fn examples() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/reference");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the reference examples are in the repository") {
        let path = entry.expect("a readable directory").path();
        if path.extension().is_some_and(|e| e == "reel") {
            let text = std::fs::read_to_string(&path).expect("a readable example");
            out.push((path.display().to_string(), text));
        }
    }
    assert!(!out.is_empty());
    out.sort();
    out
}

#[test]
fn every_reference_example_formats_to_a_fixed_point_with_its_meaning_and_comments() {
    for (path, text) in examples() {
        eprintln!("{path}");
        check_format(&text);
    }
}

#[test]
fn the_reference_examples_are_already_in_the_canonical_layout() {
    for (path, text) in examples() {
        assert_eq!(check_format(&text), text, "{path}");
    }
}

#[test]
fn a_file_with_syntax_errors_is_returned_as_its_diagnostics() {
    let src = "flow f {\n  input a: = 3\n  step b = echo { value: 1 + }\n}\n";
    let err = reel_syntax::format::format(src).expect_err("the file has syntax errors");
    assert_eq!(err.diagnostics, reel_syntax::parse(src).diagnostics);
    assert_eq!(err.diagnostics.len(), 2);
}

#[test]
fn bad_indentation() {
    insta::assert_snapshot!(check_format(
        r#"
      /// Messy.
flow   messy{
input a :int=1,input b: list< string >
	secret   token
        env HOME
   step x=echo{value:a
  when : a>0,   timeout:10s}



      step y =x.value+1
output{a:x,
      b : y}
}
tool   t{kind:"pure",exec:["a","b"]
input{text:string}
   output {
      ok: bool
   }}
"#
    ));
}

#[test]
fn comments_everywhere() {
    insta::assert_snapshot!(check_format(
        r#"// File header.

// About the flow, not its doc.

/// The flow's doc.
/// Second line.
flow f { // after the brace
  // before the input
  input a: int // the input
  /// Doc of b.
  input b: { // record type
    x: int // x
    // before y
    y: string?
  }

  step s = echo { // block header
    // first argument
    value: [ // list header
      1, // one
      // two is next
      2,
      // no more elements
    ]
    json: {
      k: a + // inside a binary
        b
      // end of record
    }
    after: [] // nothing
    // last in block
  } // after the step

  step p = if a // the condition
    then b
    else f( // arguments
      a, // first
      b
    )
  /// orphan doc

  step q = "${a + // in a string
    b}"
  // before the end
} // after the flow
// end of file
"#
    ));
}

#[test]
fn long_records_and_lists() {
    insta::assert_snapshot!(check_format(
        r#"flow long {
  input options: { name: string, description: string, labels: list<string>, owner: string?, priority: int } = { name: "a fairly long name", description: "and a description" }
  step call = http.post {
    url: "https://api.example.com/repos/${input.options.name}/issues"
    json: { title: "a title that is long enough", body: "a body that is long enough to overflow", labels: ["x"] }
    headers: { accept: "application/json" }
    retry: { max: 3, backoff: "exp", base: 200ms, jitter: true }
  }
  output { id: call.body.id, url: call.body.url, labels: call.body.labels, status: call.status, ok: true }
}
"#
    ));
}

#[test]
fn nested_lists() {
    insta::assert_snapshot!(check_format(
        r#"flow nested {
  step a = [[1, 2], [3, [4, 5]], []]
  step b = [
    [1, 2], [3,
      4],
    [[5], [6, [7,
      8]]],
  ]
  step c = [[ "a very long string that fills the line", "another very long string", "and a third one" ], [1]]
  step d = [for row in b if len(row) > 0: [for x in row: x * 2]]
}
"#
    ));
}

#[test]
fn all_expression_forms() {
    insta::assert_snapshot!(check_format(
        r#"flow exprs {
  input n: int = -3
  input when: bool? ? = null
  input nested: list<list<{ a: int?, "b-c": string }>> = []
  env HOME
  step literals = [42, 1.50, 250ms, 10s, 5m, 2h, 7d, true, false, null, "text"]
  step strings = ["quote \" backslash \\ newline \n tab \t dollar $ and \${not} ${input.n}", "$${input.n}", "\$x"]
  step access = literals[0]?.a.b["key"]?.if ?? env.HOME
  step ops = !(a||b)&&c==d!=e<f<=g>h>=i??j+k-l*m/n%-o
  step parens = ((a + b)) * (c)
  step cond = if a then if b then 1 else 2 else 3
  step calls = max(len(x), sum([1, 2]), to_string(now()))
  step comp = [for x in range(10) if x % 2 == 0: { "value": x, "key-x": x, in: x }]
  step record = { "for": 1, "b": 2, "with space": 3, "": 4 }
  step multi = a +
    b -
    c
  output { "ok": true }
}
"#
    ));
}

#[test]
fn tools() {
    insta::assert_snapshot!(check_format(
        r#"/// A tool.
tool classify { kind: "pure", exec: ["python3", "tools/classify.py"], input { text: string }, output { severity: string, labels: list<string> } }

tool wide {
  kind: "effect"
  exec: ["python3", "tools/a_tool_with_a_rather_long_name.py", "--with", "arguments", "--and", "more"]
  input { attempts_before_success: int, marker: string, description: string?, labels: list<string>, extra: json }
  output {} // nothing
}

tool empty {}

flow uses {
  step a = classify { text: "x" }
  step b = wide {}
}
"#
    ));
}

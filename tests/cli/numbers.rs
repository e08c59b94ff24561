//! Integers are 64-bit end to end: inputs, arithmetic, interpolation, tool output, the store.

use crate::support::*;

#[test]
fn integers_beyond_two_to_the_53_keep_every_digit_through_a_run_and_its_resume() {
    let dir = temp();
    write(
        dir.path(),
        "big.reel",
        r#"flow big {
  input id: int
  step echoed = echo { value: { id: input.id } }
  step shown = exec { cmd: ["echo", "{\"id\": 1234567890123456789}"] }
  output {
    id: input.id
    plus: input.id + 1
    text: "${input.id}"
    echoed: echoed.id
    tool: shown.json.id
    tool_text: "${shown.json.id}"
  }
}
"#,
    );
    let home = dir.path().join(".reel");
    let home = home.to_str().unwrap();
    let r = reel_env(
        dir.path(),
        &[
            "run",
            "big.reel",
            "--input",
            "id=1234567890123456789",
            "--json",
        ],
        &[("REEL_HOME", home)],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let expected = r#""output":{"echoed":1234567890123456789,"id":1234567890123456789,"plus":1234567890123456790,"text":"1234567890123456789","tool":1234567890123456789,"tool_text":"1234567890123456789"}"#;
    assert!(r.stdout.contains(expected), "{}", r.stdout);
    // The output read back from the store keeps the digits too.
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let again = reel_env(
        dir.path(),
        &["resume", &id, "--json"],
        &[("REEL_HOME", home)],
    );
    assert_eq!(again.status, 0, "{again:?}");
    assert!(again.stdout.contains(expected), "{}", again.stdout);
}

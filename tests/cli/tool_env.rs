//! What a tool process sees of the environment: the base, the flow's declared `env`, the step's
//! `env` and the key; nothing else of the shell that started `reel`.

use crate::support::*;

#[test]
fn a_tool_sees_only_the_base_the_declared_env_and_its_own() {
    let dir = temp();
    write(
        dir.path(),
        "env.reel",
        "flow env_seen {\n  env GREETING\n  step seen = exec { cmd: [\"env\"], env: { STEP_VAR: \"mine\" } }\n  output seen.stdout\n}\n",
    );
    let home = dir.path().join(".reel");
    let r = reel_env(
        dir.path(),
        &["run", "env.reel", "--json"],
        &[
            ("REEL_HOME", home.to_str().unwrap()),
            ("GREETING", "hello"),
            ("LEAKY_SHELL_VAR", "from the shell"),
            ("REEL_SECRET_UNUSED", "hunter2"),
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let seen = json(&r)["output"].as_str().unwrap().to_string();
    assert!(seen.contains("GREETING=hello\n"), "{seen}");
    assert!(seen.contains("STEP_VAR=mine\n"), "{seen}");
    assert!(seen.contains("REEL_IDEMPOTENCY_KEY="), "{seen}");
    assert!(seen.contains("PATH="), "{seen}");
    assert!(!seen.contains("LEAKY_SHELL_VAR"), "{seen}");
    assert!(!seen.contains("hunter2"), "{seen}");
    assert!(!seen.contains("REEL_HOME"), "{seen}");
}

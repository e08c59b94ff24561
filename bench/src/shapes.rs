//! The two flow shapes whose growth the runtime benchmarks measure: a chain of sequential
//! `echo` steps and one wide `foreach` of `echo` calls. `run-bench` runs them in-process,
//! `scale-bench` as whole `reel` commands.

/// The name of the flow both shapes declare.
pub const FLOW_NAME: &str = "bench";

/// `n` (at least 1) `echo` steps, each reading the one before; the output is the last.
pub fn sequential_echo(n: usize) -> String {
    let n = n.max(1);
    let mut s = String::from("flow bench {\n  step s0 = echo { value: 0 }\n");
    for i in 1..n {
        s.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    s.push_str(&format!("  output s{}\n}}\n", n - 1));
    s
}

/// One `foreach` step of `n` `echo` calls, at most `concurrency` in flight at once; the output
/// is the length of the step's list (so the whole list is read once, at the end).
pub fn foreach_echo(n: usize, concurrency: usize) -> String {
    format!(
        "flow bench {{\n  step f = echo {{\n    foreach: range({n})\n    concurrency: {concurrency}\n    value: item\n  }}\n  output len(f)\n}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapes_read_as_written() {
        assert_eq!(
            sequential_echo(3),
            "flow bench {\n  step s0 = echo { value: 0 }\n  step s1 = echo { value: s0 + 1 }\n  \
             step s2 = echo { value: s1 + 1 }\n  output s2\n}\n"
        );
        assert_eq!(
            foreach_echo(5, 2),
            "flow bench {\n  step f = echo {\n    foreach: range(5)\n    concurrency: 2\n    \
             value: item\n  }\n  output len(f)\n}\n"
        );
    }
}

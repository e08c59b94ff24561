//! Choosing the flow of a file that a command acts on (`--flow NAME`), shared by `build` and the
//! commands that run flows.

use super::Failure;

/// The flow to use among `flows` (declared in `file`): `wanted` if given, else the only one.
///
/// Exit 2 when the file declares none, when it declares several and `wanted` is `None`, or when
/// `wanted` is not among them; the message lists the flows and suggests a close name.
pub fn select(file: &str, flows: &[String], wanted: Option<&str>) -> Result<String, Failure> {
    let listed = || {
        flows
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match wanted {
        Some(name) if flows.iter().any(|f| f == name) => Ok(name.to_string()),
        Some(name) if flows.is_empty() => Err(Failure::usage(format!(
            "`{file}` has no flow named `{name}`: it declares no flow at all"
        ))),
        Some(name) => {
            let hint = match reel_compiler::suggest::closest(name, flows.iter().map(String::as_str))
            {
                Some(close) => format!("did you mean `{close}`? "),
                None => String::new(),
            };
            Err(Failure::usage(format!(
                "`{file}` has no flow named `{name}`; {hint}its flows: {}",
                listed()
            )))
        }
        None => match flows {
            [] => Err(Failure::usage(format!(
                "`{file}` declares no flow; add one with `flow NAME {{ ... }}`"
            ))),
            [only] => Ok(only.clone()),
            _ => Err(Failure::usage(format!(
                "`{file}` declares {} flows; choose one with `--flow NAME`: {}",
                flows.len(),
                listed()
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Status;

    fn flows(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn message(result: Result<String, Failure>) -> String {
        let failure = result.unwrap_err();
        assert_eq!(failure.status, Status::Usage);
        failure.messages.join("\n")
    }

    #[test]
    fn the_only_flow_needs_no_name() {
        assert_eq!(select("a.reel", &flows(&["hello"]), None).unwrap(), "hello");
    }

    #[test]
    fn a_named_flow_is_chosen() {
        let two = flows(&["hello", "bye"]);
        assert_eq!(select("a.reel", &two, Some("bye")).unwrap(), "bye");
    }

    #[test]
    fn several_flows_need_a_name() {
        assert_eq!(
            message(select("a.reel", &flows(&["hello", "bye"]), None)),
            "`a.reel` declares 2 flows; choose one with `--flow NAME`: `hello`, `bye`"
        );
    }

    #[test]
    fn an_unknown_name_lists_the_flows_and_suggests_one() {
        assert_eq!(
            message(select("a.reel", &flows(&["hello", "bye"]), Some("helo"))),
            "`a.reel` has no flow named `helo`; did you mean `hello`? its flows: `hello`, `bye`"
        );
        assert_eq!(
            message(select("a.reel", &flows(&["hello"]), Some("zzz"))),
            "`a.reel` has no flow named `zzz`; its flows: `hello`"
        );
    }

    #[test]
    fn a_file_without_flows_says_so() {
        assert_eq!(
            message(select("a.reel", &[], None)),
            "`a.reel` declares no flow; add one with `flow NAME { ... }`"
        );
        assert!(message(select("a.reel", &[], Some("x"))).contains("declares no flow at all"));
    }
}

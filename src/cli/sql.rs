//! `reel sql`: one read-only SQL query over the store's views, printed as a table or as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use reel_store::{QueryAnswer, QueryLimits, StoreError};
use serde_json::Value;

use super::project::Project;
use super::ui::{Ui, plural, print_stdout};
use super::{Failure, Status};

/// Run one read-only SQL query against the store (SQLite or PostgreSQL, whichever is
/// selected) and print its rows. The views `reel_runs`, `reel_steps`, `reel_calls` and
/// `reel_events` are the same, and stable, on both stores; the tables under them are not.
///
/// A query is stopped after `--timeout` (60s unless given; on PostgreSQL by the server, which
/// also stops it when `reel sql` is stopped or killed) and when it answers more than
/// `--max-rows` rows (100000 unless given); `0` lifts either limit.
///
/// Exit status: 0 answered, 1 the store cannot be opened, 2 a query the database refuses (its
/// message is shown), one that would write, or one stopped at a limit.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel sql \"SELECT run FROM reel_steps WHERE step = 'charge' AND status = 'failed'\"\n  \
    reel sql --json \"SELECT id, flow, error_code FROM reel_runs WHERE status = 'failed'\"")]
pub struct Args {
    /// The query: one statement that only reads.
    #[arg(value_name = "QUERY")]
    query: String,

    /// Print the rows as a JSON array of objects (one key per column, in order) on stdout.
    #[arg(long)]
    json: bool,

    /// Stop the query after this long: 500ms, 30s, 10m, 2h; 0 for no limit.
    #[arg(long, value_name = "DUR", default_value = "60s")]
    timeout: String,

    /// Stop the query when it answers more than this many rows; 0 for no limit.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    max_rows: usize,
}

impl Args {
    /// The limits the flags set.
    fn limits(&self) -> Result<QueryLimits, Failure> {
        let text = self.timeout.as_str();
        let ms = if text == "0" {
            0
        } else {
            reel_flowspec::Duration::parse(text)
                .ok_or_else(|| {
                    Failure::usage(if reel_flowspec::Duration::is_too_long(text) {
                        format!(
                            "`--timeout {text}` is longer than Reel can count: write a shorter \
                             duration, or 0 for no limit"
                        )
                    } else {
                        format!(
                            "`--timeout {text}` is not a duration: write it as 500ms, 30s, 10m \
                             or 2h, or 0 for no limit"
                        )
                    })
                })?
                .millis()
        };
        Ok(QueryLimits {
            timeout: (ms > 0).then(|| Duration::from_millis(ms)),
            max_rows: (self.max_rows > 0).then_some(self.max_rows),
        })
    }
}

/// Runs `reel sql`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let limits = args.limits()?;
    let project = Project::current()?;
    if !project.store_exists() {
        return Err(Failure::failed(format!(
            "there is no store at {} yet: run a flow first",
            project.store_shown()
        )));
    }
    // Read-only first, so a database user that may only read can query; a store whose schema
    // is older than this reel's (no views yet: the read-only opening's message says "older
    // than this reel's") is opened to write, which migrates it. Any other failure is told as
    // it is, rather than met a second time (a server that does not answer, waited for twice).
    let store = match project.open_read_only() {
        Ok(store) => store,
        Err(e) if e.message().contains("older than this reel's") => project.open_store()?,
        Err(e) => return Err(e),
    };
    let answer = store.query(&args.query, limits).map_err(|e| match e {
        StoreError::Query(_)
        | StoreError::QueryWrites(_)
        | StoreError::QueryTimeout { .. }
        | StoreError::QueryRows { .. } => Failure::usage(e.to_string()),
        other => Failure::failed(other.to_string()),
    })?;
    if args.json {
        print_stdout(&json_rows(&answer)?)?;
    } else {
        print_stdout(&table(&answer))?;
        ui.line(&format!("({})", plural(answer.rows.len(), "row")));
    }
    Ok(Status::Success)
}

/// The rows as a JSON array of objects whose keys keep the columns' order.
fn json_rows(answer: &QueryAnswer) -> Result<String, Failure> {
    for (i, name) in answer.columns.iter().enumerate() {
        if answer.columns[..i].contains(name) {
            return Err(Failure::usage(format!(
                "the column `{name}` appears twice, so JSON objects cannot hold both: name \
                 them apart with AS"
            )));
        }
    }
    let mut out = String::from("[");
    for (r, row) in answer.rows.iter().enumerate() {
        out.push_str(if r == 0 { "\n  {" } else { ",\n  {" });
        for (i, (name, value)) in answer.columns.iter().zip(row).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{}: {value}", Value::from(name.as_str()));
        }
        out.push('}');
    }
    out.push_str(if answer.rows.is_empty() {
        "]\n"
    } else {
        "\n]\n"
    });
    Ok(out)
}

/// A value as a table cell: NULL spelled out, text without its quotes and on one line.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "NULL".to_string(),
        Value::String(s) => s.replace('\n', "\\n"),
        other => other.to_string(),
    }
}

/// The rows as a table: a header, then one line per row, columns padded to their widest cell.
fn table(answer: &QueryAnswer) -> String {
    let cells: Vec<Vec<String>> = answer
        .rows
        .iter()
        .map(|row| row.iter().map(cell).collect())
        .collect();
    let widths: Vec<usize> = answer
        .columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([name.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, v) in values.enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let _ = write!(out, "{v:<width$}", width = widths[i]);
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut answer.columns.iter().map(String::as_str));
    for row in &cells {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer() -> QueryAnswer {
        QueryAnswer {
            columns: vec!["run".into(), "attempts".into(), "error_code".into()],
            rows: vec![
                vec![json!("r1"), json!(2), json!("tool.failed")],
                vec![json!("r22"), json!(10), Value::Null],
            ],
        }
    }

    #[test]
    fn a_table_pads_columns_and_spells_out_null() {
        assert_eq!(
            table(&answer()),
            "run  attempts  error_code\n\
             r1   2         tool.failed\n\
             r22  10        NULL\n"
        );
    }

    #[test]
    fn json_rows_keep_the_columns_order() {
        assert_eq!(
            json_rows(&answer()).unwrap(),
            "[\n  {\"run\": \"r1\", \"attempts\": 2, \"error_code\": \"tool.failed\"},\n  \
             {\"run\": \"r22\", \"attempts\": 10, \"error_code\": null}\n]\n"
        );
        let twice = QueryAnswer {
            columns: vec!["id".into(), "id".into()],
            rows: Vec::new(),
        };
        assert!(json_rows(&twice).unwrap_err().message().contains("AS"));
        assert_eq!(json_rows(&QueryAnswer::default()).unwrap(), "[]\n");
    }
}

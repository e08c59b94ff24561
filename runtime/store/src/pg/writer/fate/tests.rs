//! The fate of a batch whose session ended, decided from its runs' rows: a table of batches,
//! the rows the writer finds afterwards, and what it concludes (each command's answer when the
//! batch was committed).

use std::collections::HashMap;

use super::{Fate, RunNow, Xact, decide, runs_named, told_by_rows};
use crate::api::{Durability, NewRun, Owner, StoreError};
use crate::writer::{Cmd, Row, Tag, Update};

/// This process, as the runs' rows name it.
const ME: &str = "host:1:1";

fn me() -> Owner {
    Owner {
        id: ME.to_string(),
        pid: 1,
        host: "host".to_string(),
        started: 1,
    }
}

fn tag(run: &str, token: u64) -> Tag {
    Tag {
        run: run.to_string(),
        token,
        durable: true,
    }
}

/// A batch written as words: `append a 1 0..3` (run `a`, token 1, rows 0 to 2), `update a 1`,
/// `release a 1`, `sync a 1`, `log a 1`, `create c`, `value`, `cancel a`.
fn batch(words: &[&str]) -> Vec<Cmd> {
    words.iter().map(|w| command(w)).collect()
}

fn command(text: &str) -> Cmd {
    let w: Vec<&str> = text.split(' ').collect();
    let token = || w[2].parse::<u64>().unwrap();
    match w[0] {
        "append" => {
            let (first, end) = w[3].split_once("..").unwrap();
            let (first, end): (u64, u64) = (first.parse().unwrap(), end.parse().unwrap());
            Cmd::Append {
                tag: tag(w[1], token()),
                first_seq: first,
                rows: (first..end)
                    .map(|_| Row {
                        at: 0,
                        kind: "step_started".to_string(),
                        step: None,
                        index: None,
                        attempt: None,
                        data: "{}".to_string(),
                    })
                    .collect(),
                kept: Vec::new(),
            }
        }
        "update" => Cmd::Update {
            tag: tag(w[1], token()),
            update: Update {
                status: Some("succeeded"),
                due_at: None,
                waiting_on: None,
                clear_signal_pending: false,
                ended_at: Some(1),
                output_digest: None,
                error: None,
            },
        },
        "release" => Cmd::Release {
            tag: tag(w[1], token()),
            reply: tokio::sync::oneshot::channel().0,
        },
        "sync" => Cmd::Sync {
            tag: tag(w[1], token()),
            reply: tokio::sync::oneshot::channel().0,
        },
        "log" => Cmd::Log {
            tag: tag(w[1], token()),
            log: crate::api::LogRow {
                run: w[1].to_string(),
                step: "s".to_string(),
                index: None,
                attempt: 1,
                at: 0,
                text: "hello".to_string(),
            },
        },
        "create" => Cmd::Create {
            run: Box::new(NewRun {
                id: w[1].to_string(),
                flow: "f".to_string(),
                flow_digest: "d".to_string(),
                source: None,
                source_abs: None,
                cwd: "/".to_string(),
                parent: None,
                keep_for_ms: None,
                durability: Durability::Durable,
                created_at: 0,
                first_events: Vec::new(),
                kept: Vec::new(),
            }),
            rows: Vec::new(),
            owner: me(),
            lease_ms: 1000,
            reply: std::sync::mpsc::sync_channel(1).0,
        },
        "value" => Cmd::Value {
            digest: "v".to_string(),
            text: crate::writer::ValueText::Inline("1".into()),
            size: 1,
        },
        // `signal a go 5`: to run `a`, named `go`, first tried at 5 (`-`: never tried).
        "signal" => Cmd::Signal {
            run: w[1].to_string(),
            name: w[2].to_string(),
            payload: crate::api::Kept {
                digest: "p".to_string(),
                text: "1".into(),
                spec: false,
                epoch: 0,
            },
            seq: 0,
            sent_at: w[3].parse().ok(),
            reply: std::sync::mpsc::sync_channel(1).0,
        },
        "claim" => Cmd::Claim {
            run: w[1].to_string(),
            owner: me(),
            lease_ms: 1000,
            out: crate::writer::ClaimOut::NotFound,
            reply: std::sync::mpsc::sync_channel(1).0,
        },
        "cancel" => Cmd::Cancel {
            run: w[1].to_string(),
            done: false,
            reply: std::sync::mpsc::sync_channel(1).0,
        },
        other => panic!("no command `{other}`"),
    }
}

/// Rows written as `a 1 3` (run `a`, token 1, `next_seq` 3, held by this process) or
/// `a 2 3 other` (held by another), and its status after (`a 1 3 - canceled`; `-`: nobody
/// holds it; `running` when not written); signals, as `sent a go 5 #2` (to run `a`, named `go`,
/// sent at 5, number 2), are [`signals_found`]'s, and what is known of the transaction
/// (`xact never`, `xact committed`, `xact aborted`) [`xact`]'s.
fn rows(words: &[&str]) -> HashMap<String, RunNow> {
    words
        .iter()
        .filter(|text| !text.starts_with("sent ") && !text.starts_with("xact "))
        .map(|text| {
            let w: Vec<&str> = text.split(' ').collect();
            let row = RunNow {
                token: w[1].parse().unwrap(),
                next_seq: w[2].parse().unwrap(),
                owner: match w.get(3).copied().unwrap_or(ME) {
                    "-" => None,
                    owner => Some(owner.to_string()),
                },
                status: w.get(4).copied().unwrap_or("running").to_string(),
                durability: "durable".to_string(),
            };
            (w[0].to_string(), row)
        })
        .collect()
}

/// What `found` says of the batch's transaction: its `COMMIT` never went out (`xact never`),
/// the server told what became of it (`xact committed`, `xact aborted`), or nothing.
fn xact(found: &[&str]) -> Xact {
    match found.iter().find_map(|t| t.strip_prefix("xact ")) {
        Some("never") => Xact::NotCommitted,
        Some("committed") => Xact::Told(true),
        Some("aborted") => Xact::Told(false),
        Some(other) => panic!("no transaction `{other}`"),
        None => Xact::Unknown,
    }
}

/// The signals of `batch` that `found` holds (`sent a go 5 #2`), by their command's place.
fn signals_found(batch: &[Cmd], found: &[&str]) -> HashMap<usize, u64> {
    let mut sent = HashMap::new();
    for text in found.iter().filter_map(|t| t.strip_prefix("sent ")) {
        let w: Vec<&str> = text.split(' ').collect();
        let number = w[3].trim_start_matches('#').parse().unwrap();
        for (at, cmd) in batch.iter().enumerate() {
            if let Cmd::Signal {
                run,
                name,
                sent_at: Some(sent_at),
                ..
            } = cmd
                && run == w[0]
                && name == w[1]
                && sent_at.to_string() == w[2]
            {
                sent.insert(at, number);
            }
        }
    }
    sent
}

/// The fate in words: `not written`, `unknown`, or `written: ok, store.lease-lost, …`.
fn shown(fate: &Fate) -> String {
    match fate {
        Fate::NotWritten => "not written".to_string(),
        Fate::Unknown => "unknown".to_string(),
        Fate::Written(results) => {
            let each: Vec<&str> = results
                .iter()
                .map(|r| r.as_ref().map_or_else(StoreError::code, |()| "ok"))
                .collect();
            format!("written: {}", each.join(", "))
        }
    }
}

/// What a case shows, the batch, the rows found, the runs poisoned before (`run token`), and
/// the fate.
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    &'a [&'a str],
    &'a [&'a str],
    &'a str,
);

#[test]
fn a_batch_s_fate_is_what_its_runs_rows_tell() {
    // (what the case shows, the batch, the rows found, runs poisoned before, the fate)
    let cases: &[Case] = &[
        (
            "the run's journal ends where the batch's appends begin",
            &["value", "append a 1 3..5", "sync a 1"],
            &["a 1 3"],
            &[],
            "not written",
        ),
        (
            "the run's journal ends where the batch's appends end",
            &[
                "value",
                "append a 1 3..5",
                "update a 1",
                "release a 1",
                "sync a 1",
            ],
            &["a 1 5"],
            &[],
            "written: ok, ok, ok, ok, ok",
        ),
        (
            "a run's appends one after another in one batch tell as one",
            &["append a 1 3..4", "log a 1", "append a 1 4..6"],
            &["a 1 6"],
            &[],
            "written: ok, ok, ok",
        ),
        (
            "the journal ends elsewhere, as a fast commit the server lost leaves it",
            &["append a 1 3..5"],
            &["a 1 2"],
            &[],
            "unknown",
        ),
        (
            "the only run was taken over since: nothing tells, and an append must not run twice",
            &["append a 1 3..5", "sync a 1"],
            &["a 2 7 other"],
            &[],
            "unknown",
        ),
        (
            "a run taken over answers lease-lost, and so do its later commands",
            &[
                "append a 1 0..2",
                "append b 1 8..9",
                "update b 1",
                "sync b 1",
                "sync a 1",
            ],
            &["a 1 2", "b 2 9 other"],
            &[],
            "written: ok, store.lease-lost, store.lease-lost, store.lease-lost, ok",
        ),
        (
            "a run poisoned before answers with its poison; another run tells",
            &["append a 1 0..2", "append b 1 8..9", "sync b 1"],
            &["a 1 2", "b 1 8"],
            &["b 1"],
            "written: ok, store.poisoned, store.poisoned",
        ),
        (
            "two runs disagree",
            &["append a 1 0..2", "append b 1 8..9"],
            &["a 1 2", "b 1 8"],
            &[],
            "unknown",
        ),
        (
            "a run the batch creates is not there",
            &["create c", "append a 1 0..2"],
            &[],
            &[],
            "not written",
        ),
        (
            "a run the batch creates is there, held by this process",
            &["create c", "sync c 1"],
            &["c 1 0"],
            &[],
            "written: ok, ok",
        ),
        (
            "a run the batch creates is there, held by another",
            &["create c"],
            &["c 1 0 other"],
            &[],
            "unknown",
        ),
        (
            "committed with a command whose answer only the lost answer held",
            &["append a 1 0..2", "signal s go 5"],
            &["a 1 2"],
            &[],
            "unknown",
        ),
        (
            "not committed with such a command: it is written again",
            &["append a 1 0..2", "claim x"],
            &["a 1 0", "x 1 0 other"],
            &[],
            "not written",
        ),
        (
            "a signal sent: found as it was sent",
            &["signal a go 5"],
            &["sent a go 5 #2"],
            &[],
            "written: ok",
        ),
        (
            "a signal sent: not found",
            &["signal a go 5"],
            &["sent a go 4 #1"],
            &[],
            "not written",
        ),
        (
            "a signal never tried (the session ended before its turn)",
            &["append b 1 0..1", "signal a go -"],
            &["b 1 0"],
            &[],
            "not written",
        ),
        (
            "a signal found beside appends that went in",
            &["append b 1 0..1", "signal a go 5"],
            &["b 1 1", "sent a go 5 #0"],
            &[],
            "written: ok, ok",
        ),
        (
            "a claim of this process's holds the run",
            &["claim x"],
            &["x 2 4"],
            &[],
            "written: ok",
        ),
        (
            "a claim that holds nothing changed nothing either way",
            &["claim x"],
            &["x 2 4 other"],
            &[],
            "not written",
        ),
        (
            "a claim that holds nothing in a batch that was written: its answer is lost",
            &["append a 1 0..2", "claim x"],
            &["a 1 2", "x 2 4 other"],
            &[],
            "unknown",
        ),
        (
            "a cancel alone may be asked again",
            &["cancel z"],
            &["z 1 4 - canceled"],
            &[],
            "not written",
        ),
        (
            "a cancel beside appends that went in",
            &["append a 1 0..2", "cancel z", "cancel gone"],
            &["a 1 2", "z 1 4 - canceled"],
            &[],
            "written: ok, ok, store.not-found",
        ),
        (
            "nothing tells, and every command may run twice",
            &["value", "update a 1", "release a 1", "sync a 1"],
            &["a 1 4"],
            &[],
            "not written",
        ),
        (
            "nothing tells, and a log line must not be kept twice",
            &["log a 1", "sync a 1"],
            &["a 1 4"],
            &[],
            "unknown",
        ),
        (
            "the session ended before the COMMIT went out: the server rolled it back",
            &["log a 1", "sync a 1"],
            &["a 1 4", "xact never"],
            &[],
            "not written",
        ),
        (
            "the COMMIT went out, the server says it was made",
            &["log a 1", "sync a 1"],
            &["a 1 4", "xact committed"],
            &[],
            "written: ok, ok",
        ),
        (
            "the COMMIT went out, the server says it was not",
            &["log a 1", "sync a 1"],
            &["a 1 4", "xact aborted"],
            &[],
            "not written",
        ),
        (
            "made, with a run taken over since: its commands answer lease-lost",
            &["log a 1", "log b 1"],
            &["a 1 4", "b 2 0 other", "xact committed"],
            &[],
            "written: ok, store.lease-lost",
        ),
        (
            "made, with a signal whose number is not found: only the lost answer held it",
            &["signal a go 5"],
            &["xact committed"],
            &[],
            "unknown",
        ),
        (
            "never committed, whatever the rows say",
            &["append a 1 3..5"],
            &["a 1 5", "xact never"],
            &[],
            "not written",
        ),
    ];
    let mut wrong = Vec::new();
    for (shows, words, found, poisoned, expected) in cases {
        let batch = batch(words);
        let now = rows(found);
        let poisoned: Vec<(String, u64)> = poisoned
            .iter()
            .map(|p| {
                let (run, token) = p.split_once(' ').unwrap();
                (run.to_string(), token.parse().unwrap())
            })
            .collect();
        let is_poisoned = |run: &str, token: u64| {
            poisoned
                .iter()
                .any(|(r, t)| r == run && *t == token)
                .then(|| StoreError::Poisoned {
                    run: run.to_string(),
                    message: "before".to_string(),
                })
        };
        let fate = shown(&decide(
            &batch,
            xact(found),
            &now,
            &signals_found(&batch, found),
            &is_poisoned,
        ));
        if fate != *expected {
            wrong.push(format!(
                "{shows}:\n  expected {expected}\n  found    {fate}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_runs_read_are_those_the_batch_writes_or_creates() {
    let batch = batch(&[
        "value",
        "append b 1 0..1",
        "create c",
        "sync a 1",
        "log b 1",
    ]);
    assert_eq!(runs_named(&batch), ["a", "b", "c"]);
}

#[test]
fn a_batch_is_told_by_rows_when_it_appends_creates_or_may_run_twice() {
    for (words, told) in [
        (&["value", "append a 1 0..2", "log a 1"][..], true),
        (&["create c", "cancel z"][..], true),
        (&["update a 1", "release a 1", "sync a 1"][..], true),
        (&["log a 1", "sync a 1"][..], false),
        (&["cancel z", "claim x"][..], true),
        (&["signal a go 5"][..], false),
    ] {
        assert_eq!(told_by_rows(&batch(words)), told, "{words:?}");
    }
}

#[test]
fn a_committed_batch_s_answers_are_read_from_the_rows() {
    let mut batch = batch(&[
        "claim x",
        "signal a go 5",
        "cancel z",
        "cancel y",
        "cancel w",
    ]);
    let now = rows(&[
        "x 3 7",
        "z 1 4 - canceled",
        "y 1 4 - succeeded",
        "w 1 4 other",
    ]);
    let sent = signals_found(&batch, &["sent a go 5 #4"]);
    super::fill_answers(&mut batch, &now, &sent);
    let answers: Vec<String> = batch
        .iter()
        .map(|cmd| match cmd {
            Cmd::Claim { out, .. } => format!("{out:?}"),
            Cmd::Signal { seq, .. } => format!("signal {seq}"),
            Cmd::Cancel { done, .. } => format!("cancel done {done}"),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        answers,
        [
            "Claimed { token: 3, next_seq: 7, durability: Durable }",
            "signal 4",
            "cancel done true",
            "cancel done false",
            "cancel done true",
        ]
    );
}

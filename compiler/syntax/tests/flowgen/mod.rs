//! Random valid Reel source files for property tests: flows and tools with every form of
//! expression, in messy but legal layouts, with comments wherever a line may break.
//!
//! The files parse without diagnostics; they are not meant to type-check (references point at
//! arbitrary names). Line breaks are put only after a token that continues an expression (an
//! operator, an opening delimiter, a comma or colon, `if` or `else`) or before a closing
//! delimiter, where the lexer drops them, and between entries, where they separate.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

/// A comment's text: anything but a line break, delimiters and escapes included.
fn comment_text() -> BoxedStrategy<String> {
    "[a-z {}\"$/\\\\é]{0,12}".boxed()
}

/// A line break, perhaps after a comment, before an own-line comment or with an empty line.
fn line_break() -> BoxedStrategy<String> {
    let indent = select(vec!["", " ", "  ", "    ", "\t", "       "]);
    prop_oneof![
        3 => indent.clone().prop_map(|i| format!("\n{i}")),
        2 => (comment_text(), indent.clone()).prop_map(|(c, i)| format!(" //{c}\n{i}")),
        1 => (comment_text(), indent.clone()).prop_map(|(c, i)| format!("\n{i}// {c}\n{i}")),
        1 => (comment_text(), indent.clone()).prop_map(|(c, i)| format!("\n{i}/// {c}\n{i}")),
        1 => indent.prop_map(|i| format!("\n\n{i}")),
    ]
    .boxed()
}

/// White space where a line may break; never empty.
fn brk() -> BoxedStrategy<String> {
    prop_oneof![
        8 => Just(" ".to_string()),
        5 => line_break(),
    ]
    .boxed()
}

/// What separates two entries of a block or record: a comma, a line break or both.
fn separator() -> BoxedStrategy<String> {
    prop_oneof![brk().prop_map(|b| format!(",{b}")), line_break(),].boxed()
}

/// A word usable as a key or member name, keywords included.
fn word() -> BoxedStrategy<String> {
    select(vec![
        "a", "b", "x", "value", "name", "url", "json", "for", "if", "in", "then", "else", "input",
        "output", "step", "flow", "tool", "null", "true", "é_1", "_k",
    ])
    .prop_map(str::to_string)
    .boxed()
}

/// A record key: a word, or a quoted string that is or is not a word.
fn key() -> BoxedStrategy<String> {
    prop_oneof![
        4 => word(),
        1 => select(vec!["\"a\"", "\"b-c\"", "\"\"", "\"with space\"", "\"if\"", "\"q\\\"\""])
            .prop_map(str::to_string),
    ]
    .boxed()
}

/// Literal text of a string, written with escapes; never ends in a `$` (a `${` could follow).
fn string_text() -> BoxedStrategy<String> {
    let piece = select(vec![
        "a", "b c", "é", "→", "{", "}", ":", ",", "\\\"", "\\\\", "\\n", "\\t", "\\$", "\\${",
        "$ ", "$x", "\t", "//",
    ]);
    vec(piece, 0..4).prop_map(|p| p.concat()).boxed()
}

/// A literal or a reference.
fn leaf() -> BoxedStrategy<String> {
    prop_oneof![
        any::<u32>().prop_map(|n| n.to_string()),
        (0u32..1000, "[0-9]{1,3}").prop_map(|(a, b)| format!("{a}.{b}")),
        (0u32..500, select(vec!["ms", "s", "m", "h", "d"])).prop_map(|(n, u)| format!("{n}{u}")),
        select(vec!["true", "false", "null"]).prop_map(str::to_string),
        select(vec![
            "input.name",
            "env.HOME",
            "item",
            "index",
            "s0",
            "fetch.body",
            "secret.token",
            "input",
        ])
        .prop_map(str::to_string),
        string_text().prop_map(|t| format!("\"{t}\"")),
    ]
    .boxed()
}

/// A binary operator and whether a line break may follow it.
fn operator() -> BoxedStrategy<(&'static str, bool)> {
    select(vec![
        ("||", true),
        ("&&", true),
        ("==", true),
        ("!=", true),
        ("<", true),
        ("<=", true),
        (">", false),
        (">=", true),
        ("??", true),
        ("+", true),
        ("-", true),
        ("*", true),
        ("/", true),
        ("%", true),
    ])
    .boxed()
}

/// Entries joined by `sep`, each preceded by nothing (the caller adds what opens the block).
fn joined(entries: Vec<(String, String)>) -> String {
    let mut out = String::new();
    for (i, (sep, entry)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push_str(&sep);
        }
        out.push_str(&entry);
    }
    out
}

/// An expression of any form, nested a few levels deep.
pub fn expr() -> BoxedStrategy<String> {
    leaf()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                (inner.clone(), operator(), brk(), inner.clone()).prop_map(
                    |(l, (op, breaks), b, r)| {
                        let gap = if breaks { b } else { " ".to_string() };
                        format!("{l} {op}{gap}{r}")
                    }
                ),
                (select(vec!["!", "-"]), inner.clone()).prop_map(|(op, e)| format!("{op}{e}")),
                (brk(), inner.clone(), brk()).prop_map(|(a, e, b)| format!("({a}{e}{b})")),
                (inner.clone(), select(vec![".", "?."]), word())
                    .prop_map(|(e, dot, w)| format!("{e}{dot}{w}")),
                (inner.clone(), brk(), inner.clone()).prop_map(|(e, b, i)| format!("{e}[{b}{i}]")),
                (
                    select(vec!["len", "max", "join", "f", "now"]),
                    vec((brk(), inner.clone()), 0..3),
                    brk()
                )
                    .prop_map(|(f, args, end)| {
                        let args: Vec<_> = args
                            .into_iter()
                            .map(|(b, a)| (format!(",{b}"), a))
                            .collect();
                        format!("{f}({}{end})", joined(args))
                    }),
                (
                    brk(),
                    vec((brk(), inner.clone()), 0..4),
                    any::<bool>(),
                    brk()
                )
                    .prop_map(|(open, items, trailing, close)| {
                        let n = items.len();
                        let items: Vec<_> = items
                            .into_iter()
                            .map(|(b, e)| (format!(",{b}"), e))
                            .collect();
                        let comma = if trailing && n > 0 { "," } else { "" };
                        format!("[{open}{}{comma}{close}]", joined(items))
                    }),
                (
                    brk(),
                    vec((separator(), key(), brk(), inner.clone()), 0..4),
                    brk()
                )
                    .prop_map(|(open, fields, close)| {
                        let fields: Vec<_> = fields
                            .into_iter()
                            .map(|(s, k, b, v)| (s, format!("{k}:{b}{v}")))
                            .collect();
                        format!("{{{open}{}{close}}}", joined(fields))
                    }),
                (inner.clone(), brk(), inner.clone(), brk(), inner.clone())
                    .prop_map(|(c, b1, t, b2, o)| format!("if{b1}{c} then {t} else{b2}{o}")),
                (
                    select(vec!["x", "row", "é"]),
                    inner.clone(),
                    option::of(inner.clone()),
                    brk(),
                    inner.clone()
                )
                    .prop_map(|(v, iter, cond, b, body)| {
                        let cond = cond.map(|c| format!(" if {c}")).unwrap_or_default();
                        format!("[for {v} in {iter}{cond}:{b}{body}]")
                    }),
                (vec((string_text(), inner.clone()), 1..3), string_text()).prop_map(
                    |(parts, end)| {
                        let body: String = parts
                            .into_iter()
                            .map(|(text, e)| format!("{text}${{{e}}}"))
                            .collect();
                        format!("\"{body}{end}\"")
                    }
                ),
            ]
        })
        .boxed()
}

/// A type, nested a few levels deep.
fn ty() -> BoxedStrategy<String> {
    let named = select(vec![
        "string", "int", "float", "bool", "duration", "json", "secret",
    ])
    .prop_map(str::to_string);
    named
        .prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|t| format!("list<{t}>")),
                // `??` is one token, after which a line break would not separate.
                inner.clone().prop_map(|t| if t.ends_with('?') {
                    format!("{t} ?")
                } else {
                    format!("{t}?")
                }),
                (brk(), vec((separator(), key(), inner.clone()), 0..3), brk()).prop_map(
                    |(open, fields, close)| {
                        let fields: Vec<_> = fields
                            .into_iter()
                            .map(|(s, k, t)| (s, format!("{k}: {t}")))
                            .collect();
                        format!("{{{open}{}{close}}}", joined(fields))
                    }
                ),
            ]
        })
        .boxed()
}

/// The key and value of a tool step's argument: a meta-argument or a tool parameter.
fn argument() -> BoxedStrategy<(String, String)> {
    let named = |k: &'static str, v: BoxedStrategy<String>| v.prop_map(move |v| (k.to_string(), v));
    prop_oneof![
        1 => named("when", expr().boxed()),
        1 => named("foreach", expr().boxed()),
        1 => named("concurrency", (1u32..16).prop_map(|n| n.to_string()).boxed()),
        1 => named(
            "retry",
            (1u32..5, select(vec!["exp", "fixed"]), 1u32..900, any::<bool>())
                .prop_map(|(m, b, base, j)| {
                    format!("{{ max: {m}, backoff: \"{b}\", base: {base}ms, jitter: {j} }}")
                })
                .boxed()
        ),
        1 => named("timeout", (1u32..60).prop_map(|n| format!("{n}s")).boxed()),
        1 => named(
            "after",
            vec(select(vec!["s0", "s1", "s2"]), 0..3)
                .prop_map(|v| format!("[{}]", v.join(", ")))
                .boxed()
        ),
        3 => (key(), expr()),
    ]
    .boxed()
}

/// One member of a flow, numbered `n` so names stay unique.
fn member(n: usize) -> BoxedStrategy<String> {
    let doc = option::weighted(0.3, comment_text()).prop_map(|d| match d {
        Some(d) => format!("/// {d}\n"),
        None => String::new(),
    });
    let body = prop_oneof![
        1 => (ty(), option::of(expr()))
            .prop_map(move |(t, d)| match d {
                Some(d) => format!("input in{n}: {t} = {d}"),
                None => format!("input in{n}: {t}"),
            }),
        1 => Just(format!("secret sec{n}")),
        1 => Just(format!("env ENV{n}")),
        3 => (
            select(vec!["echo", "http.get", "exec", "classify", "fs.write"]),
            brk(),
            vec((separator(), argument(), brk()), 0..5),
            brk(),
        )
            .prop_map(move |(tool, open, args, close)| {
                let args: Vec<_> = args
                    .into_iter()
                    .map(|(s, (k, v), b)| (s, format!("{k}:{b}{v}")))
                    .collect();
                format!("step s{n} = {tool} {{{open}{}{close}}}", joined(args))
            }),
        2 => expr().prop_map(move |e| format!("step s{n} = {e}")),
    ];
    (doc, body).prop_map(|(d, b)| format!("{d}{b}")).boxed()
}

/// A flow with a few members and an output.
fn flow(n: usize) -> BoxedStrategy<String> {
    let members = (1usize..6).prop_flat_map(|count| {
        (0..count)
            .map(|i| (separator(), member(i)))
            .collect::<Vec<_>>()
    });
    (members, option::of(expr()), brk(), brk())
        .prop_map(move |(members, output, open, close)| {
            let mut body = joined(members);
            if let Some(o) = output {
                body.push_str(&format!("\noutput {o}"));
            }
            format!("flow f{n} {{{open}{body}{close}}}")
        })
        .boxed()
}

/// A user tool declaration.
fn tool(n: usize) -> BoxedStrategy<String> {
    let fields = || {
        (brk(), vec((separator(), key(), ty()), 0..3), brk()).prop_map(|(open, fields, close)| {
            let fields: Vec<_> = fields
                .into_iter()
                .map(|(s, k, t)| (s, format!("{k}: {t}")))
                .collect();
            format!("{{{open}{}{close}}}", joined(fields))
        })
    };
    (
        select(vec!["pure", "read", "effect"]),
        fields(),
        fields(),
        separator(),
        separator(),
    )
        .prop_map(move |(kind, input, output, s1, s2)| {
            format!(
                "tool t{n} {{\n  kind: \"{kind}\"{s1}exec: [\"python3\", \"t.py\"]{s2}input {input}\n  output {output}\n}}"
            )
        })
    .boxed()
}

/// A whole file: one to three flows and tools, with comments and doc comments around them.
pub fn file() -> BoxedStrategy<String> {
    let item = |n: usize| {
        let doc = option::weighted(0.5, comment_text()).prop_map(|d| match d {
            Some(d) => format!("/// {d}\n"),
            None => String::new(),
        });
        let decl = prop_oneof![3 => flow(n), 1 => tool(n)];
        let before = select(vec!["\n", "\n\n", "\n// between\n", "\n\n\n// x\n\n"]);
        (before, doc, decl).prop_map(|(b, d, i)| format!("{b}{d}{i}"))
    };
    (1usize..4)
        .prop_flat_map(move |count| (0..count).map(item).collect::<Vec<_>>())
        .prop_map(|items| format!("// generated\n{}\n", items.concat()))
        .boxed()
}

//! A hand-built FlowSpec for tests: every expression node, every type, a user tool, retry,
//! timeout, `when`, `foreach` and an output.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::args::Args;
use crate::document::FORMAT;
use crate::spec::*;
use crate::types::{RecordField, Type};

fn span(line: u32) -> SourceSpan {
    SourceSpan {
        file: "flows/triage.reel".into(),
        line,
        column: 3,
        end_line: line,
        end_column: 40,
    }
}

fn e(node: Node, ty: Type) -> Expr {
    Expr::new(node, ty)
}

fn lit(value: Value, ty: Type) -> Expr {
    e(Node::Lit { value }, ty)
}

fn boxed(node: Node, ty: Type) -> Box<Expr> {
    Box::new(e(node, ty))
}

fn body_type() -> Type {
    Type::record([
        ("status".to_owned(), Type::Int),
        ("headers".to_owned(), Type::Json),
        ("body".to_owned(), Type::Json),
    ])
}

fn step(id: &str, tool: Option<&str>, kind: ToolKind, ty: Type, line: u32) -> StepSpec {
    StepSpec {
        id: id.into(),
        tool: tool.map(str::to_owned),
        kind,
        args: Args::new(),
        value: None,
        deps: Vec::new(),
        when: None,
        foreach: None,
        concurrency: 8,
        after: Vec::new(),
        retry: RetrySpec::none(),
        timeout: None,
        ty,
        doc: None,
        span: span(line),
        name_span: span(line),
        semantic_digest: String::new(),
    }
}

/// The sample, unsealed.
pub(crate) fn sample_spec() -> FlowSpec {
    let repo = || {
        e(
            Node::Input {
                name: "repo".into(),
            },
            Type::String,
        )
    };
    let fetch = || {
        e(
            Node::Step {
                name: "fetch".into(),
            },
            body_type(),
        )
    };
    let classify = || {
        e(
            Node::Step {
                name: "classify".into(),
            },
            Type::record([
                ("severity".to_owned(), Type::String),
                ("labels".to_owned(), Type::list(Type::String)),
            ]),
        )
    };

    let mut fetch_step = step("fetch", Some("http.get"), ToolKind::Read, body_type(), 10);
    fetch_step.args.insert(
        "url".into(),
        e(
            Node::Interp {
                parts: vec![
                    lit(json!("https://api.example.com/repos/"), Type::String),
                    repo(),
                    lit(json!("/issues"), Type::String),
                ],
            },
            Type::String,
        ),
    );
    fetch_step.args.insert(
        "bearer".into(),
        e(
            Node::Secret {
                name: "token".into(),
            },
            Type::Secret,
        ),
    );
    fetch_step.args.insert(
        "headers".into(),
        e(
            Node::Record {
                fields: vec![RecordEntry {
                    name: "x-home".into(),
                    value: e(
                        Node::Env {
                            name: "HOME".into(),
                        },
                        Type::String,
                    ),
                }],
            },
            Type::record([("x-home".to_owned(), Type::String)]),
        ),
    );
    fetch_step.retry = RetrySpec::default_for_io();
    fetch_step.timeout = Some(Duration(10_000));

    let mut classify_step = step(
        "classify",
        Some("classifier"),
        ToolKind::Pure,
        classify().ty,
        20,
    );
    classify_step.deps = vec!["fetch".into()];
    classify_step.args.insert(
        "text".into(),
        e(
            Node::Member {
                base: Box::new(e(
                    Node::Member {
                        base: Box::new(fetch()),
                        name: "body".into(),
                        optional: false,
                    },
                    Type::Json,
                )),
                name: "title".into(),
                optional: true,
            },
            Type::Json,
        ),
    );

    let mut notify = step(
        "notify",
        Some("http.post"),
        ToolKind::Effect,
        Type::optional(body_type()),
        30,
    );
    notify.deps = vec!["classify".into(), "fetch".into()];
    notify.after = vec!["fetch".into()];
    notify.retry = RetrySpec {
        max: 5,
        backoff: Backoff::Fixed,
        base: Duration(250),
        jitter: false,
    };
    notify.timeout = Some(Duration(2 * 60_000));
    notify.when = Some(e(
        Node::Binary {
            op: BinaryOp::And,
            lhs: boxed(
                Node::Binary {
                    op: BinaryOp::Eq,
                    lhs: boxed(
                        Node::Member {
                            base: Box::new(classify()),
                            name: "severity".into(),
                            optional: false,
                        },
                        Type::String,
                    ),
                    rhs: Box::new(lit(json!("high"), Type::String)),
                },
                Type::Bool,
            ),
            rhs: boxed(
                Node::Unary {
                    op: UnaryOp::Not,
                    expr: boxed(
                        Node::Input {
                            name: "dry_run".into(),
                        },
                        Type::Bool,
                    ),
                },
                Type::Bool,
            ),
        },
        Type::Bool,
    ));
    notify.args.insert(
        "json".into(),
        e(
            Node::If {
                cond: boxed(
                    Node::Binary {
                        op: BinaryOp::Lt,
                        lhs: Box::new(lit(json!("1s"), Type::Duration)),
                        rhs: Box::new(lit(json!("2h"), Type::Duration)),
                    },
                    Type::Bool,
                ),
                then: Box::new(lit(json!([1, 2.5, null]), Type::list(Type::Json))),
                otherwise: Box::new(lit(Value::Null, Type::Null)),
            },
            Type::optional(Type::list(Type::Json)),
        ),
    );

    let mut label = step(
        "label",
        Some("echo"),
        ToolKind::Effect,
        Type::list(Type::record([
            ("name".to_owned(), Type::String),
            ("position".to_owned(), Type::Int),
        ])),
        40,
    );
    label.deps = vec!["classify".into()];
    label.concurrency = 4;
    label.foreach = Some(e(
        Node::For {
            var: "l".into(),
            iter: boxed(
                Node::Member {
                    base: Box::new(classify()),
                    name: "labels".into(),
                    optional: false,
                },
                Type::list(Type::String),
            ),
            cond: Some(boxed(
                Node::Binary {
                    op: BinaryOp::Gt,
                    lhs: boxed(
                        Node::Call {
                            func: "len".into(),
                            args: vec![e(Node::Var { name: "l".into() }, Type::String)],
                        },
                        Type::Int,
                    ),
                    rhs: Box::new(lit(json!(0), Type::Int)),
                },
                Type::Bool,
            )),
            body: boxed(Node::Var { name: "l".into() }, Type::String),
        },
        Type::list(Type::String),
    ));
    label.args.insert(
        "value".into(),
        e(
            Node::Record {
                fields: vec![
                    RecordEntry {
                        name: "name".into(),
                        value: e(Node::Item, Type::String),
                    },
                    RecordEntry {
                        name: "position".into(),
                        value: e(
                            Node::Binary {
                                op: BinaryOp::Add,
                                lhs: boxed(Node::Index, Type::Int),
                                rhs: Box::new(lit(json!(1), Type::Int)),
                            },
                            Type::Int,
                        ),
                    },
                ],
            },
            Type::record([
                ("name".to_owned(), Type::String),
                ("position".to_owned(), Type::Int),
            ]),
        ),
    );

    let mut summary = step("summary", None, ToolKind::Pure, Type::Float, 50);
    summary.deps = vec!["label".into()];
    summary.value = Some(e(
        Node::Binary {
            op: BinaryOp::Coalesce,
            lhs: boxed(
                Node::At {
                    base: Box::new(e(
                        Node::List {
                            items: vec![
                                e(
                                    Node::Unary {
                                        op: UnaryOp::Neg,
                                        expr: Box::new(lit(json!(1.5), Type::Float)),
                                    },
                                    Type::Float,
                                ),
                                lit(json!(2), Type::Int),
                            ],
                        },
                        Type::list(Type::Float),
                    )),
                    index: Box::new(lit(json!(0), Type::Int)),
                },
                Type::Optional {
                    inner: Box::new(Type::Float),
                },
            ),
            rhs: Box::new(lit(json!(0.0), Type::Float)),
        },
        Type::Float,
    ));

    let mut tools = BTreeMap::new();
    tools.insert(
        "classifier".to_owned(),
        ToolSpec {
            name: "classifier".into(),
            kind: ToolKind::Pure,
            exec: vec!["python3".into(), "tools/classify.py".into()],
            dir: "/home/me/project/flows".into(),
            input: Type::record([("text".to_owned(), Type::String)]),
            output: Type::Record {
                fields: vec![
                    RecordField {
                        name: "severity".into(),
                        ty: Type::String,
                    },
                    RecordField {
                        name: "labels".into(),
                        ty: Type::list(Type::String),
                    },
                    RecordField {
                        name: "score".into(),
                        ty: Type::optional(Type::Float),
                    },
                    RecordField {
                        name: "unchecked".into(),
                        ty: Type::Error,
                    },
                ],
            },
            repeat: Repeat::WithKey,
            doc: Some("Classifies an issue.".into()),
            span: span(70),
        },
    );

    FlowSpec {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        name: "triage".into(),
        doc: Some("Fetch an issue and classify it.".into()),
        span: span(1),
        inputs: vec![
            InputSpec {
                name: "repo".into(),
                ty: Type::String,
                default: None,
                doc: Some("owner/name".into()),
                span: span(2),
            },
            InputSpec {
                name: "dry_run".into(),
                ty: Type::Bool,
                default: Some(json!(false)),
                doc: None,
                span: span(3),
            },
            InputSpec {
                name: "wait".into(),
                ty: Type::Duration,
                default: Some(json!("250ms")),
                doc: None,
                span: span(4),
            },
            InputSpec {
                name: "extra".into(),
                ty: Type::Json,
                default: Some(json!({ "a": [1] })),
                doc: None,
                span: span(5),
            },
        ],
        secrets: vec![NameSpec {
            name: "token".into(),
            doc: None,
            span: span(6),
        }],
        env: vec![NameSpec {
            name: "HOME".into(),
            doc: Some("where the user lives".into()),
            span: span(7),
        }],
        tools,
        steps: vec![fetch_step, classify_step, notify, label, summary],
        output: Some(OutputSpec {
            expr: e(
                Node::Record {
                    fields: vec![
                        RecordEntry {
                            name: "severity".into(),
                            value: e(
                                Node::Member {
                                    base: Box::new(classify()),
                                    name: "severity".into(),
                                    optional: false,
                                },
                                Type::String,
                            ),
                        },
                        RecordEntry {
                            name: "labels".into(),
                            value: e(
                                Node::Call {
                                    func: "len".into(),
                                    args: vec![e(
                                        Node::Step {
                                            name: "label".into(),
                                        },
                                        Type::list(Type::Json),
                                    )],
                                },
                                Type::Int,
                            ),
                        },
                    ],
                },
                Type::record([
                    ("severity".to_owned(), Type::String),
                    ("labels".to_owned(), Type::Int),
                ]),
            ),
            ty: Type::record([
                ("severity".to_owned(), Type::String),
                ("labels".to_owned(), Type::Int),
            ]),
            span: span(60),
        }),
        digest: String::new(),
    }
}

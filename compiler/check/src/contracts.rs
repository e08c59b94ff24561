//! Tool contracts: the built-in tools of the language and the user tools a file declares, as one shape.

use std::sync::LazyLock;

use reel_flowspec::{ToolKind, Type};

/// The step block keys that belong to the engine, never to a tool.
pub const META_ARGUMENTS: [&str; 6] = [
    "when",
    "foreach",
    "concurrency",
    "after",
    "retry",
    "timeout",
];

/// One parameter of a tool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: Type,
    /// Whether it was declared `T?` and may be left out. Kept apart from the type because
    /// `json?` is `json`, and a required `json` parameter must still be given.
    pub optional: bool,
}

impl Param {
    fn new(name: &str, ty: Type) -> Self {
        Param {
            name: name.to_string(),
            optional: matches!(ty, Type::Optional { .. }),
            ty,
        }
    }

    fn optional(name: &str, ty: Type) -> Self {
        Param {
            name: name.to_string(),
            ty: Type::optional(ty),
            optional: true,
        }
    }

    /// Whether a call must give it.
    pub fn required(&self) -> bool {
        !self.optional
    }
}

/// What a tool gives back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResultType {
    /// Always this type.
    Fixed(Type),
    /// The type of the argument named here (`echo`'s `value`).
    SameAs(String),
}

/// Arguments that exclude each other or of which one is needed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ArgRule {
    /// At most one of these may be given.
    AtMostOne(Vec<String>),
    /// Exactly one of these must be given.
    ExactlyOne(Vec<String>),
}

/// A tool's contract, whether built in or declared with `tool`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Contract {
    /// The name steps call it by.
    pub name: String,
    /// What it does to the world.
    pub kind: ToolKind,
    /// Its parameters.
    pub params: Vec<Param>,
    /// Rules across parameters.
    pub rules: Vec<ArgRule>,
    /// Its result.
    pub result: ResultType,
    /// One line for hover and completion.
    pub doc: String,
    /// Whether it is built in (rather than declared in the file).
    pub builtin: bool,
    /// Whether its declaration is broken (already reported): calls are not checked against it.
    pub broken: bool,
}

impl Contract {
    /// The parameter called `name`.
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The contract as one line, for hover: `http.get { url: string, headers?: json } -> { … }`.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| {
                if p.required() {
                    format!("{}: {}", p.name, p.ty)
                } else {
                    format!("{}?: {}", p.name, p.ty.strip_optional())
                }
            })
            .collect();
        let result = match &self.result {
            ResultType::Fixed(t) => t.to_string(),
            ResultType::SameAs(p) => format!("the type of `{p}`"),
        };
        format!(
            "{} ({}) {{ {} }} -> {}",
            self.name,
            self.kind.as_str(),
            params.join(", "),
            result
        )
    }
}

fn http_result() -> Type {
    Type::record([
        ("status".to_string(), Type::Int),
        ("headers".to_string(), Type::Json),
        ("body".to_string(), Type::Json),
    ])
}

fn http(name: &str, kind: ToolKind, with_body: bool, doc: &str) -> Contract {
    let mut params = vec![
        Param::new("url", Type::String),
        Param::optional("headers", Type::Json),
        Param::optional("query", Type::Json),
        Param::optional("bearer", Type::Secret),
    ];
    let mut rules = Vec::new();
    if with_body {
        params.push(Param::optional("json", Type::Json));
        params.push(Param::optional("body", Type::String));
        rules.push(ArgRule::AtMostOne(vec!["json".into(), "body".into()]));
    }
    Contract {
        name: name.to_string(),
        kind,
        params,
        rules,
        result: ResultType::Fixed(http_result()),
        doc: doc.to_string(),
        builtin: true,
        broken: false,
    }
}

static BUILTIN_CONTRACTS: LazyLock<Vec<Contract>> = LazyLock::new(make_builtin_contracts);

/// The built-in tools of the language contract.
pub fn builtin_contracts() -> &'static [Contract] {
    &BUILTIN_CONTRACTS
}

fn make_builtin_contracts() -> Vec<Contract> {
    let fixed = |name: &str, kind, params: Vec<Param>, result: Type, doc: &str| Contract {
        name: name.to_string(),
        kind,
        params,
        rules: Vec::new(),
        result: ResultType::Fixed(result),
        doc: doc.to_string(),
        builtin: true,
        broken: false,
    };
    vec![
        http("http.get", ToolKind::Read, false, "Sends a GET request; the body is parsed when the response is JSON."),
        http("http.post", ToolKind::Effect, true, "Sends a POST request with an Idempotency-Key header."),
        http("http.put", ToolKind::Effect, true, "Sends a PUT request with an Idempotency-Key header."),
        http("http.delete", ToolKind::Effect, true, "Sends a DELETE request with an Idempotency-Key header."),
        fixed(
            "exec",
            ToolKind::Effect,
            vec![
                Param::new("cmd", Type::list(Type::String)),
                Param::optional("stdin", Type::Json),
                Param::optional("cwd", Type::String),
                Param::optional("env", Type::Json),
            ],
            Type::record([
                ("stdout".to_string(), Type::String),
                ("stderr".to_string(), Type::String),
                ("json".to_string(), Type::Json),
            ]),
            "Runs a command in the run's directory; fails when it exits non-zero.",
        ),
        fixed(
            "fs.read",
            ToolKind::Read,
            vec![Param::new("path", Type::String)],
            Type::record([("text".to_string(), Type::String)]),
            "Reads a text file, relative to the run's directory.",
        ),
        fixed(
            "fs.write",
            ToolKind::Effect,
            vec![Param::new("path", Type::String), Param::new("text", Type::String)],
            Type::record([("bytes".to_string(), Type::Int)]),
            "Writes a text file, relative to the run's directory.",
        ),
        Contract {
            name: "echo".to_string(),
            kind: ToolKind::Effect,
            params: vec![Param::new("value", Type::Json)],
            rules: Vec::new(),
            result: ResultType::SameAs("value".to_string()),
            doc: "Records a value as an effect and returns it unchanged.".to_string(),
            builtin: true,
            broken: false,
        },
        Contract {
            name: "sleep".to_string(),
            kind: ToolKind::Timer,
            params: vec![
                Param::optional("for", Type::Duration),
                Param::optional("until", Type::String),
            ],
            rules: vec![ArgRule::ExactlyOne(vec!["for".into(), "until".into()])],
            result: ResultType::Fixed(Type::record([("woke_at".to_string(), Type::String)])),
            doc: "Parks the run for a duration or until a time (RFC 3339); no process needs to stay alive.".to_string(),
            builtin: true,
            broken: false,
        },
        fixed(
            "signal",
            ToolKind::Wait,
            vec![Param::new("name", Type::String)],
            Type::Json,
            "Parks the run until `reel signal RUN NAME [JSON]` delivers the signal; its value is the payload.",
        ),
    ]
}

/// The built-in tool called `name`.
pub fn builtin_contract(name: &str) -> Option<&'static Contract> {
    builtin_contracts().iter().find(|c| c.name == name)
}

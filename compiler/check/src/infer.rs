//! Type inference and lowering of expressions: one pass gives each expression its type, reports
//! what is wrong, and builds the typed FlowSpec expression.
//!
//! An expression that already failed gets [`Type::Error`], which every check accepts, so one
//! mistake gives one diagnostic.

use reel_flowspec::{self as fs, Node, Type};
use reel_syntax::ast::{self, BinaryOp, ExprKind, StrPart, UnaryOp};
use reel_syntax::{Code, Diagnostic, Span};
use serde_json::Value;

use crate::signature::FlowSignature;
use crate::suggest::closest;

/// Where `item` and `index` are (or are not) in scope.
#[derive(Clone, Debug, PartialEq)]
pub enum ItemScope {
    /// Not in a `foreach` step.
    Outside,
    /// In the `when` of a `foreach` step, evaluated once before the fan-out.
    InWhen,
    /// In the arguments of a `foreach` step: `item` has this type.
    Foreach(Type),
}

/// The references an expression makes, for the DAG and the unused-name warnings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Refs {
    /// Steps, with the span of each reference.
    pub steps: Vec<(String, Span)>,
    /// Inputs read.
    pub inputs: Vec<String>,
    /// Environment variables read.
    pub env: Vec<String>,
    /// Secrets passed.
    pub secrets: Vec<String>,
}

/// Infers and lowers expressions in one flow's scope.
pub struct Checker<'a> {
    sig: &'a FlowSignature,
    step_type: &'a dyn Fn(&str) -> Type,
    /// Where `item`/`index` are in scope.
    pub item: ItemScope,
    locals: Vec<(String, Type)>,
    /// Diagnostics found so far.
    pub diags: Vec<Diagnostic>,
    /// References found so far.
    pub refs: Refs,
}

fn lit(value: Value, ty: Type) -> fs::Expr {
    fs::Expr::new(Node::Lit { value }, ty)
}

fn error_expr() -> fs::Expr {
    lit(Value::Null, Type::Error)
}

/// The text of `t` for messages: `int?`, `list<string>`.
fn show(t: &Type) -> String {
    format!("`{t}`")
}

fn is_number(t: &Type) -> bool {
    matches!(t, Type::Int | Type::Float | Type::Json | Type::Error)
}

impl<'a> Checker<'a> {
    /// A checker for expressions of a flow with this signature; `step_type` gives a step's value type.
    pub fn new(
        sig: &'a FlowSignature,
        step_type: &'a dyn Fn(&str) -> Type,
        item: ItemScope,
    ) -> Self {
        Checker {
            sig,
            step_type,
            item,
            locals: Vec::new(),
            diags: Vec::new(),
            refs: Refs::default(),
        }
    }

    /// The signature names are resolved against.
    pub fn signature(&self) -> &FlowSignature {
        self.sig
    }

    /// Reports `d`.
    pub fn report(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Checks that `e` (written at `span`) fits `expected`; `what` names the place (`argument \`url\``).
    pub fn expect(&mut self, e: &fs::Expr, span: Span, expected: &Type, what: &str) -> bool {
        if e.ty.is_assignable_to(expected) {
            return true;
        }
        if let Type::Optional { inner } = &e.ty
            && inner.is_assignable_to(expected)
        {
            self.report(
                Diagnostic::error(
                    Code::TypeOptional,
                    span,
                    format!("{what} needs {}, but this may be null", show(expected)),
                )
                .with_label(format!("this is {}", show(&e.ty)))
                .with_help(format!(
                    "give a default with `??` (such as `… ?? {}`), or read through it with `?.`",
                    default_example(expected)
                )),
            );
            return false;
        }
        let mut d = Diagnostic::error(
            Code::TypeMismatch,
            span,
            format!("{what} needs {}, found {}", show(expected), show(&e.ty)),
        )
        .with_label(format!("this is {}", show(&e.ty)));
        if let Some(help) = conversion_help(&e.ty, expected) {
            d = d.with_help(help);
        }
        self.report(d);
        false
    }

    /// Infers and lowers `e`.
    pub fn expr(&mut self, e: &ast::Expr) -> fs::Expr {
        match &e.kind {
            ExprKind::Int(n) => lit(Value::from(*n), Type::Int),
            ExprKind::Float { value, .. } => match serde_json::Number::from_f64(*value) {
                Some(n) => lit(Value::Number(n), Type::Float),
                None => error_expr(),
            },
            ExprKind::Duration { text, .. } => lit(Value::String(text.clone()), Type::Duration),
            ExprKind::Bool(b) => lit(Value::Bool(*b), Type::Bool),
            ExprKind::Null => lit(Value::Null, Type::Null),
            ExprKind::Str(parts) => self.string(parts),
            ExprKind::List(items) => self.list(items),
            ExprKind::Record(fields) => self.record(fields),
            ExprKind::Name(id) => self.name(id),
            ExprKind::Member {
                base,
                name,
                optional,
            } => self.member(e, base, name, *optional),
            ExprKind::Index { base, index } => self.index(base, index),
            ExprKind::Call { func, args } => self.call(e.span, func, args),
            ExprKind::Unary { op, expr } => self.unary(*op, expr),
            ExprKind::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => self.binary(*op, *op_span, lhs, rhs),
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => self.if_expr(cond, then, otherwise),
            ExprKind::Comprehension {
                var,
                iter,
                cond,
                body,
            } => self.comprehension(var, iter, cond.as_deref(), body),
            ExprKind::Paren(inner) => self.expr(inner),
            ExprKind::Error => error_expr(),
        }
    }

    /// `secret.NAME` as the whole value of a `secret` parameter: the one place a secret may stand.
    pub fn secret_argument(&mut self, e: &ast::Expr) -> Option<fs::Expr> {
        let ExprKind::Member { base, name, .. } = &e.kind else {
            return None;
        };
        let ExprKind::Name(ns) = &base.kind else {
            return None;
        };
        if ns.name != "secret" {
            return None;
        }
        if self.resolve_secret(name) {
            Some(fs::Expr::new(
                Node::Secret {
                    name: name.name.clone(),
                },
                Type::Secret,
            ))
        } else {
            Some(error_expr())
        }
    }

    fn resolve_secret(&mut self, name: &ast::Ident) -> bool {
        if self.sig.secrets.contains(&name.name) {
            self.refs.secrets.push(name.name.clone());
            return true;
        }
        let mut d = Diagnostic::error(
            Code::NameUnknownSecret,
            name.span,
            format!("no secret `{}` is declared in this flow", name.name),
        )
        .with_label("unknown secret");
        match closest(&name.name, self.sig.secrets.iter().map(String::as_str)) {
            Some(s) => {
                d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                    format!("replace with `{s}`"),
                    name.span,
                    s,
                )
            }
            None => {
                d = d.with_help(format!(
                    "declare it in the flow with `secret {}`",
                    name.name
                ))
            }
        }
        self.report(d);
        false
    }

    fn string(&mut self, parts: &[StrPart]) -> fs::Expr {
        let mut out = Vec::new();
        let mut plain = String::new();
        let mut all_text = true;
        for p in parts {
            match p {
                StrPart::Text(t) => {
                    plain.push_str(t);
                    out.push(lit(Value::String(t.clone()), Type::String));
                }
                StrPart::Interp(e) => {
                    all_text = false;
                    let lowered = self.expr(e);
                    out.push(lowered);
                }
            }
        }
        if all_text {
            return lit(Value::String(plain), Type::String);
        }
        fs::Expr::new(Node::Interp { parts: out }, Type::String)
    }

    fn list(&mut self, items: &[ast::Expr]) -> fs::Expr {
        let lowered: Vec<fs::Expr> = items.iter().map(|i| self.expr(i)).collect();
        let mut elem: Option<Type> = None;
        for l in &lowered {
            elem = Some(match elem {
                None => l.ty.clone(),
                Some(t) => Type::join(&t, &l.ty).unwrap_or(Type::Json),
            });
        }
        let ty = Type::list(match elem {
            Some(Type::Null) | None => Type::Json,
            Some(t) => t,
        });
        fs::Expr::new(Node::List { items: lowered }, ty)
    }

    fn record(&mut self, fields: &[ast::Field]) -> fs::Expr {
        let mut entries: Vec<fs::RecordEntry> = Vec::new();
        let mut seen: Vec<(&str, Span)> = Vec::new();
        for f in fields {
            let value = self.expr(&f.value);
            if let Some((_, first)) = seen.iter().find(|(n, _)| *n == f.key.name) {
                self.report(
                    Diagnostic::error(
                        Code::NameDuplicateField,
                        f.key.span,
                        format!("the field `{}` is given twice", f.key.name),
                    )
                    .with_label("given again here")
                    .with_secondary(*first, "first given here")
                    .with_help("remove one of them"),
                );
                continue;
            }
            seen.push((&f.key.name, f.key.span));
            entries.push(fs::RecordEntry {
                name: f.key.name.clone(),
                value,
            });
        }
        let ty = Type::record(entries.iter().map(|e| (e.name.clone(), e.value.ty.clone())));
        fs::Expr::new(Node::Record { fields: entries }, ty)
    }

    fn name(&mut self, id: &ast::Ident) -> fs::Expr {
        let name = id.name.as_str();
        if let Some((_, ty)) = self.locals.iter().rev().find(|(n, _)| n == name) {
            return fs::Expr::new(
                Node::Var {
                    name: name.to_string(),
                },
                ty.clone(),
            );
        }
        match name {
            "item" | "index" => return self.item_or_index(id),
            "input" | "env" | "secret" => {
                self.report(
                    Diagnostic::error(
                        Code::NameBareNamespace,
                        id.span,
                        format!("`{name}` is not a value on its own"),
                    )
                    .with_label(format!("read a member of `{name}`"))
                    .with_help(format!(
                        "write `{name}.NAME` for one declared `{name} NAME`"
                    )),
                );
                return error_expr();
            }
            _ => {}
        }
        if self.sig.step(name).is_some() {
            self.refs.steps.push((name.to_string(), id.span));
            let ty = (self.step_type)(name);
            return fs::Expr::new(
                Node::Step {
                    name: name.to_string(),
                },
                ty,
            );
        }
        // A member that did not parse may have declared it: its syntax error is the one error.
        if self.sig.maybe_declared(name) {
            return error_expr();
        }
        let mut d = Diagnostic::error(
            Code::NameUnknown,
            id.span,
            format!("nothing called `{name}` is in scope"),
        )
        .with_label("unknown name");
        let candidates = self
            .sig
            .steps
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.locals.iter().map(|(n, _)| n.as_str()));
        if self.sig.input(name).is_some() {
            d = d
                .with_help(format!("inputs are read as `input.{name}`"))
                .with_fix(
                    format!("replace with `input.{name}`"),
                    id.span,
                    format!("input.{name}"),
                );
        } else if self.sig.env.iter().any(|e| e == name) {
            d = d
                .with_help(format!("environment values are read as `env.{name}`"))
                .with_fix(
                    format!("replace with `env.{name}`"),
                    id.span,
                    format!("env.{name}"),
                );
        } else if let Some(s) = closest(name, candidates) {
            d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                format!("replace with `{s}`"),
                id.span,
                s,
            );
        } else {
            d = d.with_help(
                "a bare name refers to a step of this flow (or a comprehension's variable)",
            );
        }
        self.report(d);
        error_expr()
    }

    fn item_or_index(&mut self, id: &ast::Ident) -> fs::Expr {
        let is_item = id.name == "item";
        match &self.item {
            ItemScope::Foreach(t) => {
                if is_item {
                    fs::Expr::new(Node::Item, t.clone())
                } else {
                    fs::Expr::new(Node::Index, Type::Int)
                }
            }
            ItemScope::InWhen => {
                self.report(
                    Diagnostic::error(
                        Code::NameItemOutsideForeach,
                        id.span,
                        format!("`{}` is not in scope in `when`", id.name),
                    )
                    .with_label("`when` is evaluated once, before the fan-out")
                    .with_help(
                        "to skip some elements, filter the list instead: `foreach: [for x in xs if COND: x]`",
                    ),
                );
                error_expr()
            }
            ItemScope::Outside => {
                self.report(
                    Diagnostic::error(
                        Code::NameItemOutsideForeach,
                        id.span,
                        format!("`{}` is only in scope in a step with `foreach`", id.name),
                    )
                    .with_label("not inside a `foreach` step")
                    .with_help("add `foreach: LIST` to the step, or use a comprehension `[for x in LIST: …]`"),
                );
                error_expr()
            }
        }
    }

    fn namespace_member(&mut self, ns: &str, name: &ast::Ident) -> Option<fs::Expr> {
        match ns {
            "input" => {
                if let Some(ty) = self.sig.input(&name.name) {
                    self.refs.inputs.push(name.name.clone());
                    return Some(fs::Expr::new(
                        Node::Input {
                            name: name.name.clone(),
                        },
                        ty.clone(),
                    ));
                }
                let mut d = Diagnostic::error(
                    Code::NameUnknownInput,
                    name.span,
                    format!("no input `{}` is declared in this flow", name.name),
                )
                .with_label("unknown input");
                match closest(&name.name, self.sig.inputs.iter().map(|(n, _)| n.as_str())) {
                    Some(s) => {
                        d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                            format!("replace with `{s}`"),
                            name.span,
                            s,
                        )
                    }
                    None => {
                        d = d.with_help(format!(
                            "declare it in the flow with `input {}: TYPE`",
                            name.name
                        ))
                    }
                }
                self.report(d);
                Some(error_expr())
            }
            "env" => {
                if self.sig.env.contains(&name.name) {
                    self.refs.env.push(name.name.clone());
                    return Some(fs::Expr::new(
                        Node::Env {
                            name: name.name.clone(),
                        },
                        Type::optional(Type::String),
                    ));
                }
                let mut d = Diagnostic::error(
                    Code::NameUnknownEnv,
                    name.span,
                    format!(
                        "the environment variable `{}` is not declared in this flow",
                        name.name
                    ),
                )
                .with_label("not allow-listed");
                match closest(&name.name, self.sig.env.iter().map(String::as_str)) {
                    Some(s) => {
                        d = d
                            .with_help(format!("did you mean `{s}`?"))
                            .with_fix(format!("replace with `{s}`"), name.span, s)
                    }
                    None => {
                        d = d.with_help(format!(
                            "declare it with `env {}`: only declared variables are visible, and they are recorded with the run",
                            name.name
                        ))
                    }
                }
                self.report(d);
                Some(error_expr())
            }
            "secret" => {
                if self.resolve_secret(name) {
                    self.report(
                        Diagnostic::error(
                            Code::TaintSecretInExpression,
                            name.span,
                            format!("the secret `{}` cannot be used in an expression", name.name),
                        )
                        .with_label("a secret never passes through an expression")
                        .with_help(format!(
                            "pass `secret.{}` alone as the value of a parameter of type `secret`, such as `bearer` of the http tools",
                            name.name
                        ))
                        .with_note("secrets are resolved when a run starts and are never recorded; an expression's value is recorded"),
                    );
                }
                Some(error_expr())
            }
            _ => None,
        }
    }

    fn member(
        &mut self,
        whole: &ast::Expr,
        base: &ast::Expr,
        name: &ast::Ident,
        optional: bool,
    ) -> fs::Expr {
        if let ExprKind::Name(ns) = &base.kind
            && matches!(ns.name.as_str(), "input" | "env" | "secret")
            && !self.locals.iter().any(|(n, _)| *n == ns.name)
            && let Some(e) = self.namespace_member(&ns.name, name)
        {
            return e;
        }
        let b = self.expr(base);
        let field = name.name.clone();
        let ty = match &b.ty {
            Type::Error => Type::Error,
            Type::Json => Type::Json,
            Type::Null => {
                self.report(
                    Diagnostic::error(
                        Code::TypeNoFields,
                        base.span,
                        format!("`null` has no field `{field}`"),
                    )
                    .with_label("always null"),
                );
                Type::Error
            }
            Type::Optional { inner } => {
                let inner = (**inner).clone();
                if !optional {
                    let dot = Span::new(base.span.end as usize, name.span.start as usize);
                    self.report(
                        Diagnostic::error(
                            Code::TypeOptionalAccess,
                            dot,
                            format!("`.{field}` reads a field of a value that may be null"),
                        )
                        .with_secondary(base.span, format!("this is {}", show(&b.ty)))
                        .with_label("use `?.` here")
                        .with_help("read it with `?.` (null when the value is null), or give a default with `??`")
                        .with_fix("replace `.` with `?.`", dot, "?."),
                    );
                }
                Type::optional(self.field_type(&inner, &b.ty, name, whole))
            }
            other => {
                let other = other.clone();
                self.field_type(&other, &other, name, whole)
            }
        };
        fs::Expr::new(
            Node::Member {
                base: Box::new(b),
                name: field,
                optional,
            },
            ty,
        )
    }

    fn field_type(
        &mut self,
        t: &Type,
        shown: &Type,
        name: &ast::Ident,
        _whole: &ast::Expr,
    ) -> Type {
        match t {
            Type::Error => Type::Error,
            Type::Json => Type::Json,
            Type::Record { fields } => {
                if let Some(f) = fields.iter().find(|f| f.name == name.name) {
                    return f.ty.clone();
                }
                let mut d = Diagnostic::error(
                    Code::TypeUnknownField,
                    name.span,
                    format!("{} has no field `{}`", show(shown), name.name),
                )
                .with_label("unknown field");
                match closest(&name.name, fields.iter().map(|f| f.name.as_str())) {
                    Some(s) => {
                        d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                            format!("replace with `{s}`"),
                            name.span,
                            s,
                        )
                    }
                    None => {
                        let names: Vec<String> =
                            fields.iter().map(|f| format!("`{}`", f.name)).collect();
                        if !names.is_empty() {
                            d = d.with_help(format!("its fields are {}", names.join(", ")));
                        }
                    }
                }
                self.report(d);
                Type::Error
            }
            other => {
                self.report(
                    Diagnostic::error(
                        Code::TypeNoFields,
                        name.span,
                        format!("{} has no fields, so no `{}`", show(other), name.name),
                    )
                    .with_label("not a record"),
                );
                Type::Error
            }
        }
    }

    fn index(&mut self, base: &ast::Expr, index: &ast::Expr) -> fs::Expr {
        let b = self.expr(base);
        let i = self.expr(index);
        let ty = match b.ty.clone() {
            Type::Error => Type::Error,
            Type::Json => {
                if !matches!(i.ty, Type::Int | Type::String | Type::Json | Type::Error) {
                    self.expect(&i, index.span, &Type::Int, "an index");
                }
                Type::Json
            }
            Type::List { item } => {
                self.expect(&i, index.span, &Type::Int, "a list index");
                *item
            }
            Type::Record { .. } => match &i.node {
                Node::Lit {
                    value: Value::String(key),
                } => {
                    let id = ast::Ident {
                        name: key.clone(),
                        span: index.span,
                    };
                    self.field_type(&b.ty, &b.ty, &id, index)
                }
                _ => {
                    self.report(
                        Diagnostic::error(
                            Code::TypeIndex,
                            index.span,
                            "a record's field is chosen by a literal name",
                        )
                        .with_label("not a string literal")
                        .with_help("write `r.name` or `r[\"name\"]`; to look keys up at run time, make the value `json`"),
                    );
                    Type::Error
                }
            },
            Type::Optional { .. } => {
                self.report(
                    Diagnostic::error(
                        Code::TypeOptionalAccess,
                        base.span,
                        "indexing a value that may be null",
                    )
                    .with_label(format!("this is {}", show(&b.ty)))
                    .with_help("give a default with `??` first, such as `(xs ?? [])[0]`"),
                );
                Type::Error
            }
            other => {
                self.report(
                    Diagnostic::error(
                        Code::TypeIndex,
                        base.span,
                        format!("{} cannot be indexed", show(&other)),
                    )
                    .with_label("not a list or record"),
                );
                Type::Error
            }
        };
        fs::Expr::new(
            Node::At {
                base: Box::new(b),
                index: Box::new(i),
            },
            ty,
        )
    }

    fn call(&mut self, span: Span, func: &ast::Ident, args: &[ast::Expr]) -> fs::Expr {
        let lowered: Vec<fs::Expr> = args.iter().map(|a| self.expr(a)).collect();
        let Some(builtin) = reel_eval::builtins::builtin(&func.name) else {
            let mut d = Diagnostic::error(
                Code::NameUnknownFunction,
                func.span,
                format!("there is no function `{}`", func.name),
            )
            .with_label("unknown function");
            let names = reel_eval::builtins::builtins().iter().map(|b| b.name);
            match closest(&func.name, names) {
                Some(s) => {
                    d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                        format!("replace with `{s}`"),
                        func.span,
                        s,
                    )
                }
                None => d = d.with_help("see docs/language.md for the builtin functions"),
            }
            self.report(d);
            return error_expr();
        };
        let types: Vec<Type> = lowered.iter().map(|l| l.ty.clone()).collect();
        // Arguments that did not parse cannot be counted: their syntax error is the one error.
        let unparsed = args.iter().any(|a| matches!(a.kind, ExprKind::Error));
        let ty = match builtin.type_of(&types) {
            Ok(t) => t,
            Err(reel_eval::builtins::CallTypeError::Arity { .. }) if unparsed => {
                return error_expr();
            }
            Err(reel_eval::builtins::CallTypeError::Arity { takes, given }) => {
                self.report(
                    Diagnostic::error(
                        Code::CallArity,
                        span,
                        format!("`{}` takes {takes}, but {given} were given", func.name),
                    )
                    .with_label(format!("{given} given"))
                    .with_help(format!("call it as {}", builtin.signatures.join(" or "))),
                );
                Type::Error
            }
            Err(reel_eval::builtins::CallTypeError::Arg(e)) => {
                let (at, found) = match args.get(e.index) {
                    Some(a) => (a.span, types[e.index].clone()),
                    None => (span, Type::Error),
                };
                let code = if matches!(found, Type::Optional { .. }) {
                    Code::TypeOptional
                } else {
                    Code::TypeArgument
                };
                let mut d = Diagnostic::error(
                    code,
                    at,
                    format!(
                        "argument {} of `{}` should be {}, found {}",
                        e.index + 1,
                        func.name,
                        e.expected,
                        show(&found)
                    ),
                )
                .with_label(format!("this is {}", show(&found)))
                .with_note(format!("signature: {}", builtin.signatures.join(" or ")));
                if code == Code::TypeOptional {
                    d = d.with_help("give a default with `??` first");
                }
                self.report(d);
                Type::Error
            }
        };
        fs::Expr::new(
            Node::Call {
                func: func.name.clone(),
                args: lowered,
            },
            ty,
        )
    }

    fn unary(&mut self, op: UnaryOp, operand: &ast::Expr) -> fs::Expr {
        let e = self.expr(operand);
        let (ty, fop) = match op {
            UnaryOp::Not => {
                self.expect(&e, operand.span, &Type::Bool, "`!`");
                (Type::Bool, fs::UnaryOp::Not)
            }
            UnaryOp::Neg => {
                let ty = match &e.ty {
                    Type::Int => Type::Int,
                    Type::Float => Type::Float,
                    Type::Json => Type::Json,
                    Type::Error => Type::Error,
                    _ => {
                        self.expect(&e, operand.span, &Type::Float, "`-`");
                        Type::Error
                    }
                };
                (ty, fs::UnaryOp::Neg)
            }
        };
        fs::Expr::new(
            Node::Unary {
                op: fop,
                expr: Box::new(e),
            },
            ty,
        )
    }

    fn operand_optional(&mut self, e: &fs::Expr, span: Span, op: BinaryOp) -> bool {
        if let Type::Optional { .. } = e.ty {
            self.report(
                Diagnostic::error(
                    Code::TypeOptional,
                    span,
                    format!("`{}` needs a value, but this may be null", op.as_str()),
                )
                .with_label(format!("this is {}", show(&e.ty)))
                .with_help("give a default with `??` first, such as `(x ?? 0)`"),
            );
            return true;
        }
        false
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        op_span: Span,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
    ) -> fs::Expr {
        let l = self.expr(lhs);
        let r = self.expr(rhs);
        let fop = lower_op(op);
        let ty = match op {
            BinaryOp::And | BinaryOp::Or => {
                let a = self.expect(&l, lhs.span, &Type::Bool, &format!("`{}`", op.as_str()));
                if a {
                    self.expect(&r, rhs.span, &Type::Bool, &format!("`{}`", op.as_str()));
                }
                Type::Bool
            }
            BinaryOp::Eq | BinaryOp::Ne => Type::Bool,
            BinaryOp::Coalesce => match &l.ty {
                Type::Optional { inner } => Type::join(inner, &r.ty)
                    .map(|t| {
                        if r.ty.is_nullable() {
                            Type::optional(t)
                        } else {
                            t
                        }
                    })
                    .unwrap_or(Type::Json),
                Type::Null => r.ty.clone(),
                Type::Json | Type::Error => {
                    if r.ty == Type::Error || l.ty == Type::Error {
                        Type::Error
                    } else {
                        Type::Json
                    }
                }
                other => {
                    self.report(
                        Diagnostic::warning(
                            Code::LintNeedlessCoalesce,
                            op_span,
                            "the left side of `??` is never null",
                        )
                        .with_label("this default is never used")
                        .with_secondary(lhs.span, format!("this is {}", show(other)))
                        .with_help("remove `??` and its right side"),
                    );
                    other.clone()
                }
            },
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
                if !(self.operand_optional(&l, lhs.span, op)
                    || self.operand_optional(&r, rhs.span, op))
                {
                    let ok = match (&l.ty, &r.ty) {
                        (a, b) if is_number(a) && is_number(b) => true,
                        (
                            Type::String | Type::Json | Type::Error,
                            Type::String | Type::Json | Type::Error,
                        ) => true,
                        (
                            Type::Duration | Type::Json | Type::Error,
                            Type::Duration | Type::Json | Type::Error,
                        ) => true,
                        _ => false,
                    };
                    if !ok {
                        self.operator_error(
                            op,
                            op_span,
                            &l,
                            &r,
                            "two numbers, two strings or two durations",
                        );
                    }
                }
                Type::Bool
            }
            BinaryOp::Add => {
                if self.operand_optional(&l, lhs.span, op)
                    || self.operand_optional(&r, rhs.span, op)
                {
                    Type::Error
                } else {
                    match (&l.ty, &r.ty) {
                        (Type::Error, _) | (_, Type::Error) => Type::Error,
                        (Type::Int, Type::Int) => Type::Int,
                        (a, b)
                            if is_number(a)
                                && is_number(b)
                                && *a != Type::Json
                                && *b != Type::Json =>
                        {
                            Type::Float
                        }
                        (Type::String, Type::String) => Type::String,
                        (Type::List { item: a }, Type::List { item: b }) => {
                            Type::list(Type::join(a, b).unwrap_or(Type::Json))
                        }
                        (
                            Type::Json,
                            Type::Int | Type::Float | Type::String | Type::List { .. } | Type::Json,
                        )
                        | (
                            Type::Int | Type::Float | Type::String | Type::List { .. },
                            Type::Json,
                        ) => Type::Json,
                        _ => {
                            self.operator_error(
                                op,
                                op_span,
                                &l,
                                &r,
                                "two numbers, two strings or two lists",
                            );
                            Type::Error
                        }
                    }
                }
            }
            BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
                if self.operand_optional(&l, lhs.span, op)
                    || self.operand_optional(&r, rhs.span, op)
                {
                    Type::Error
                } else {
                    match (&l.ty, &r.ty) {
                        (Type::Error, _) | (_, Type::Error) => Type::Error,
                        (Type::Int, Type::Int) => Type::Int,
                        (Type::Json, b) if is_number(b) => Type::Json,
                        (a, Type::Json) if is_number(a) => Type::Json,
                        (a, b) if is_number(a) && is_number(b) => Type::Float,
                        _ => {
                            self.operator_error(op, op_span, &l, &r, "two numbers");
                            Type::Error
                        }
                    }
                }
            }
        };
        fs::Expr::new(
            Node::Binary {
                op: fop,
                lhs: Box::new(l),
                rhs: Box::new(r),
            },
            ty,
        )
    }

    fn operator_error(
        &mut self,
        op: BinaryOp,
        op_span: Span,
        l: &fs::Expr,
        r: &fs::Expr,
        wants: &str,
    ) {
        let mut d = Diagnostic::error(
            Code::TypeOperator,
            op_span,
            format!(
                "`{}` cannot combine {} and {}",
                op.as_str(),
                show(&l.ty),
                show(&r.ty)
            ),
        )
        .with_label(format!("`{}` takes {wants}", op.as_str()));
        if op == BinaryOp::Add && (l.ty == Type::String || r.ty == Type::String) {
            d = d.with_help(
                "there is no implicit conversion: use `to_string(x)`, or interpolate: \"${a}${b}\"",
            );
        }
        self.report(d);
    }

    fn if_expr(&mut self, cond: &ast::Expr, then: &ast::Expr, otherwise: &ast::Expr) -> fs::Expr {
        let c = self.expr(cond);
        self.expect(&c, cond.span, &Type::Bool, "the condition of `if`");
        let t = self.expr(then);
        let o = self.expr(otherwise);
        let ty = Type::join(&t.ty, &o.ty).unwrap_or(Type::Json);
        fs::Expr::new(
            Node::If {
                cond: Box::new(c),
                then: Box::new(t),
                otherwise: Box::new(o),
            },
            ty,
        )
    }

    fn comprehension(
        &mut self,
        var: &ast::Ident,
        iter: &ast::Expr,
        cond: Option<&ast::Expr>,
        body: &ast::Expr,
    ) -> fs::Expr {
        let it = self.expr(iter);
        let elem = self.element_type(&it, iter.span, "a comprehension");
        self.locals.push((var.name.clone(), elem));
        let c = cond.map(|c| {
            let lowered = self.expr(c);
            self.expect(
                &lowered,
                c.span,
                &Type::Bool,
                "the filter of a comprehension",
            );
            Box::new(lowered)
        });
        let b = self.expr(body);
        self.locals.pop();
        let ty = Type::list(b.ty.clone());
        fs::Expr::new(
            Node::For {
                var: var.name.clone(),
                iter: Box::new(it),
                cond: c,
                body: Box::new(b),
            },
            ty,
        )
    }

    /// The element type of a list iterated by a comprehension or `foreach`.
    pub fn element_type(&mut self, it: &fs::Expr, span: Span, what: &str) -> Type {
        match &it.ty {
            Type::List { item } => (**item).clone(),
            Type::Json => Type::Json,
            Type::Error => Type::Error,
            Type::Optional { inner } if matches!(**inner, Type::List { .. }) => {
                self.expect(it, span, &Type::list(Type::Json), what);
                Type::Error
            }
            other => {
                self.report(
                    Diagnostic::error(
                        Code::TypeMismatch,
                        span,
                        format!("{what} iterates over a list, found {}", show(other)),
                    )
                    .with_label(format!("this is {}", show(other))),
                );
                Type::Error
            }
        }
    }
}

fn lower_op(op: BinaryOp) -> fs::BinaryOp {
    match op {
        BinaryOp::Or => fs::BinaryOp::Or,
        BinaryOp::And => fs::BinaryOp::And,
        BinaryOp::Eq => fs::BinaryOp::Eq,
        BinaryOp::Ne => fs::BinaryOp::Ne,
        BinaryOp::Lt => fs::BinaryOp::Lt,
        BinaryOp::Le => fs::BinaryOp::Le,
        BinaryOp::Gt => fs::BinaryOp::Gt,
        BinaryOp::Ge => fs::BinaryOp::Ge,
        BinaryOp::Coalesce => fs::BinaryOp::Coalesce,
        BinaryOp::Add => fs::BinaryOp::Add,
        BinaryOp::Sub => fs::BinaryOp::Sub,
        BinaryOp::Mul => fs::BinaryOp::Mul,
        BinaryOp::Div => fs::BinaryOp::Div,
        BinaryOp::Rem => fs::BinaryOp::Rem,
    }
}

fn default_example(t: &Type) -> &'static str {
    match t {
        Type::String => "\"\"",
        Type::Int => "0",
        Type::Float => "0.0",
        Type::Bool => "false",
        Type::List { .. } => "[]",
        Type::Duration => "0s",
        _ => "DEFAULT",
    }
}

fn conversion_help(found: &Type, expected: &Type) -> Option<String> {
    match (found, expected) {
        (_, Type::String) if !matches!(found, Type::Secret) => {
            Some("convert it with `to_string(…)` or interpolate it: \"${…}\"".to_string())
        }
        (Type::String, Type::Int) => Some("parse it with `to_int(…)`".to_string()),
        (Type::String, Type::Float) => Some("parse it with `to_float(…)`".to_string()),
        (Type::Float, Type::Int) => Some("convert it with `to_int(…)`".to_string()),
        (Type::String, Type::Duration) => {
            Some("write a duration literal such as `10s`".to_string())
        }
        (_, Type::Secret) => {
            Some("declare `secret NAME` in the flow and pass `secret.NAME`".to_string())
        }
        _ => None,
    }
}

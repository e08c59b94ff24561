//! Written types (`list<string>`, `{ a: int }`, `T?`) resolved to [`Type`]s.

use reel_flowspec::Type;
use reel_syntax::ast::{TypeExpr, TypeExprKind, TypeField};
use reel_syntax::{Code, Diagnostic, Span};

use crate::suggest::closest;

/// The names of the primitive types.
pub const TYPE_NAMES: [&str; 8] = [
    "string", "int", "float", "bool", "duration", "json", "secret", "list",
];

/// Resolves a written type, reporting unknown names and duplicate fields into `diags`.
pub fn resolve_type(t: &TypeExpr, diags: &mut Vec<Diagnostic>) -> Type {
    match &t.kind {
        TypeExprKind::Named(name) => match name.as_str() {
            "string" => Type::String,
            "int" => Type::Int,
            "float" => Type::Float,
            "bool" => Type::Bool,
            "duration" => Type::Duration,
            "json" => Type::Json,
            "secret" => Type::Secret,
            "list" => {
                diags.push(
                    Diagnostic::error(Code::TypeUnknown, t.span, "`list` needs an element type")
                        .with_label("a list of what?")
                        .with_help("write `list<string>`, `list<int>`, … or `list<json>`")
                        .with_fix("write `list<json>`", t.span, "list<json>"),
                );
                Type::Error
            }
            other => {
                let mut d =
                    Diagnostic::error(Code::TypeUnknown, t.span, format!("unknown type `{other}`"))
                        .with_label("not a type");
                match closest(other, TYPE_NAMES) {
                    Some(s) => {
                        d = d
                            .with_help(format!("did you mean `{s}`?"))
                            .with_fix(format!("replace with `{s}`"), t.span, s)
                    }
                    None => {
                        d = d.with_help(
                            "the types are string, int, float, bool, duration, json, secret, list<T>, records { name: T } and T?",
                        )
                    }
                }
                diags.push(d);
                Type::Error
            }
        },
        TypeExprKind::List(inner) => Type::list(resolve_type(inner, diags)),
        TypeExprKind::Optional(inner) => {
            let ty = resolve_type(inner, diags);
            if matches!(ty, Type::Optional { .. }) {
                diags.push(
                    Diagnostic::warning(
                        Code::LintDoubleOptional,
                        t.span,
                        "`T??` is the same as `T?`",
                    )
                    .with_label("one `?` is enough"),
                );
            }
            Type::optional(ty)
        }
        TypeExprKind::Record(fields) => Type::record(resolve_fields(fields, diags, "field")),
        TypeExprKind::Error => Type::Error,
    }
}

/// Resolves the fields of a record type or tool schema, reporting duplicates.
pub fn resolve_fields(
    fields: &[TypeField],
    diags: &mut Vec<Diagnostic>,
    what: &str,
) -> Vec<(String, Type)> {
    let mut out: Vec<(String, Type)> = Vec::new();
    let mut seen: Vec<(&str, Span)> = Vec::new();
    for f in fields {
        let ty = resolve_type(&f.ty, diags);
        if let Some((_, first)) = seen.iter().find(|(n, _)| *n == f.key.name) {
            diags.push(
                Diagnostic::error(
                    Code::NameDuplicateField,
                    f.key.span,
                    format!("the {what} `{}` is declared twice", f.key.name),
                )
                .with_label("declared again here")
                .with_secondary(*first, "first declared here")
                .with_help(format!("rename or remove one of the two `{}`", f.key.name)),
            );
            continue;
        }
        seen.push((&f.key.name, f.key.span));
        out.push((f.key.name.clone(), ty));
    }
    out
}

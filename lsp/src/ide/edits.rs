//! Edits the editor asks for: rename (steps and inputs), formatting (as `reel fmt`) and the
//! quick fixes the compiler attaches to diagnostics.

use reel_compiler::declarations::RESERVED_STEP_NAMES;
use reel_compiler::file_diagnostics;
use reel_syntax::Span;
use reel_syntax::ast::Item;
use reel_syntax::token::Keyword;

use super::Ctx;
use super::names::{self, Kind};

/// A replacement of a span by a text.
pub type Edit = (Span, String);

/// The edits that rename the step or input at `offset` to `new_name`, or why it cannot be done.
pub fn rename(cx: &Ctx<'_>, offset: usize, new_name: &str) -> Result<Vec<Edit>, String> {
    let file = &cx.parsed().file;
    let occ =
        names::occurrence_at(file, offset).ok_or("there is no step or input here to rename")?;
    let symbol = &occ.symbol;
    if !matches!(symbol.kind, Kind::Step | Kind::Input) {
        return Err("only steps and inputs can be renamed".into());
    }
    if names::declaration(file, symbol).is_none() {
        return Err(format!("`{}` is not declared in this file", symbol.name));
    }
    let mut chars = new_name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "`{new_name}` is not a name: use letters, digits and `_`, not starting with a digit"
        ));
    }
    if Keyword::from_word(new_name).is_some() {
        return Err(format!("`{new_name}` is a keyword"));
    }
    if symbol.kind == Kind::Step && RESERVED_STEP_NAMES.contains(&new_name) {
        return Err(format!(
            "`{new_name}` already means something in expressions"
        ));
    }
    if new_name == symbol.name {
        return Ok(Vec::new());
    }
    let renamed = names::Symbol {
        name: new_name.to_string(),
        ..symbol.clone()
    };
    let clash = names::declaration(file, &renamed).is_some();
    if clash {
        let what = if symbol.kind == Kind::Step {
            "step"
        } else {
            "input"
        };
        return Err(format!("this flow already has a {what} named `{new_name}`"));
    }
    // A comprehension variable of that name would capture the renamed step inside its body.
    if symbol.kind == Kind::Step && binds_local(cx, symbol.flow, new_name) {
        return Err(format!(
            "a comprehension in this flow binds `{new_name}`, which would hide the step"
        ));
    }
    Ok(names::occurrences_of(file, symbol)
        .into_iter()
        .map(|o| (o.span, new_name.to_string()))
        .collect())
}

fn binds_local(cx: &Ctx<'_>, flow: Option<usize>, name: &str) -> bool {
    let Some(Item::Flow(f)) = flow.and_then(|i| cx.parsed().file.items.get(i)) else {
        return false;
    };
    let mut found = false;
    for m in &f.members {
        for e in reel_syntax::visit::member_exprs(m) {
            reel_syntax::visit::walk_expr(e, &mut |e| {
                if let reel_syntax::ast::ExprKind::Comprehension { var, .. } = &e.kind {
                    found |= var.name == name;
                }
            });
        }
    }
    found
}

/// The whole text formatted as `reel fmt` does, or `None` when it has syntax errors or is formatted.
pub fn format(cx: &Ctx<'_>) -> Option<String> {
    reel_syntax::format::format(cx.text)
        .ok()
        .filter(|f| f != cx.text)
}

/// The compiler's fixes whose diagnostic overlaps `span`: (title, diagnostic index, edit).
pub fn fixes(cx: &Ctx<'_>, span: Span) -> Vec<(String, usize, Edit)> {
    let mut out = Vec::new();
    for (i, d) in file_diagnostics(cx.db, cx.file).iter().enumerate() {
        let p = d.primary.span;
        if p.start > span.end || p.end < span.start {
            continue;
        }
        for f in &d.fixes {
            out.push((f.title.clone(), i, (f.span, f.replacement.clone())));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use reel_compiler::{RootDb, SourceFile};

    use super::*;

    const SRC: &str = "flow f {\n  input n: int = 1\n  step a = echo { value: input.n }\n  step b = [for x in [a]: x]\n  output { a: a, b: b }\n}\n";

    fn with<T>(src: &str, f: impl FnOnce(&Ctx<'_>) -> T) -> T {
        let db = RootDb::default();
        let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), src.into());
        f(&Ctx::new(&db, file))
    }

    fn apply(src: &str, mut edits: Vec<Edit>) -> String {
        edits.sort_by_key(|e| std::cmp::Reverse(e.0.start));
        let mut s = src.to_string();
        for (span, t) in edits {
            s.replace_range(span.range(), &t);
        }
        s
    }

    #[test]
    fn renames_a_step_everywhere_but_not_record_keys() {
        let at = SRC.find("step a").unwrap() + 5;
        let edits = with(SRC, |cx| rename(cx, at, "first")).unwrap();
        let out = apply(SRC, edits);
        assert!(out.contains("step first = echo") && out.contains("[for x in [first]: x]"));
        assert!(out.contains("output { a: first, b: b }"), "{out}");
    }

    #[test]
    fn renames_an_input() {
        let at = SRC.find("input.n").unwrap() + 6;
        let out = apply(SRC, with(SRC, |cx| rename(cx, at, "count")).unwrap());
        assert!(
            out.contains("input count: int") && out.contains("value: input.count"),
            "{out}"
        );
    }

    #[test]
    fn refuses_clashes_keywords_reserved_and_bad_names() {
        let at = SRC.find("step a").unwrap() + 5;
        for (name, why) in [
            ("b", "already has a step"),
            ("flow", "keyword"),
            ("item", "already means"),
            ("9x", "not a name"),
            ("x", "hide the step"),
        ] {
            let err = with(SRC, |cx| rename(cx, at, name)).unwrap_err();
            assert!(err.contains(why), "{name}: {err}");
        }
        let err = with(SRC, |cx| rename(cx, SRC.find("echo").unwrap(), "z")).unwrap_err();
        assert!(err.contains("only steps and inputs"), "{err}");
    }

    #[test]
    fn formats_like_reel_fmt() {
        let src = "flow f {\n    step a = echo { value: 1 }\n  output a\n}\n";
        let out = with(src, format).unwrap();
        assert_eq!(out, reel_syntax::format::format(src).unwrap());
        assert!(with("flow f {", format).is_none());
    }

    #[test]
    fn did_you_mean_fix_is_offered() {
        let src = "flow f {\n  step alpha = echo { value: 1 }\n  output alpah\n}\n";
        let at = src.find("alpah").unwrap();
        let fixes = with(src, |cx| fixes(cx, Span::new(at, at)));
        assert!(fixes.iter().any(|f| f.2.1 == "alpha"), "{fixes:?}");
    }
}

//! The evaluator: what every Reel expression means at run time.
//!
//! Values are JSON. Durations are their literal text (`"2s"`); ints and floats are told apart as
//! JSON writes them, except that an expression the checker typed `float` is always a float.
//!
//! - Literals are their value. An interpolation concatenates its parts: a string as its text,
//!   null as `null`, anything else as its canonical JSON (RFC 8785, so `2.0` is written `2`).
//! - `input.X`, `env.X`, a step, `item` and `index` come from the [`Scope`]; a skipped step is
//!   null. A name the scope does not know is `eval.unknown`. Comprehension variables are local.
//! - `a.b` on an object is its `b`, or null when missing; on null it is `eval.null` (suggesting
//!   `?.`), where `a?.b` is null. `?.` guards only its own step: when `a` is null,
//!   `a?.b.c` reads `.c` of null and fails.
//! - `a[i]`: a list and an int (negative or past the end: `eval.index`), or an object and a
//!   string (a missing key is null). Indexing null is `eval.null`.
//! - `!` takes a bool, unary `-` a number. `||` and `&&` take bools and skip the right side
//!   when the left decides. `??` is its right side, evaluated only when the left is null.
//! - `==` and `!=` compare any values deeply; numbers by value (`1 == 1.0`), objects without
//!   regard to key order. Two durations compare by length (`1s == 1000ms`).
//! - `< <= > >=` take two numbers, two strings (by Unicode code points) or, when either side is
//!   typed `duration`, two durations (by milliseconds).
//! - `+` adds two numbers, joins two strings or two lists; nothing else, no conversion. `- * /
//!   %` take numbers. Two ints give an int: checked (leaving [i64::MIN, u64::MAX] is
//!   `eval.overflow`), `/` truncates toward zero and `%` takes the dividend's sign. A float
//!   operand gives a float, which must be finite (`eval.overflow`). `/` or `%` by zero is
//!   `eval.division-by-zero`. Durations are not numbers or strings to these operators.
//! - `if` takes a bool condition. `[for x in xs if c: e]` takes a list (null is `eval.null`),
//!   and its filter a bool.
//! - Calls go to the [builtins](mod@crate::builtins). A `secret.X` node is `eval.secret`: the
//!   runtime passes secrets as whole parameter values and never evaluates them.
//!
//! Every operator checks its operands' values, since `json` is only checked here, and fails
//! with `eval.type` naming what it expects and the values it found.
//! An expression nested deeper than [`MAX_DEPTH`] is refused with `eval.depth`, and one that
//! makes more than [`MAX_MADE`] bytes of values in all with `eval.limit`.

use reel_flowspec::canonical::canonical_json;
use reel_flowspec::{BinaryOp, Duration, Expr, Node, RecordEntry, UnaryOp};
use serde_json::{Map, Value};

use crate::builtins::builtin;
use crate::error::{EvalError, codes};
use crate::render::brief;
use crate::scope::{EmptyScope, Scope};
use crate::values::{Num, cmp_values, deep_eq, float_value, int_value, is_duration, short};

/// The value of `expr` in `scope`.
pub fn eval(expr: &Expr, scope: &mut dyn Scope) -> Result<Value, EvalError> {
    Evaluator {
        scope,
        depth: 0,
        constant: false,
        locals: Vec::new(),
        made: 0,
    }
    .eval(expr)
}

/// The value of an expression that needs no run: an input's default, a constant `when`.
///
/// Any reference to an input, env value, step, `item`, `index`, `now()` or `random()` is
/// `eval.not-constant`.
pub fn eval_const(expr: &Expr) -> Result<Value, EvalError> {
    Evaluator {
        scope: &mut EmptyScope,
        depth: 0,
        constant: true,
        locals: Vec::new(),
        made: 0,
    }
    .eval(expr)
}

/// Whether `expr` refers to nothing a run supplies, so [`eval_const`] cannot say not-constant.
pub fn is_constant(expr: &Expr) -> bool {
    match &expr.node {
        Node::Input { .. }
        | Node::Env { .. }
        | Node::Secret { .. }
        | Node::Step { .. }
        | Node::Item
        | Node::Index => false,
        Node::Call { func, args } => {
            builtin(func).is_none_or(|b| b.pure) && args.iter().all(is_constant)
        }
        _ => expr.node.children().into_iter().all(is_constant),
    }
}

/// The deepest nesting evaluated; deeper trees are refused instead of exhausting the stack.
pub const MAX_DEPTH: usize = 256;

/// The most one evaluation may make, in bytes as [`weight`] counts them: every value an
/// expression's parts produce, summed. A `for` inside a `for` (`range` is bounded alone, a
/// million by a million is not), or a long value repeated in a `for`, would otherwise take
/// the time and memory of the machine the run is on (found in session 47: a nested `range`
/// took a worker to 24 GB and the kernel's OOM killer); such an expression is refused with
/// `eval.limit` within seconds instead. An expression a flow means to write makes a small part
/// of this, however long the step values it reads.
pub const MAX_MADE: u64 = 1 << 30;

/// What one value weighs by itself, before its text or members (what `serde_json::Value`
/// takes).
const ONE: u64 = 32;

/// What `value`, just made by `expr`, adds to an evaluation's weight. A list, a record or a
/// `for` holds values already weighed as its parts made them, and an `if` hands one of them
/// on: only their own slots count, so a large value is not walked again at every level that
/// encloses it.
fn made_by(expr: &Expr, value: &Value) -> u64 {
    match (&expr.node, value) {
        (Node::If { .. }, _) => 0,
        (Node::List { .. } | Node::For { .. }, Value::Array(items)) => {
            ONE.saturating_mul(1 + items.len() as u64)
        }
        (Node::Record { .. }, Value::Object(members)) => members.keys().fold(ONE, |total, key| {
            total.saturating_add(ONE + key.len() as u64)
        }),
        _ => weight(value),
    }
}

/// About how many bytes `value` holds: a value's own 32 (what `serde_json::Value` takes), a
/// string's text, a list's and an object's members (and keys). Computed without recursion,
/// since values nest as deep as JSON lets them.
pub fn weight(value: &Value) -> u64 {
    let mut total = 0u64;
    let mut stack: Vec<&Value> = Vec::new();
    let mut next = Some(value);
    while let Some(v) = next {
        total = total.saturating_add(ONE);
        match v {
            Value::String(s) => total = total.saturating_add(s.len() as u64),
            Value::Array(items) => stack.extend(items),
            Value::Object(members) => {
                for (key, member) in members {
                    total = total.saturating_add(ONE + key.len() as u64);
                    stack.push(member);
                }
            }
            _ => {}
        }
        next = stack.pop();
    }
    total
}

struct Evaluator<'s> {
    scope: &'s mut dyn Scope,
    /// How many expressions enclose the one being evaluated.
    depth: usize,
    /// Constant folding: refuse everything only a run knows.
    constant: bool,
    /// Comprehension variables, innermost last.
    locals: Vec<(String, Value)>,
    /// What this evaluation has made so far, by [`weight`]; at most [`MAX_MADE`].
    made: u64,
}

fn unknown(message: String) -> EvalError {
    EvalError::new(codes::UNKNOWN, message)
}

/// A value for a message; a duration-typed string shows as the literal it is.
fn shown(value: &Value, expr: &Expr) -> String {
    match value {
        Value::String(s) if is_duration(&expr.ty) => s.clone(),
        _ => short(value),
    }
}

impl Evaluator<'_> {
    fn run_only(&self, what: &str) -> Result<(), EvalError> {
        if self.constant {
            Err(EvalError::new(
                codes::NOT_CONSTANT,
                format!("{what} is only known when the flow runs"),
            ))
        } else {
            Ok(())
        }
    }

    fn eval(&mut self, expr: &Expr) -> Result<Value, EvalError> {
        if self.depth >= MAX_DEPTH {
            return Err(EvalError::new(
                codes::DEPTH,
                format!("the expression nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let result = self.eval_node(expr);
        self.depth -= 1;
        let value = result?;
        self.made = self.made.saturating_add(made_by(expr, &value));
        if self.made > MAX_MADE {
            return Err(EvalError::new(
                codes::LIMIT,
                format!(
                    "the expression makes more than {} MiB of values, the most one evaluation \
                     may: a `for` inside a `for`, or a long value repeated in a `for`, grows \
                     without bound; narrow it, or do the work in a tool",
                    MAX_MADE >> 20
                ),
            ));
        }
        Ok(value)
    }

    // Each form has its own function so that the recursive path keeps small stack frames.
    fn eval_node(&mut self, expr: &Expr) -> Result<Value, EvalError> {
        match &expr.node {
            Node::Lit { value } => Ok(value.clone()),
            Node::Interp { parts } => self.interp(parts),
            Node::List { items } => items
                .iter()
                .map(|item| self.eval(item))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Node::Record { fields } => self.record(fields),
            Node::Input { name } => self.input(name),
            Node::Env { name } => self.env(name),
            Node::Secret { name } => Err(EvalError::new(
                codes::SECRET,
                format!(
                    "`secret.{name}` cannot be evaluated: a secret is only ever the whole value \
                     of a `secret` parameter"
                ),
            )),
            Node::Step { name } => self.step(name),
            Node::Item => self.foreach_value("item"),
            Node::Index => self.foreach_value("index"),
            Node::Var { name } => self
                .locals
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| unknown(format!("no variable `{name}` is in scope"))),
            Node::Member {
                base,
                name,
                optional,
            } => {
                let b = self.eval(base)?;
                read_member(base, b, name, *optional)
            }
            Node::At { base, index } => {
                let b = self.eval(base)?;
                let i = self.eval(index)?;
                read_index(base, b, i)
            }
            Node::Call { func, args } => self.call(func, args),
            Node::Unary { op, expr: operand } => {
                let v = self.eval(operand)?;
                apply_unary(*op, operand, v)
            }
            Node::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs),
            Node::If {
                cond,
                then,
                otherwise,
            } => match self.eval(cond)? {
                Value::Bool(true) => self.eval(then),
                Value::Bool(false) => self.eval(otherwise),
                other => Err(EvalError::type_error(format!(
                    "`if` expects a bool condition, found {}",
                    shown(&other, cond)
                ))),
            },
            Node::For {
                var,
                iter,
                cond,
                body,
            } => self.comprehension(var, iter, cond.as_deref(), body),
        }
    }

    fn interp(&mut self, parts: &[Expr]) -> Result<Value, EvalError> {
        let mut text = String::new();
        for part in parts {
            match self.eval(part)? {
                Value::String(s) => text.push_str(&s),
                Value::Null => text.push_str("null"),
                other => text.push_str(&canonical_json(&other)),
            }
        }
        Ok(Value::String(text))
    }

    fn record(&mut self, fields: &[RecordEntry]) -> Result<Value, EvalError> {
        let mut map = Map::new();
        for field in fields {
            map.insert(field.name.clone(), self.eval(&field.value)?);
        }
        Ok(Value::Object(map))
    }

    fn input(&self, name: &str) -> Result<Value, EvalError> {
        self.run_only(&format!("`input.{name}`"))?;
        self.scope
            .input(name)
            .ok_or_else(|| unknown(format!("the flow has no input `{name}`")))
    }

    fn env(&self, name: &str) -> Result<Value, EvalError> {
        self.run_only(&format!("`env.{name}`"))?;
        self.scope
            .env(name)
            .ok_or_else(|| unknown(format!("the flow declares no `env {name}`")))
    }

    fn step(&self, name: &str) -> Result<Value, EvalError> {
        self.run_only(&format!("the value of step `{name}`"))?;
        self.scope
            .step(name)
            .ok_or_else(|| unknown(format!("step `{name}` has no value here")))
    }

    /// `item` or `index`.
    fn foreach_value(&self, which: &str) -> Result<Value, EvalError> {
        self.run_only(&format!("`{which}`"))?;
        let value = if which == "item" {
            self.scope.item()
        } else {
            self.scope.index()
        };
        value.ok_or_else(|| {
            unknown(format!(
                "`{which}` is only in scope in the arguments of a `foreach` step"
            ))
        })
    }

    fn call(&mut self, func: &str, args: &[Expr]) -> Result<Value, EvalError> {
        let Some(f) = builtin(func) else {
            return Err(unknown(format!("there is no builtin function `{func}`")));
        };
        if !f.pure {
            self.run_only(&format!("`{func}()`"))?;
        }
        let values = args
            .iter()
            .map(|a| self.eval(a))
            .collect::<Result<Vec<_>, _>>()?;
        let value = f.call(&values, &mut *self.scope)?;
        if self.scope.perturbed(func) {
            return Ok(perturb(value));
        }
        Ok(value)
    }

    fn comprehension(
        &mut self,
        var: &str,
        iter: &Expr,
        cond: Option<&Expr>,
        body: &Expr,
    ) -> Result<Value, EvalError> {
        let items = match self.eval(iter)? {
            Value::Array(items) => items,
            Value::Null => {
                let b = brief(iter);
                return Err(EvalError::new(
                    codes::NULL,
                    format!(
                        "`{b}` is null, so `for` has nothing to iterate; write `{b} ?? []` to \
                         iterate over nothing"
                    ),
                ));
            }
            other => {
                return Err(EvalError::type_error(format!(
                    "`for` iterates over a list, found {}",
                    shown(&other, iter)
                )));
            }
        };
        let mut out = Vec::new();
        for item in items {
            self.locals.push((var.to_owned(), item));
            let produced = self.element(cond, body);
            self.locals.pop();
            out.extend(produced?);
        }
        Ok(Value::Array(out))
    }

    /// One comprehension element: `None` when the filter drops it.
    fn element(&mut self, cond: Option<&Expr>, body: &Expr) -> Result<Option<Value>, EvalError> {
        if let Some(cond) = cond {
            match self.eval(cond)? {
                Value::Bool(true) => {}
                Value::Bool(false) => return Ok(None),
                other => {
                    return Err(EvalError::type_error(format!(
                        "the `if` filter of `for` expects a bool, found {}",
                        shown(&other, cond)
                    )));
                }
            }
        }
        self.eval(body).map(Some)
    }

    fn binary(&mut self, op: BinaryOp, lhs: &Expr, rhs: &Expr) -> Result<Value, EvalError> {
        match op {
            BinaryOp::Or | BinaryOp::And => {
                let l = self.eval(lhs)?;
                let Value::Bool(left) = l else {
                    return Err(EvalError::type_error(format!(
                        "`{}` expects bools, found {} on its left",
                        op.symbol(),
                        shown(&l, lhs)
                    )));
                };
                if left == (op == BinaryOp::Or) {
                    return Ok(Value::Bool(left));
                }
                let r = self.eval(rhs)?;
                match r {
                    Value::Bool(right) => Ok(Value::Bool(right)),
                    _ => Err(EvalError::type_error(format!(
                        "`{}` expects bools, found {} on its right",
                        op.symbol(),
                        shown(&r, rhs)
                    ))),
                }
            }
            BinaryOp::Coalesce => match self.eval(lhs)? {
                Value::Null => self.eval(rhs),
                l => Ok(l),
            },
            _ => {
                let l = self.eval(lhs)?;
                let r = self.eval(rhs)?;
                binary_values(op, lhs, &l, rhs, &r)
            }
        }
    }
}

/// `base.name` or `base?.name` of an evaluated base.
fn read_member(base: &Expr, b: Value, name: &str, optional: bool) -> Result<Value, EvalError> {
    match b {
        Value::Object(mut map) => Ok(map.remove(name).unwrap_or(Value::Null)),
        Value::Null if optional => Ok(Value::Null),
        Value::Null => {
            let b = brief(base);
            Err(EvalError::new(
                codes::NULL,
                format!(
                    "`{b}` is null, so its field `{name}` cannot be read; write `{b}?.{name}` to \
                     get null instead"
                ),
            ))
        }
        other => Err(EvalError::type_error(format!(
            "`.{name}` reads a field of an object, but `{}` is {}",
            brief(base),
            shown(&other, base)
        ))),
    }
}

/// `base[index]` of evaluated operands.
fn read_index(base: &Expr, b: Value, i: Value) -> Result<Value, EvalError> {
    match (b, &i) {
        (Value::Array(mut items), Value::Number(_)) => match Num::of(&i) {
            Some(Num::Int(n)) if n < 0 => Err(EvalError::new(
                codes::INDEX,
                format!("index {n} is negative; lists are indexed from 0"),
            )),
            Some(Num::Int(n)) => {
                let len = items.len();
                match usize::try_from(n) {
                    Ok(k) if k < len => Ok(items.swap_remove(k)),
                    _ => Err(EvalError::new(
                        codes::INDEX,
                        format!(
                            "index {n} is out of range for `{}`, a list of {len} elements",
                            brief(base)
                        ),
                    )),
                }
            }
            _ => Err(EvalError::type_error(format!(
                "a list index must be an int, found {}",
                short(&i)
            ))),
        },
        (Value::Object(mut map), Value::String(key)) => Ok(map.remove(key).unwrap_or(Value::Null)),
        (Value::Null, _) => Err(EvalError::new(
            codes::NULL,
            format!(
                "`{}` is null, so `[{}]` cannot be read of it",
                brief(base),
                short(&i)
            ),
        )),
        (other, _) => Err(EvalError::type_error(format!(
            "`[]` expects a list and an int or an object and a string, found {} and {}",
            shown(&other, base),
            short(&i)
        ))),
    }
}

/// `!v` or `-v`.
fn apply_unary(op: UnaryOp, operand: &Expr, v: Value) -> Result<Value, EvalError> {
    match (op, &v) {
        (UnaryOp::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
        (UnaryOp::Neg, _) if !is_duration(&operand.ty) => match Num::typed(&v, &operand.ty) {
            Some(Num::Int(i)) => int_value(-i),
            Some(Num::Float(f)) => float_value(-f),
            None => Err(EvalError::type_error(format!(
                "`-` expects a number, found {}",
                shown(&v, operand)
            ))),
        },
        (UnaryOp::Not, _) => Err(EvalError::type_error(format!(
            "`!` expects a bool, found {}",
            shown(&v, operand)
        ))),
        (UnaryOp::Neg, _) => Err(EvalError::type_error(format!(
            "`-` expects a number, found the duration {}",
            shown(&v, operand)
        ))),
    }
}

/// The milliseconds of two duration values, when both are duration text.
fn durations(l: &Value, r: &Value) -> Option<(u64, u64)> {
    let l = Duration::parse(l.as_str()?)?;
    let r = Duration::parse(r.as_str()?)?;
    Some((l.millis(), r.millis()))
}

/// A strict binary operator applied to evaluated operands.
fn binary_values(
    op: BinaryOp,
    lhs: &Expr,
    l: &Value,
    rhs: &Expr,
    r: &Value,
) -> Result<Value, EvalError> {
    let any_duration = is_duration(&lhs.ty) || is_duration(&rhs.ty);
    let found = || format!("found {} and {}", shown(l, lhs), shown(r, rhs));
    match op {
        BinaryOp::Eq | BinaryOp::Ne => {
            let equal = match durations(l, r) {
                Some((a, b)) if any_duration => a == b,
                _ => deep_eq(l, r),
            };
            Ok(Value::Bool(equal == (op == BinaryOp::Eq)))
        }
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            let ordering = if any_duration {
                durations(l, r).map(|(a, b)| a.cmp(&b)).ok_or_else(|| {
                    EvalError::type_error(format!(
                        "`{}` expects two durations, {}",
                        op.symbol(),
                        found()
                    ))
                })?
            } else {
                cmp_values(l, r).ok_or_else(|| {
                    EvalError::type_error(format!(
                        "`{}` expects two numbers or two strings, {}",
                        op.symbol(),
                        found()
                    ))
                })?
            };
            let holds = match op {
                BinaryOp::Lt => ordering.is_lt(),
                BinaryOp::Le => ordering.is_le(),
                BinaryOp::Gt => ordering.is_gt(),
                _ => ordering.is_ge(),
            };
            Ok(Value::Bool(holds))
        }
        BinaryOp::Add if !any_duration => match (l, r) {
            (Value::String(a), Value::String(b)) => Ok(Value::String(format!("{a}{b}"))),
            (Value::Array(a), Value::Array(b)) => {
                Ok(Value::Array(a.iter().chain(b).cloned().collect()))
            }
            _ => arithmetic(op, lhs, l, rhs, r).ok_or_else(|| {
                EvalError::type_error(format!(
                    "`+` expects two numbers, two strings or two lists, {}",
                    found()
                ))
            })?,
        },
        BinaryOp::Add => Err(EvalError::type_error(format!(
            "`+` expects two numbers, two strings or two lists, {}",
            found()
        ))),
        _ => {
            let result = if any_duration {
                None
            } else {
                arithmetic(op, lhs, l, rhs, r)
            };
            result.ok_or_else(|| {
                EvalError::type_error(format!(
                    "`{}` expects two numbers, {}",
                    op.symbol(),
                    found()
                ))
            })?
        }
    }
}

/// `+ - * / %` on two numbers; `None` when either operand is not a number.
fn arithmetic(
    op: BinaryOp,
    lhs: &Expr,
    l: &Value,
    rhs: &Expr,
    r: &Value,
) -> Option<Result<Value, EvalError>> {
    let a = Num::typed(l, &lhs.ty)?;
    let b = Num::typed(r, &rhs.ty)?;
    let by_zero = || {
        EvalError::new(
            codes::DIVISION_BY_ZERO,
            format!(
                "`{}` by zero: {} {} {}",
                op.symbol(),
                short(l),
                op.symbol(),
                short(r)
            ),
        )
    };
    let overflow = || {
        EvalError::new(
            codes::OVERFLOW,
            format!(
                "{} {} {} does not fit in a 64-bit integer",
                short(l),
                op.symbol(),
                short(r)
            ),
        )
    };
    Some(match (a, b) {
        (Num::Int(x), Num::Int(y)) => {
            let result = match op {
                BinaryOp::Add => x.checked_add(y),
                BinaryOp::Sub => x.checked_sub(y),
                BinaryOp::Mul => x.checked_mul(y),
                BinaryOp::Div if y == 0 => return Some(Err(by_zero())),
                BinaryOp::Div => x.checked_div(y),
                BinaryOp::Rem if y == 0 => return Some(Err(by_zero())),
                BinaryOp::Rem => x.checked_rem(y),
                _ => return None,
            };
            result
                .ok_or_else(overflow)
                .and_then(|n| int_value(n).map_err(|_| overflow()))
        }
        _ => {
            let (x, y) = (a.as_f64(), b.as_f64());
            let result = match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div if y == 0.0 => return Some(Err(by_zero())),
                BinaryOp::Div => x / y,
                BinaryOp::Rem if y == 0.0 => return Some(Err(by_zero())),
                BinaryOp::Rem => x % y,
                _ => return None,
            };
            float_value(result).map_err(|_| {
                EvalError::new(
                    codes::OVERFLOW,
                    format!(
                        "{} {} {} is not a finite number",
                        short(l),
                        op.symbol(),
                        short(r)
                    ),
                )
            })
        }
    })
}

/// A builtin's result changed on purpose (see [`Scope::perturbed`]): text gains a mark, a
/// number grows by one, anything else is wrapped.
fn perturb(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(format!("{s}\u{2020}")),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i.wrapping_add(1)),
            None => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
        },
        other => serde_json::json!({ "perturbed": other }),
    }
}

#[cfg(test)]
mod tests {
    use reel_flowspec::{Type, UnaryOp};
    use serde_json::json;

    use super::*;
    use crate::render::to_source;
    use crate::scope::MapScope;
    use crate::test_exprs::*;

    use BinaryOp::*;

    fn scope() -> MapScope {
        MapScope::new()
            .with_input("n", json!(3))
            .with_input("f", json!(1.5))
            .with_input("s", json!("abc"))
            .with_input("xs", json!([1, 2, 3]))
            .with_input("obj", json!({ "a": { "b": 1 }, "other-key": true }))
            .with_input("nothing", Value::Null)
            .with_input("big", json!(i64::MAX))
            .with_input("wait", json!("1500ms"))
            .with_env("HOME", json!("/home/me"))
            .with_step(
                "fetch",
                json!({ "body": { "title": "T", "labels": ["x", "y"] } }),
            )
            .with_step("skipped", Value::Null)
    }

    fn outcome(result: Result<Value, EvalError>) -> String {
        match result {
            Ok(v) => v.to_string(),
            Err(e) => format!("error {e}"),
        }
    }

    fn table(cases: &[Expr]) -> String {
        cases
            .iter()
            .map(|e| format!("{}  =>  {}\n", to_source(e), outcome(eval(e, &mut scope()))))
            .collect()
    }

    fn value(e: &Expr) -> Value {
        eval(e, &mut scope()).unwrap_or_else(|err| json!({ "error": err.code }))
    }

    fn boom() -> Expr {
        // Evaluating this fails, so a test passes only if it is never evaluated.
        bin(Div, int(1), int(0))
    }

    #[test]
    fn literals_and_interpolation() {
        insta::assert_snapshot!(table(&[
            int(42),
            float(1.5),
            s("text"),
            null(),
            dur("250ms"),
            list(vec![int(1), s("a"), null()]),
            record(vec![("a", int(1)), ("other-key", boolean(true))]),
            interp(vec![s("repo "), input("s"), s(" #"), input("n")]),
            interp(vec![
                s("null: "),
                input("nothing"),
                s(", float: "),
                input("f")
            ]),
            interp(vec![s("json: "), input("obj"), s(" list: "), input("xs")]),
            interp(vec![
                s("bool: "),
                boolean(true),
                s(" wait: "),
                input("wait")
            ]),
            interp(vec![s("float 2.0 is "), float(2.0)]),
            interp(vec![s("env: "), env("HOME")]),
            interp(vec![s("secret: "), secret("token")]),
        ]));
    }

    #[test]
    fn references() {
        insta::assert_snapshot!(table(&[
            input("n"),
            input("missing"),
            env("HOME"),
            env("PATH"),
            step("fetch"),
            step("skipped"),
            step("later"),
            item(),
            index(),
            var("x"),
            secret("token"),
        ]));
        let mut inside = MapScope::new().with_item(json!({ "k": 1 }), 4);
        assert_eq!(eval(&member(item(), "k"), &mut inside), Ok(json!(1)));
        assert_eq!(eval(&index(), &mut inside), Ok(json!(4)));
    }

    #[test]
    fn null_handling() {
        insta::assert_snapshot!(table(&[
            member(member(step("fetch"), "body"), "title"),
            member(member(step("fetch"), "body"), "missing"),
            member(step("skipped"), "body"),
            opt_member(step("skipped"), "body"),
            member(opt_member(step("skipped"), "body"), "title"),
            opt_member(opt_member(step("skipped"), "body"), "title"),
            bin(Coalesce, opt_member(step("skipped"), "body"), s("none")),
            bin(Coalesce, input("n"), boom()),
            at(input("obj"), s("other-key")),
            at(input("obj"), s("nope")),
            at(input("nothing"), int(0)),
            member(input("xs"), "a"),
            member(input("n"), "a"),
            bin(Eq, step("skipped"), null()),
            bin(Ne, step("fetch"), null()),
        ]));
    }

    #[test]
    fn indexing() {
        insta::assert_snapshot!(table(&[
            at(input("xs"), int(0)),
            at(input("xs"), int(2)),
            at(input("xs"), int(3)),
            at(input("xs"), int(-1)),
            at(input("xs"), float(1.0)),
            at(input("xs"), s("a")),
            at(input("obj"), int(0)),
            at(input("s"), int(0)),
            at(at(input("obj"), s("a")), s("b")),
        ]));
    }

    #[test]
    fn numbers() {
        insta::assert_snapshot!(table(&[
            bin(Add, int(1), int(2)),
            bin(Add, int(1), float(2.5)),
            bin(Sub, int(1), int(5)),
            bin(Mul, int(4), float(0.5)),
            bin(Div, int(7), int(2)),
            bin(Div, int(-7), int(2)),
            bin(Div, int(7), float(2.0)),
            bin(Div, typed(input("n"), Type::Float), int(2)),
            bin(Rem, int(7), int(3)),
            bin(Rem, int(-7), int(3)),
            bin(Rem, float(7.5), int(2)),
            bin(Div, int(1), int(0)),
            bin(Rem, int(1), int(0)),
            bin(Div, float(1.0), float(0.0)),
            bin(Add, input("big"), int(1)),
            bin(Mul, input("big"), int(4)),
            bin(Sub, lit(json!(i64::MIN)), int(1)),
            unary(UnaryOp::Neg, lit(json!(i64::MIN))),
            bin(Mul, float(1e308), float(10.0)),
            unary(UnaryOp::Neg, input("n")),
            unary(UnaryOp::Neg, float(0.5)),
            unary(UnaryOp::Neg, s("a")),
            bin(Add, int(1), s("a")),
            bin(Add, s("a"), s("b")),
            bin(Add, input("xs"), list(vec![int(4)])),
            bin(Add, list(vec![]), s("a")),
            bin(Sub, s("a"), int(1)),
            bin(Add, dur("1s"), dur("2s")),
        ]));
    }

    #[test]
    fn comparisons() {
        insta::assert_snapshot!(table(&[
            bin(Eq, int(1), float(1.0)),
            bin(
                Eq,
                list(vec![int(1), record(vec![("a", int(2))])]),
                lit(json!([1.0, { "a": 2.0 }]))
            ),
            bin(Eq, s("1"), int(1)),
            bin(Ne, int(1), int(2)),
            bin(Lt, int(1), float(1.5)),
            bin(Le, int(2), int(2)),
            bin(Gt, s("b"), s("a")),
            bin(Ge, s("B"), s("a")),
            bin(Lt, int(1), s("a")),
            bin(Lt, null(), int(1)),
            bin(Lt, dur("999ms"), dur("1s")),
            bin(Gt, dur("2m"), dur("90s")),
            bin(Eq, dur("1s"), dur("1000ms")),
            bin(Lt, typed(input("wait"), Type::Duration), dur("2s")),
            bin(Lt, dur("1s"), int(5)),
        ]));
    }

    #[test]
    fn logic_and_if() {
        insta::assert_snapshot!(table(&[
            bin(And, boolean(true), boolean(false)),
            bin(Or, boolean(false), boolean(true)),
            bin(Or, boolean(true), boom()),
            bin(And, boolean(false), boom()),
            bin(And, boolean(true), int(1)),
            bin(Or, int(0), boolean(true)),
            unary(UnaryOp::Not, boolean(false)),
            unary(UnaryOp::Not, null()),
            if_(bin(Gt, input("n"), int(2)), s("big"), boom()),
            if_(boolean(false), boom(), s("small")),
            if_(s("yes"), int(1), int(2)),
        ]));
    }

    #[test]
    fn comprehensions() {
        let x = || var("x");
        insta::assert_snapshot!(table(&[
            comp("x", input("xs"), None, bin(Mul, x(), int(10))),
            comp("x", input("xs"), Some(bin(Ne, x(), int(2))), x()),
            comp(
                "x",
                input("xs"),
                None,
                comp(
                    "y",
                    list(vec![s("a"), s("b")]),
                    None,
                    list(vec![x(), var("y")])
                ),
            ),
            comp(
                "x",
                list(vec![int(1)]),
                None,
                comp("x", list(vec![int(2)]), None, x())
            ),
            comp(
                "x",
                member(member(step("fetch"), "body"), "labels"),
                None,
                interp(vec![s("#"), x()])
            ),
            comp("x", input("nothing"), None, x()),
            comp("x", input("n"), None, x()),
            comp("x", input("xs"), Some(x()), x()),
            comp("x", list(vec![]), None, boom()),
        ]));
    }

    #[test]
    fn builtin_calls() {
        insta::assert_snapshot!(table(&[
            call("len", vec![input("xs")]),
            call("nope", vec![]),
            call("len", vec![]),
            call("len", vec![input("xs"), input("xs")]),
            call("now", vec![]),
            call("random", vec![]),
        ]));
    }

    #[test]
    fn key_semantics_hold() {
        assert_eq!(value(&bin(Eq, int(1), float(1.0))), json!(true));
        assert_eq!(value(&bin(Div, int(-7), int(2))), json!(-3));
        assert_eq!(value(&bin(Or, boolean(true), boom())), json!(true));
        assert_eq!(value(&bin(Coalesce, null(), int(5))), json!(5));
        assert_eq!(value(&bin(Add, int(1), int(2))), json!(3));
        assert!(value(&bin(Add, int(1), float(2.0))).is_f64());
        assert_eq!(
            value(&member(step("skipped"), "x")),
            json!({ "error": codes::NULL })
        );
    }

    #[test]
    fn float_typed_values_divide_as_floats() {
        // `2.0` written canonically reads back as `2`; its node type keeps it a float.
        let two = typed(int(2), Type::Float);
        assert_eq!(value(&bin(Div, int(5), two)), json!(2.5));
    }

    #[test]
    fn constants() {
        let cases = [
            bin(Add, int(1), int(2)),
            call("upper", vec![s("a")]),
            comp("x", call("range", vec![int(3)]), None, var("x")),
            input("n"),
            env("HOME"),
            step("fetch"),
            item(),
            index(),
            call("now", vec![]),
            call("random", vec![]),
            bin(And, boolean(false), input("flag")),
        ];
        let rendered: String = cases
            .iter()
            .map(|e| {
                format!(
                    "{}  =>  {} (is_constant: {})\n",
                    to_source(e),
                    outcome(eval_const(e)),
                    is_constant(e)
                )
            })
            .collect();
        insta::assert_snapshot!(rendered);
    }

    #[test]
    fn deep_nesting_is_evaluated_or_refused_never_overflows() {
        let nested = |depth: usize| {
            let mut e = int(0);
            for _ in 0..depth {
                e = bin(Add, e, int(1));
            }
            e
        };
        // The sum node plus its leftmost literal: `depth + 1` levels.
        assert_eq!(value(&nested(MAX_DEPTH - 1)), json!(MAX_DEPTH - 1));
        assert_eq!(value(&nested(MAX_DEPTH)), json!({ "error": codes::DEPTH }));
        assert_eq!(value(&nested(2_000)), json!({ "error": codes::DEPTH }));
    }

    #[test]
    fn an_expression_that_makes_without_bound_is_refused_and_one_over_long_values_is_not() {
        let million = || call("range", vec![int(1_000_000)]);
        // A million lists of a million: 10^12 elements (24 GB and the OOM killer before).
        let nested = comp("x", million(), None, comp("y", million(), None, var("y")));
        // A `for` that makes nothing still iterates: 10^12 rounds of a filter.
        let empty = comp(
            "x",
            million(),
            None,
            call(
                "len",
                vec![comp("y", million(), Some(boolean(false)), var("y"))],
            ),
        );
        // A long value repeated: a million copies of a 2 MB string.
        let long = "x".repeat(2 << 20);
        let repeated = comp("x", million(), None, input("long"));
        for e in [&nested, &empty, &repeated] {
            let err = eval(e, &mut scope().with_input("long", json!(long))).unwrap_err();
            assert_eq!(err.code, codes::LIMIT, "{}", to_source(e));
            assert!(err.message.contains("1024 MiB"), "{err}");
        }
        // Long step values read whole, and a `for` over a million of their members, are what
        // flows do: within the budget.
        let items: Vec<Value> = (0..1_000_000)
            .map(|i| json!({ "id": i, "name": format!("item-{i}") }))
            .collect();
        let mut big = scope().with_step("items", Value::Array(items));
        let ids = comp("x", step("items"), None, member(var("x"), "id"));
        let made = eval(&ids, &mut big).unwrap();
        assert_eq!(made.as_array().map(Vec::len), Some(1_000_000));
        assert_eq!(
            eval(&call("len", vec![step("items")]), &mut big).unwrap(),
            json!(1_000_000)
        );
    }

    #[test]
    fn a_value_weighs_its_members_and_text() {
        assert_eq!(weight(&json!(1)), 32);
        assert_eq!(weight(&json!("abcd")), 36);
        assert_eq!(weight(&json!([1, "ab"])), 32 + 32 + 34);
        assert_eq!(weight(&json!({ "k": [true] })), 32 + 33 + 32 + 32);
        // A list literal's members were weighed as they were made: only its slots count.
        let pair = list(vec![s("ab"), int(1)]);
        assert_eq!(made_by(&pair, &json!(["ab", 1])), 32 * 3);
        assert_eq!(made_by(&s("ab"), &json!("ab")), 34);
    }
}

//! The fast path: the everyday subset of VRL compiled onto loghaul's batch, run with no
//! per-event VRL value.
//!
//! A program is first compiled by VRL itself (its type checks and diagnostics stand); its
//! syntax tree is then lowered to [`Expr`] when every node is in the subset. Values ([`V`]) are
//! `Copy`: strings are spans of the output arena (the input's arena, then what the batch
//! appended), so a parsed key=value pair or a renamed field costs no copy; an event's changes
//! are an overlay on the input event, read through to the event where unchanged.
//!
//! Exactness first: the fast path gives the VRL runtime's result byte for byte, or it *bails*
//! on that event, which then runs whole on the VRL runtime. It bails wherever VRL's semantics
//! get intricate (a failing fallible call, mixed numeric comparison, non-ASCII case mapping,
//! an unusual key=value line, an `abort` whose message matters), which keeps the subset small
//! to get right and the common case fast. The differential tests hold both paths to one
//! output.

use std::sync::Arc;

use loghaul_core::batch::Value;
use loghaul_core::{Event, EventBatch, Span, Timestamp, names};
use vrl::parser::ast::{self, Node};
use vrl::path::OwnedSegment;

/// Why a program is not on the fast path: the first expression outside the subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// Byte range in the program.
    pub span: (usize, usize),
    pub what: String,
}

/// A value on the fast path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum V {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Text in the output arena.
    Str(Span),
    /// Text of the program or of loghaul (a literal, a severity name).
    Static(&'static [u8]),
    /// A literal of the program, by index.
    Lit(u32),
    /// Nanoseconds since the epoch.
    Ts(i64),
    /// A value of the input record, as it is.
    Rec(Value),
    /// An object a function made: its entries are `objs[i]`.
    Obj(u32),
    /// An array a function made: its items are `arrs[i]`.
    Arr(u32),
    /// The event's structured data, untouched.
    Sd,
    /// The event's sender, untouched (`.source_ip`).
    Peer,
    /// The event's flags, untouched.
    Flags,
}

/// A compiled expression.
#[derive(Clone)]
pub enum Expr {
    Const(V),
    /// `.a.b`: an event path.
    Path(Vec<Box<str>>),
    Var(usize),
    /// `x.a.b`: a path into a local variable.
    VarPath(usize, Vec<Box<str>>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(Cmp, Box<Expr>, Box<Expr>),
    Add(Box<Expr>, Box<Expr>),
    /// `a ?? b`: `b` when `a` fails. Bails if `a` fails (VRL would recover; the runtime does).
    If(Box<Expr>, Vec<Expr>, Vec<Expr>),
    Block(Vec<Expr>),
    /// `.name = e` (one top-level field; the name is a literal).
    SetField(u32, Box<Expr>),
    /// `. |= e` / `. = merge(., e)`.
    MergeRoot(Box<Expr>),
    SetVar(usize, Box<Expr>),
    /// `ok, err = e`: a failure bails, so `err` is always null here.
    SetVarInfallible(Option<usize>, Option<usize>, Box<Expr>),
    /// `.severity == "err"` (or `!=`, or `.facility`): loghaul's own field `own` against the
    /// code the literal names (`None`: no code has that name). Decided on the event's code
    /// when nothing shadows or changed the field (no record key of its name, no change yet);
    /// else `general`.
    OwnCode {
        own: u8,
        code: Option<u8>,
        ne: bool,
        general: Box<Expr>,
    },
    /// `del(.name)` (the name is a literal).
    Del(u32),
    Exists(Vec<Box<str>>),
    Abort,
    Call(Func, Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// The functions of the subset.
#[derive(Clone)]
pub enum Func {
    Contains {
        case_sensitive: bool,
    },
    StartsWith {
        case_sensitive: bool,
    },
    EndsWith {
        case_sensitive: bool,
    },
    Downcase,
    Upcase,
    StripWhitespace,
    Length,
    ToString,
    ToInt,
    ToBool,
    Match(Arc<regex::Regex>),
    ParseRegex(Arc<regex::Regex>, Arc<[(Box<str>, usize)]>),
    ParseKeyValue,
    Now,
    /// `string`, `int`, `bool`: the value when of that kind (else the runtime's error).
    Assert(Kind),
    /// `is_string`, `is_integer`, ...
    Is(Kind),
    /// A parser whose grammar is VRL's own (`parse_json`, `parse_syslog`, `parse_timestamp`):
    /// VRL's implementation runs on the argument alone (a one-call program over `.v`), and the
    /// rest of the program stays on the fast path.
    Vrl(Arc<vrl::compiler::Program>),
}

/// A value kind the type functions test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Integer,
    Boolean,
    Null,
    Float,
    Object,
}

/// A program on the fast path.
#[derive(Clone)]
pub struct FastProgram {
    body: Vec<Expr>,
    vars: usize,
    pub literals: Arc<[Box<[u8]>]>,
    /// Each literal's [`Name`], for the field names the program sets and deletes.
    names: Arc<[Name]>,
    /// The program changes no field of the event (a condition): what it reads of the event
    /// stays what it read first.
    reads_only: bool,
}

/// Lowers `source` (already accepted by VRL's compiler) onto the fast path.
///
/// # Errors
///
/// The first expression outside the subset, with its place in the program.
pub fn lower(source: &str) -> Result<FastProgram, Unsupported> {
    let program = vrl::parser::parse(source).map_err(|_| Unsupported {
        span: (0, source.len()),
        what: "the program does not parse".to_owned(),
    })?;
    let mut cx = Lower {
        source,
        vars: Vec::new(),
        literals: Vec::new(),
        writes: false,
    };
    let mut body = Vec::new();
    for root in program.0 {
        match root.into_inner() {
            ast::RootExpr::Expr(e) => body.push(cx.expr(&e)?),
            ast::RootExpr::Error(_) => {
                return Err(Unsupported {
                    span: (0, source.len()),
                    what: "the program does not parse".to_owned(),
                });
            }
        }
    }
    let names = cx.literals.iter().map(|l| Name::of(l)).collect();
    Ok(FastProgram {
        body,
        vars: cx.vars.len(),
        literals: cx.literals.into(),
        names,
        reads_only: !cx.writes,
    })
}

struct Lower<'s> {
    source: &'s str,
    vars: Vec<String>,
    literals: Vec<Box<[u8]>>,
    /// Some expression sets or deletes a field of the event.
    writes: bool,
}

impl Lower<'_> {
    fn no<T>(&self, node: &Node<T>, why: &str) -> Result<Expr, Unsupported> {
        let (a, b) = (node.start(), node.end());
        let text = self.source.get(a..b).unwrap_or("").trim();
        let text: String = text.chars().take(60).collect();
        Err(Unsupported {
            span: (a, b),
            what: format!("`{text}` ({why})"),
        })
    }

    fn var(&mut self, name: &str) -> usize {
        match self.vars.iter().position(|v| v == name) {
            Some(i) => i,
            None => {
                self.vars.push(name.to_owned());
                self.vars.len() - 1
            }
        }
    }

    fn literal(&mut self, bytes: &[u8]) -> V {
        self.literals.push(bytes.into());
        V::Lit((self.literals.len() - 1) as u32)
    }

    fn exprs(&mut self, nodes: &[Node<ast::Expr>]) -> Result<Vec<Expr>, Unsupported> {
        nodes.iter().map(|n| self.expr(n)).collect()
    }

    fn expr(&mut self, node: &Node<ast::Expr>) -> Result<Expr, Unsupported> {
        use ast::Expr as A;
        match node.inner() {
            A::Literal(lit) => match lit.inner() {
                ast::Literal::String(t) => match t.as_literal_string() {
                    Some(s) => Ok(Expr::Const(self.literal(s.as_bytes()))),
                    None => {
                        let rewritten = Node::new(node.span(), t.rewrite_to_concatenated_strings());
                        self.expr(&rewritten)
                    }
                },
                ast::Literal::RawString(s) => Ok(Expr::Const(self.literal(s.as_bytes()))),
                ast::Literal::Integer(i) => Ok(Expr::Const(V::Int(*i))),
                ast::Literal::Float(f) => Ok(Expr::Const(V::Float(f.into_inner()))),
                ast::Literal::Boolean(b) => Ok(Expr::Const(V::Bool(*b))),
                ast::Literal::Null => Ok(Expr::Const(V::Null)),
                ast::Literal::Regex(_) | ast::Literal::Timestamp(_) => {
                    self.no(node, "a regex or timestamp literal outside a call")
                }
            },
            A::Container(c) => match c.inner() {
                ast::Container::Group(g) => self.expr(&g.inner().0),
                ast::Container::Block(b) => Ok(Expr::Block(self.exprs(&b.inner().0)?)),
                ast::Container::Array(_) | ast::Container::Object(_) => {
                    self.no(node, "array and object literals")
                }
            },
            A::IfStatement(i) => {
                let i = i.inner();
                let predicate = match i.predicate.inner() {
                    ast::Predicate::One(e) => self.expr(e)?,
                    ast::Predicate::Many(es) => Expr::Block(self.exprs(es)?),
                };
                let then = self.exprs(&i.if_node.inner().0)?;
                let otherwise = match &i.else_node {
                    Some(b) => self.exprs(&b.inner().0)?,
                    None => Vec::new(),
                };
                Ok(Expr::If(Box::new(predicate), then, otherwise))
            }
            A::Op(op) => {
                let ast::Op(a, code, b) = op.inner();
                let (x, y) = (Box::new(self.expr(a)?), Box::new(self.expr(b)?));
                use ast::Opcode as O;
                Ok(match code.inner() {
                    O::And => Expr::And(x, y),
                    O::Or => Expr::Or(x, y),
                    O::Eq => self.own_code(Expr::Cmp(Cmp::Eq, x, y)),
                    O::Ne => self.own_code(Expr::Cmp(Cmp::Ne, x, y)),
                    O::Lt => Expr::Cmp(Cmp::Lt, x, y),
                    O::Le => Expr::Cmp(Cmp::Le, x, y),
                    O::Gt => Expr::Cmp(Cmp::Gt, x, y),
                    O::Ge => Expr::Cmp(Cmp::Ge, x, y),
                    O::Add => Expr::Add(x, y),
                    // A failure of the left side bails, so `??` is its left side here.
                    O::Err => return Ok(*x),
                    _ => return self.no(node, "this operator"),
                })
            }
            A::Assignment(a) => self.assignment(node, a.inner()),
            A::Query(q) => match self.query(q.inner()) {
                Some(Target::Path(p)) => Ok(Expr::Path(p)),
                Some(Target::Var(v)) => Ok(Expr::Var(v)),
                Some(Target::VarPath(v, p)) => Ok(Expr::VarPath(v, p)),
                Some(Target::Root | Target::Noop) | None => self.no(node, "this query"),
            },
            A::FunctionCall(f) => self.call(node, f.inner()),
            A::Variable(v) => {
                let i = self.var(v.inner());
                Ok(Expr::Var(i))
            }
            A::Unary(u) => match u.inner() {
                ast::Unary::Not(n) => {
                    let (_, inner) = n.inner().clone().take();
                    Ok(Expr::Not(Box::new(self.expr(&inner)?)))
                }
            },
            A::Abort(a) => {
                if a.inner().message.is_some() {
                    return self.no(node, "`abort` with a message");
                }
                Ok(Expr::Abort)
            }
            A::Return(_) | A::Break(_) => self.no(node, "`return` and `break`"),
        }
    }

    /// A comparison of `.severity` or `.facility` with a string literal, as [`Expr::OwnCode`].
    fn own_code(&self, cmp: Expr) -> Expr {
        let Expr::Cmp(op, a, b) = &cmp else {
            return cmp;
        };
        let (path, lit) = match (&**a, &**b) {
            (Expr::Path(p), Expr::Const(V::Lit(l))) | (Expr::Const(V::Lit(l)), Expr::Path(p)) => {
                (p, *l)
            }
            _ => return cmp,
        };
        let (own, name): (u8, fn(u8) -> Option<&'static str>) = match &path[..] {
            [f] if &**f == "severity" => (6, names::severity_name),
            [f] if &**f == "facility" => (5, names::facility_name),
            _ => return cmp,
        };
        let Some(text) = self.literals.get(lit as usize) else {
            return cmp;
        };
        let code = (0..=u8::MAX).find(|c| name(*c).is_some_and(|n| n.as_bytes() == &text[..]));
        Expr::OwnCode {
            own,
            code,
            ne: *op == Cmp::Ne,
            general: Box::new(cmp),
        }
    }

    fn query(&mut self, q: &ast::Query) -> Option<Target> {
        match q.target.inner() {
            ast::QueryTarget::External(vrl::path::PathPrefix::Event) => {
                let path = field_path(&q.path.inner().segments)?;
                Some(if path.is_empty() {
                    Target::Root
                } else {
                    Target::Path(path)
                })
            }
            ast::QueryTarget::Internal(v) if q.path.inner().segments.is_empty() => {
                Some(Target::Var(self.var(v)))
            }
            ast::QueryTarget::Internal(v) => {
                let path = field_path(&q.path.inner().segments)?;
                Some(Target::VarPath(self.var(v), path))
            }
            _ => None,
        }
    }

    fn assign_target(&mut self, t: &ast::AssignmentTarget) -> Option<Target> {
        match t {
            ast::AssignmentTarget::Noop => Some(Target::Noop),
            ast::AssignmentTarget::Query(q) => self.query(q),
            ast::AssignmentTarget::Internal(v, None) => Some(Target::Var(self.var(v))),
            ast::AssignmentTarget::External(Some(p))
                if p.prefix == vrl::path::PathPrefix::Event =>
            {
                let path = field_path(&p.path.segments)?;
                Some(if path.is_empty() {
                    Target::Root
                } else {
                    Target::Path(path)
                })
            }
            _ => None,
        }
    }

    fn assignment(
        &mut self,
        node: &Node<ast::Expr>,
        a: &ast::Assignment,
    ) -> Result<Expr, Unsupported> {
        match a {
            ast::Assignment::Single { target, op, expr } => {
                let value = Box::new(self.expr(expr)?);
                match (self.assign_target(target.inner()), op) {
                    (Some(Target::Path(p)), ast::AssignmentOp::Assign) if p.len() == 1 => {
                        let V::Lit(name) = self.literal(p[0].as_bytes()) else {
                            return self.no(node, "this assignment target");
                        };
                        self.writes = true;
                        Ok(Expr::SetField(name, value))
                    }
                    (Some(Target::Var(v)), ast::AssignmentOp::Assign) => Ok(Expr::SetVar(v, value)),
                    (Some(Target::Root), ast::AssignmentOp::Merge) => {
                        self.writes = true;
                        Ok(Expr::MergeRoot(value))
                    }
                    (Some(Target::Root), ast::AssignmentOp::Assign) => match *value {
                        // `. = merge(., x)` is `. |= x`.
                        Expr::Call(Func::ParseKeyValue, _) => {
                            self.no(node, "replacing the whole event")
                        }
                        _ => self.no(node, "replacing the whole event"),
                    },
                    _ => self.no(node, "this assignment target"),
                }
            }
            ast::Assignment::Infallible { ok, err, op, expr } => {
                if *op != ast::AssignmentOp::Assign {
                    return self.no(node, "`|=` with an error target");
                }
                let value = Box::new(self.expr(expr)?);
                let ok = match self.assign_target(ok.inner()) {
                    Some(Target::Var(v)) => Some(v),
                    Some(Target::Noop) => None,
                    _ => return self.no(node, "this assignment target"),
                };
                let err = match self.assign_target(err.inner()) {
                    Some(Target::Var(v)) => Some(v),
                    Some(Target::Noop) => None,
                    _ => return self.no(node, "this assignment target"),
                };
                Ok(Expr::SetVarInfallible(ok, err, value))
            }
        }
    }

    fn call(&mut self, node: &Node<ast::Expr>, f: &ast::FunctionCall) -> Result<Expr, Unsupported> {
        let name = f.ident.inner().as_ref();
        if f.closure.is_some() {
            return self.no(node, "closures");
        }
        // Arguments by name or position, as VRL binds them.
        let params: &[&str] = match name {
            "contains" | "starts_with" | "ends_with" => &["value", "substring", "case_sensitive"],
            "downcase" | "upcase" | "strip_whitespace" | "length" | "to_string" | "to_int"
            | "to_bool" => &["value"],
            "match" | "parse_regex" => &["value", "pattern", "numeric_groups"],
            "parse_key_value" => &[
                "value",
                "key_value_delimiter",
                "field_delimiter",
                "whitespace",
                "accept_standalone_key",
            ],
            "del" | "exists" => &["path", "compact"],
            "string" | "int" | "bool" | "object" | "is_string" | "is_integer" | "is_boolean"
            | "is_null" | "is_float" | "is_object" => &["value"],
            "merge" => &["to", "from", "deep"],
            "now" => &[],
            "parse_json" => &["value", "max_depth", "lossy"],
            "parse_syslog" => &["value"],
            "parse_timestamp" => &["value", "format", "timezone"],
            _ => return self.no(node, "a function outside the fast path's set"),
        };
        let mut args: Vec<Option<&Node<ast::Expr>>> = vec![None; params.len()];
        let mut next = 0;
        for arg in &f.arguments {
            let arg = arg.inner();
            let at = match &arg.ident {
                Some(id) => params.iter().position(|p| *p == id.inner().as_ref()),
                None => {
                    let at = next;
                    next += 1;
                    (at < params.len()).then_some(at)
                }
            };
            match at {
                Some(i) => args[i] = Some(&arg.expr),
                None => return self.no(node, "an argument the fast path does not know"),
            }
        }
        let literal = |i: usize| -> Option<&ast::Literal> {
            args.get(i)
                .copied()
                .flatten()
                .and_then(|e| match e.inner() {
                    ast::Expr::Literal(l) => Some(l.inner()),
                    _ => None,
                })
        };
        let bool_arg = |i: usize, default: bool| -> Option<bool> {
            match (args.get(i).copied().flatten(), literal(i)) {
                (None, _) => Some(default),
                (Some(_), Some(ast::Literal::Boolean(b))) => Some(*b),
                _ => None,
            }
        };
        let value = |cx: &mut Self| -> Result<Vec<Expr>, Unsupported> {
            match args.first().copied().flatten() {
                Some(e) => Ok(vec![cx.expr(e)?]),
                None => cx.no(node, "a missing argument").map(|e| vec![e]),
            }
        };
        let func = match name {
            "contains" | "starts_with" | "ends_with" => {
                let Some(case_sensitive) = bool_arg(2, true) else {
                    return self.no(node, "a computed `case_sensitive`");
                };
                let Some(sub) = args[1] else {
                    return self.no(node, "a missing argument");
                };
                let mut a = value(self)?;
                a.push(self.expr(sub)?);
                let func = match name {
                    "contains" => Func::Contains { case_sensitive },
                    "starts_with" => Func::StartsWith { case_sensitive },
                    _ => Func::EndsWith { case_sensitive },
                };
                return Ok(Expr::Call(func, a));
            }
            "downcase" => Func::Downcase,
            "upcase" => Func::Upcase,
            "strip_whitespace" => Func::StripWhitespace,
            "length" => Func::Length,
            "to_string" => Func::ToString,
            "to_int" => Func::ToInt,
            "to_bool" => Func::ToBool,
            "now" => return Ok(Expr::Call(Func::Now, Vec::new())),
            "string" => Func::Assert(Kind::String),
            "int" => Func::Assert(Kind::Integer),
            "bool" => Func::Assert(Kind::Boolean),
            "object" => Func::Assert(Kind::Object),
            "is_object" => Func::Is(Kind::Object),
            "is_string" => Func::Is(Kind::String),
            "is_integer" => Func::Is(Kind::Integer),
            "is_boolean" => Func::Is(Kind::Boolean),
            "is_null" => Func::Is(Kind::Null),
            "is_float" => Func::Is(Kind::Float),
            "match" | "parse_regex" => {
                let Some(ast::Literal::Regex(pattern)) = literal(1) else {
                    return self.no(node, "a pattern that is not a regex literal");
                };
                if bool_arg(2, false) != Some(false) {
                    return self.no(node, "`numeric_groups`");
                }
                let Ok(regex) = regex::Regex::new(pattern) else {
                    return self.no(node, "a regex the fast path cannot compile");
                };
                let regex = Arc::new(regex);
                if name == "match" {
                    Func::Match(regex)
                } else {
                    let names: Vec<(Box<str>, usize)> = regex
                        .capture_names()
                        .enumerate()
                        .filter_map(|(i, n)| n.map(|n| (n.into(), i)))
                        .collect();
                    Func::ParseRegex(regex, names.into())
                }
            }
            "parse_key_value" => {
                let defaults = [(1, "="), (2, " "), (3, "lenient")];
                for (i, want) in defaults {
                    match (args[i], literal(i)) {
                        (None, _) => {}
                        (Some(_), Some(ast::Literal::String(t)))
                            if t.as_literal_string() == Some(want) => {}
                        _ => return self.no(node, "`parse_key_value` with other delimiters"),
                    }
                }
                if bool_arg(4, true) != Some(true) {
                    return self.no(node, "`parse_key_value` without standalone keys");
                }
                Func::ParseKeyValue
            }
            "del" | "exists" => {
                let path = match args[0].map(|e| e.inner()) {
                    Some(ast::Expr::Query(q)) => self.query(q.inner()),
                    _ => None,
                };
                if args[1].is_some() {
                    return self.no(node, "`compact`");
                }
                return match (name, path) {
                    ("del", Some(Target::Path(p))) if p.len() == 1 => {
                        let V::Lit(name) = self.literal(p[0].as_bytes()) else {
                            return self.no(node, "this path");
                        };
                        self.writes = true;
                        Ok(Expr::Del(name))
                    }
                    ("exists", Some(Target::Path(p))) => Ok(Expr::Exists(p)),
                    _ => self.no(node, "this path"),
                };
            }
            "parse_json" | "parse_syslog" | "parse_timestamp" => {
                // Every argument but the value is a literal, written into the one-call program.
                let mut text = format!("{name}!(.v");
                for (i, param) in params.iter().enumerate().skip(1) {
                    let Some(arg) = args[i] else { continue };
                    if !matches!(arg.inner(), ast::Expr::Literal(_)) {
                        return self.no(node, "a computed argument of a parser");
                    }
                    let lit = self.source.get(arg.start()..arg.end()).unwrap_or("null");
                    text.push_str(&format!(", {param}: {lit}"));
                }
                text.push(')');
                let Ok(compiled) = vrl::compiler::compile(&text, &super::FUNCTIONS) else {
                    return self.no(node, "a parser call the fast path cannot isolate");
                };
                Func::Vrl(Arc::new(compiled.program))
            }
            "merge" => return self.no(node, "`merge` outside `. = merge(., x)`"),
            _ => return self.no(node, "a function outside the fast path's set"),
        };
        Ok(Expr::Call(func, value(self)?))
    }
}

/// A path of field names; `None` when it indexes an array (outside the subset).
fn field_path(segments: &[OwnedSegment]) -> Option<Vec<Box<str>>> {
    segments
        .iter()
        .map(|seg| match seg {
            OwnedSegment::Field(f) => Some(f.as_str().into()),
            OwnedSegment::Index(_) => None,
        })
        .collect()
}

enum Target {
    Root,
    Noop,
    Path(Vec<Box<str>>),
    Var(usize),
    VarPath(usize, Vec<Box<str>>),
}

/// The event was not finished on the fast path: run it on the VRL runtime.
#[derive(Debug)]
pub struct Bail;

/// What a program did with one event on the fast path.
pub enum Done {
    /// The event, as the overlay describes it.
    Event,
    /// `abort` ran (no message).
    Aborted,
}

/// The overlay size from which its names are indexed.
const INDEX_FROM: usize = 32;

/// Per-task state: variables, the event's overlay, objects made by functions.
#[derive(Default)]
pub struct Machine {
    vars: Vec<V>,
    /// The event's changes, in the order they were first made.
    pub overlay: Vec<Slot>,
    /// Where each name is in `overlay`, once it holds more than [`INDEX_FROM`] entries (a line
    /// of many key=value pairs merged into the event): lookups stay constant-time.
    index: std::collections::HashMap<Box<[u8]>, usize>,
    objs: Vec<Vec<(Key, Name, V)>>,
    /// For a program that only reads the event: the top-level fields of up to eight bytes it
    /// read on this event (a route's `.severity == "err" || .severity == "crit"` looks once).
    read: Vec<(Name, Option<V>)>,
    reads_only: bool,
    /// For each own field `i`, bit `2i`: whether [`Machine::shadowed`] looked on this event;
    /// bit `2i + 1`: what it found.
    shadow_known: u32,
    nobjs: usize,
    arrs: Vec<Vec<V>>,
    narrs: usize,
    /// For the parsers that run VRL's implementation.
    runtime: vrl::compiler::runtime::Runtime,
    pub timezone: vrl::compiler::TimeZone,
}

/// A key: text of the output arena or of the program, in one word (see [`Key::get`]). An enum
/// of the two took twelve bytes, which the compiler assembled on the stack from three stores and
/// read back as one wider load when it copied a key into the overlay: a store-forwarding stall
/// on every field a program set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Key(u64);

/// What a [`Key`] names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyOf {
    Span(Span),
    /// A literal of the program (a field name it assigns).
    Lit(u32),
}

/// The start a span never has (an arena is less than 4 GiB), which marks a literal.
const LIT_MARK: u32 = u32::MAX;

impl Key {
    /// Text of the output arena.
    #[inline]
    pub fn span(s: Span) -> Key {
        debug_assert!(s.start != LIT_MARK);
        Key(u64::from(s.start) | (u64::from(s.end) << 32))
    }

    /// The program's literal `i`.
    #[inline]
    pub fn lit(i: u32) -> Key {
        Key(u64::from(LIT_MARK) | (u64::from(i) << 32))
    }

    #[inline]
    pub fn get(self) -> KeyOf {
        let (low, high) = (self.0 as u32, (self.0 >> 32) as u32);
        if low == LIT_MARK {
            KeyOf::Lit(high)
        } else {
            KeyOf::Span(Span {
                start: low,
                end: high,
            })
        }
    }
}

/// One change of the overlay: field `key` is now `value` (`None`: deleted).
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub key: Key,
    pub name: Name,
    /// The index of the name in loghaul's own fields ([`OWN_NAMES`]), when it is one.
    pub own: Option<u8>,
    pub value: Option<V>,
}

impl Slot {
    /// The change of field `key` (named `name`) to `value`, with its own-field index.
    #[inline]
    fn new(cx: &Cx<'_, '_>, key: Key, name: Name, value: Option<V>) -> Slot {
        Slot {
            key,
            name,
            own: own_of_lazy(name, || cx.key_bytes(key)),
            value,
        }
    }
}

/// A field name's first eight bytes (big-endian, zero-padded) and its length. Names are
/// compared by these two integers first, so looking a name up in the overlay or ordering the
/// keys of an output record rarely reads the bytes: most names differ in their first eight
/// bytes or their length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Name {
    pre: u64,
    len: u32,
}

impl Name {
    /// The name of `b`: [`Name::of_const`] for the hot path (eight bytes read at once when
    /// there are eight, where the constant version's loop compiles to a `memmove` call).
    #[inline]
    pub fn of(b: &[u8]) -> Name {
        let pre = match b.first_chunk::<8>() {
            Some(head) => u64::from_be_bytes(*head),
            None => {
                let mut pre = 0u64;
                for (i, c) in b.iter().enumerate() {
                    pre |= u64::from(*c) << (56 - 8 * i);
                }
                pre
            }
        };
        Name {
            pre,
            len: b.len() as u32,
        }
    }

    /// The name of `b`, in constants.
    pub const fn of_const(b: &[u8]) -> Name {
        let mut buf = [0u8; 8];
        let mut i = 0;
        while i < b.len() && i < 8 {
            buf[i] = b[i];
            i += 1;
        }
        Name {
            pre: u64::from_be_bytes(buf),
            len: b.len() as u32,
        }
    }

    /// Whether the name `a` (named `self`) is `b` (named `other`); the bytes are read only when
    /// the two integers cannot tell.
    #[inline]
    pub fn same<'a, 'b>(
        self,
        a: impl FnOnce() -> &'a [u8],
        other: Name,
        b: impl FnOnce() -> &'b [u8],
    ) -> bool {
        self == other && (self.len <= 8 || a().get(8..) == b().get(8..))
    }

    /// Six bits of the name's integers, equal for equal names: a slot in a set of 64.
    #[inline]
    pub fn hash6(self) -> u32 {
        let h = (self.pre ^ u64::from(self.len)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 58) as u32
    }

    /// The name's first eight bytes, as one integer: two names that differ there order by it
    /// alone.
    #[inline]
    pub fn pre(self) -> u64 {
        self.pre
    }

    /// The byte order of the names `a` (named `self`) and `b` (named `other`).
    #[inline]
    pub fn order<'a, 'b>(
        self,
        a: impl FnOnce() -> &'a [u8],
        other: Name,
        b: impl FnOnce() -> &'b [u8],
    ) -> std::cmp::Ordering {
        self.pre.cmp(&other.pre).then_with(|| a().cmp(b()))
    }
}

/// loghaul's own fields' names, in the order of [`loghaul_codec::encode::FIXED_FIELDS`].
pub const OWN_NAMES: [Name; 14] = {
    let own = loghaul_codec::encode::FIXED_FIELDS;
    let mut names = [Name { pre: 0, len: 0 }; 14];
    let mut i = 0;
    while i < 14 {
        names[i] = Name::of_const(own[i].as_bytes());
        i += 1;
    }
    names
};

/// The index of `bytes` (named `name`) among loghaul's own fields.
#[inline]
pub fn own_of(name: Name, bytes: &[u8]) -> Option<u8> {
    own_of_lazy(name, || bytes)
}

/// [`own_of`] with the bytes fetched only if the name's integers cannot tell (a name longer
/// than eight bytes whose first eight are an own field's): most keys are told by length alone.
#[inline]
fn own_of_lazy<'a>(name: Name, bytes: impl FnOnce() -> &'a [u8]) -> Option<u8> {
    // By length first: at most three names share one, most keys have none of theirs.
    let candidates: &[u8] = match name.len {
        3 => &[12],
        5 => &[4, 13],
        6 => &[3],
        7 => &[2, 9, 7],
        8 => &[1, 5, 6],
        9 => &[0, 10],
        11 => &[11],
        15 => &[8],
        _ => return None,
    };
    let own = loghaul_codec::encode::FIXED_FIELDS;
    let i = candidates
        .iter()
        .copied()
        .find(|i| OWN_NAMES[usize::from(*i)].pre == name.pre)?;
    (name.len <= 8 || own[usize::from(i)].as_bytes() == bytes()).then_some(i)
}

/// The bytes of the output arena: the input's, then what this batch appended.
pub struct Arena<'a> {
    pub input: &'a [u8],
    pub extra: &'a mut Vec<u8>,
}

impl Arena<'_> {
    pub fn get(&self, span: Span) -> &[u8] {
        let (s, e) = (span.start as usize, span.end as usize);
        if e <= self.input.len() {
            self.input.get(s..e).unwrap_or_default()
        } else {
            let base = self.input.len();
            self.extra
                .get(s.saturating_sub(base)..e.saturating_sub(base))
                .unwrap_or_default()
        }
    }

    fn push(&mut self, bytes: &[u8]) -> Span {
        let start = self.input.len() + self.extra.len();
        self.extra.extend_from_slice(bytes);
        Span::new(start, start + bytes.len())
    }
}

/// What the machine reads an event through.
pub struct Cx<'a, 'b> {
    pub program: &'a FastProgram,
    pub batch: &'a EventBatch,
    pub event: &'a Event,
    pub arena: Arena<'b>,
}

impl Cx<'_, '_> {
    fn key_bytes(&self, k: Key) -> &[u8] {
        key_bytes(&self.arena, &self.program.literals, k)
    }

    /// The bytes of a string value; `None` for other kinds.
    fn text(&self, v: V) -> Option<&[u8]> {
        match v {
            V::Str(s) => Some(self.arena.get(s)),
            V::Static(s) => Some(s),
            V::Lit(i) => self.program.literals.get(i as usize).map(|b| &b[..]),
            V::Rec(Value::Str(s) | Value::Bytes(s)) => Some(self.batch.str(s)),
            _ => None,
        }
    }
}

impl Machine {
    /// Runs the program on one event; the result is in `self.overlay`.
    ///
    /// # Errors
    ///
    /// [`Bail`]: the event must run on the VRL runtime.
    pub fn run(&mut self, cx: &mut Cx<'_, '_>) -> Result<Done, Bail> {
        self.reads_only = false;
        self.shadow_known = 0;
        self.vars.clear();
        self.vars.resize(cx.program.vars, V::Null);
        self.overlay.clear();
        self.index.clear();
        self.nobjs = 0;
        self.narrs = 0;
        for e in &cx.program.body {
            match self.eval(cx, e) {
                Ok(_) => {}
                Err(Flow::Abort) => return Ok(Done::Aborted),
                Err(Flow::Bail) => return Err(Bail),
            }
        }
        Ok(Done::Event)
    }

    /// Evaluates a condition: `Ok(true)` only for `true`.
    ///
    /// # Errors
    ///
    /// [`Bail`]: test it on the VRL runtime.
    pub fn test(&mut self, cx: &mut Cx<'_, '_>) -> Result<bool, Bail> {
        self.vars.clear();
        self.vars.resize(cx.program.vars, V::Null);
        self.overlay.clear();
        self.index.clear();
        self.nobjs = 0;
        self.narrs = 0;
        self.read.clear();
        self.shadow_known = 0;
        self.reads_only = cx.program.reads_only;
        let mut last = Ok(V::Null);
        for e in &cx.program.body {
            last = self.eval(cx, e);
            if last.is_err() {
                break;
            }
        }
        self.reads_only = false;
        Ok(last.map_err(|_| Bail)? == V::Bool(true))
    }

    /// Whether a key of the event's record shadows loghaul's own field `own` (looked up once
    /// per event: the input record does not change while a program runs).
    fn shadowed(&mut self, cx: &Cx<'_, '_>, own: u8) -> bool {
        let bit = 1u32 << (2 * u32::from(own));
        if self.shadow_known & bit == 0 {
            let name = loghaul_codec::encode::FIXED_FIELDS
                .get(usize::from(own))
                .map_or(&b""[..], |n| n.as_bytes());
            let found = cx
                .batch
                .fields_of(cx.event)
                .iter()
                .any(|f| cx.batch.str(f.name) == name);
            self.shadow_known |= bit | if found { bit << 1 } else { 0 };
        }
        self.shadow_known & (bit << 1) != 0
    }

    fn new_obj(&mut self) -> u32 {
        if self.nobjs == self.objs.len() {
            self.objs.push(Vec::new());
        }
        let i = self.nobjs;
        self.objs[i].clear();
        self.nobjs += 1;
        i as u32
    }

    pub fn obj(&self, i: u32) -> &[(Key, Name, V)] {
        self.objs.get(i as usize).map_or(&[], |o| &o[..])
    }

    fn new_arr(&mut self) -> u32 {
        if self.narrs == self.arrs.len() {
            self.arrs.push(Vec::new());
        }
        let i = self.narrs;
        self.arrs[i].clear();
        self.narrs += 1;
        i as u32
    }

    pub fn arr(&self, i: u32) -> &[V] {
        self.arrs.get(i as usize).map_or(&[], |a| &a[..])
    }

    /// A VRL value (a parser's result) as a fast-path value; its text appended to the arena.
    fn vrl_to_fast(
        &mut self,
        cx: &mut Cx<'_, '_>,
        v: &vrl::value::Value,
        depth: usize,
    ) -> Result<V, Flow> {
        use vrl::value::Value as Vrl;
        if depth > 64 {
            return Err(Flow::Bail);
        }
        Ok(match v {
            Vrl::Bytes(b) => V::Str(cx.arena.push(b)),
            Vrl::String(s) => V::Str(cx.arena.push(s.as_bytes())),
            Vrl::Integer(i) => V::Int(*i),
            Vrl::Float(f) => V::Float(f.into_inner()),
            Vrl::Boolean(b) => V::Bool(*b),
            Vrl::Null => V::Null,
            Vrl::Timestamp(t) => V::Ts(t.timestamp_nanos_opt().ok_or(Flow::Bail)?),
            Vrl::Object(map) => {
                let o = self.new_obj();
                for (k, item) in map {
                    let key = Key::span(cx.arena.push(k.as_bytes()));
                    let item = self.vrl_to_fast(cx, item, depth + 1)?;
                    self.objs[o as usize].push((key, Name::of(k.as_bytes()), item));
                }
                V::Obj(o)
            }
            Vrl::Array(items) => {
                let a = self.new_arr();
                for item in items {
                    let item = self.vrl_to_fast(cx, item, depth + 1)?;
                    self.arrs[a as usize].push(item);
                }
                V::Arr(a)
            }
            Vrl::Regex(_) => return Err(Flow::Bail),
        })
    }

    /// A top-level field of the event as the program sees it now.
    pub fn field(&self, cx: &Cx<'_, '_>, name: &[u8]) -> Option<V> {
        let n = Name::of(name);
        if let Some(i) = self.find(cx, n, name) {
            return self.overlay[i].value;
        }
        original_field(cx.batch, cx.event, name)
    }

    /// Where `bytes` (named `name`) is in the overlay.
    fn find(&self, cx: &Cx<'_, '_>, name: Name, bytes: &[u8]) -> Option<usize> {
        if self.overlay.len() > INDEX_FROM {
            return self.index.get(bytes).copied();
        }
        self.overlay
            .iter()
            .position(|s| s.name.same(|| cx.key_bytes(s.key), name, || bytes))
    }

    fn set(&mut self, cx: &Cx<'_, '_>, key: Key, name: Name, value: Option<V>) {
        let bytes = cx.key_bytes(key);
        if let Some(i) = self.find(cx, name, bytes) {
            self.overlay[i].value = value;
            return;
        }
        self.push_slot(cx, key, name, value);
    }

    /// Adds a name the overlay does not hold yet.
    fn push_slot(&mut self, cx: &Cx<'_, '_>, key: Key, name: Name, value: Option<V>) {
        self.overlay.push(Slot::new(cx, key, name, value));
        if self.overlay.len() > INDEX_FROM {
            if self.index.is_empty() {
                self.index_all(cx);
            } else {
                self.index
                    .insert(cx.key_bytes(key).into(), self.overlay.len() - 1);
            }
        }
    }

    /// Indexes every name of the overlay (once it grew past [`INDEX_FROM`]).
    fn index_all(&mut self, cx: &Cx<'_, '_>) {
        for (i, s) in self.overlay.iter().enumerate() {
            self.index.insert(cx.key_bytes(s.key).into(), i);
        }
    }

    fn get_path(&mut self, cx: &Cx<'_, '_>, path: &[Box<str>]) -> Option<V> {
        let (first, rest) = path.split_first()?;
        let first = first.as_bytes();
        let v = if self.reads_only && first.len() <= 8 {
            // A name of up to eight bytes is its `Name`: the integers alone tell.
            let name = Name::of(first);
            match self.read.iter().find(|(n, _)| *n == name) {
                Some((_, v)) => *v,
                None => {
                    let v = self.field(cx, first);
                    self.read.push((name, v));
                    v
                }
            }
        } else {
            self.field(cx, first)
        }?;
        self.descend(cx, v, rest)
    }

    /// The value at `path` below `v`.
    fn descend(&self, cx: &Cx<'_, '_>, mut v: V, path: &[Box<str>]) -> Option<V> {
        for seg in path {
            v = match v {
                V::Rec(c @ Value::Map(..)) => cx
                    .batch
                    .children(c)
                    .iter()
                    .find(|f| cx.batch.str(f.name) == seg.as_bytes())
                    .map(|f| V::Rec(f.value))?,
                V::Obj(i) => self
                    .obj(i)
                    .iter()
                    .find(|(k, _, _)| cx.key_bytes(*k) == seg.as_bytes())
                    .map(|(_, _, v)| *v)?,
                // Reading into anything else finds nothing.
                V::Sd | V::Peer | V::Flags => return Some(V::Sd),
                _ => return None,
            };
        }
        Some(v)
    }

    fn eval(&mut self, cx: &mut Cx<'_, '_>, e: &Expr) -> Result<V, Flow> {
        Ok(match e {
            Expr::Const(v) => *v,
            Expr::Path(p) => match self.get_path(cx, p) {
                // Values the fast path keeps opaque are read on the runtime.
                Some(V::Sd | V::Peer | V::Flags) => return Err(Flow::Bail),
                Some(v) => normalize(v),
                None => V::Null,
            },
            Expr::Var(i) => self.vars.get(*i).copied().unwrap_or(V::Null),
            Expr::VarPath(i, p) => {
                let v = self.vars.get(*i).copied().unwrap_or(V::Null);
                match self.descend(cx, v, p) {
                    Some(V::Sd | V::Peer | V::Flags) => return Err(Flow::Bail),
                    Some(v) => normalize(v),
                    None => V::Null,
                }
            }
            Expr::Not(x) => match self.eval(cx, x)? {
                V::Bool(b) => V::Bool(!b),
                _ => return Err(Flow::Bail),
            },
            Expr::And(a, b) => match self.eval(cx, a)? {
                V::Bool(false) => V::Bool(false),
                V::Bool(true) => match self.eval(cx, b)? {
                    V::Bool(b) => V::Bool(b),
                    _ => return Err(Flow::Bail),
                },
                _ => return Err(Flow::Bail),
            },
            Expr::Or(a, b) => match self.eval(cx, a)? {
                V::Bool(true) => V::Bool(true),
                V::Bool(false) => match self.eval(cx, b)? {
                    V::Bool(b) => V::Bool(b),
                    _ => return Err(Flow::Bail),
                },
                _ => return Err(Flow::Bail),
            },
            Expr::Cmp(op, a, b) => {
                let (a, b) = (self.eval(cx, a)?, self.eval(cx, b)?);
                V::Bool(compare(cx, *op, a, b).ok_or(Flow::Bail)?)
            }
            Expr::Add(a, b) => {
                let (a, b) = (self.eval(cx, a)?, self.eval(cx, b)?);
                match (a, b) {
                    (V::Int(x), V::Int(y)) => V::Int(x.checked_add(y).ok_or(Flow::Bail)?),
                    _ => match (cx.text(a), cx.text(b)) {
                        (Some(x), Some(y)) => {
                            let joined = [x, y].concat();
                            V::Str(cx.arena.push(&joined))
                        }
                        _ => return Err(Flow::Bail),
                    },
                }
            }
            Expr::If(p, then, otherwise) => {
                let branch = match self.eval(cx, p)? {
                    V::Bool(true) => then,
                    V::Bool(false) => otherwise,
                    _ => return Err(Flow::Bail),
                };
                let mut last = V::Null;
                for e in branch {
                    last = self.eval(cx, e)?;
                }
                last
            }
            Expr::Block(es) => {
                let mut last = V::Null;
                for e in es {
                    last = self.eval(cx, e)?;
                }
                last
            }
            Expr::SetField(name, x) => {
                let v = self.eval(cx, x)?;
                let n = cx.program.names.get(*name as usize).copied();
                self.set(cx, Key::lit(*name), n.unwrap_or_default(), Some(v));
                v
            }
            Expr::OwnCode {
                own,
                code,
                ne,
                general,
            } => {
                if !self.overlay.is_empty() || self.shadowed(cx, *own) {
                    return self.eval(cx, general);
                }
                let have = if *own == 6 {
                    cx.event
                        .severity
                        .filter(|c| names::severity_name(*c).is_some())
                } else {
                    cx.event
                        .facility
                        .filter(|c| names::facility_name(*c).is_some())
                };
                // A missing field is null, which equals no name.
                V::Bool((have.is_some() && have == *code) != *ne)
            }
            Expr::MergeRoot(x) => {
                let V::Obj(i) = self.eval(cx, x)? else {
                    return Err(Flow::Bail);
                };
                // An object's keys are unique, so into an unchanged event (`. |= parse_...`
                // first) its entries go in one run, without looking each up.
                if self.overlay.is_empty() {
                    let obj = self.objs.get(i as usize).map_or(&[][..], |o| &o[..]);
                    self.overlay.extend(
                        obj.iter()
                            .map(|&(key, name, v)| Slot::new(cx, key, name, Some(v))),
                    );
                    if self.overlay.len() > INDEX_FROM {
                        self.index_all(cx);
                    }
                } else {
                    for j in 0..self.obj(i).len() {
                        let (k, n, v) = self.objs[i as usize][j];
                        self.set(cx, k, n, Some(v));
                    }
                }
                V::Obj(i)
            }
            Expr::SetVar(i, x) => {
                let v = self.eval(cx, x)?;
                if let Some(slot) = self.vars.get_mut(*i) {
                    *slot = v;
                }
                v
            }
            Expr::SetVarInfallible(ok, err, x) => {
                // A failure would be caught here by VRL; the runtime does it exactly.
                let v = self.eval(cx, x)?;
                if let Some(slot) = ok.and_then(|i| self.vars.get_mut(i)) {
                    *slot = v;
                }
                if let Some(slot) = err.and_then(|i| self.vars.get_mut(i)) {
                    *slot = V::Null;
                }
                v
            }
            Expr::Del(name) => {
                let bytes = cx
                    .program
                    .literals
                    .get(*name as usize)
                    .map_or(&[][..], |b| &b[..]);
                let n = cx.program.names.get(*name as usize).copied();
                let n = n.unwrap_or_default();
                let at = self.find(cx, n, bytes);
                let old = match at {
                    Some(i) => self.overlay[i].value,
                    None => original_field(cx.batch, cx.event, bytes),
                };
                if matches!(old, Some(V::Sd | V::Peer | V::Flags)) {
                    return Err(Flow::Bail);
                }
                match (at, old) {
                    (_, None) => {}
                    (Some(i), Some(_)) => self.overlay[i].value = None,
                    (None, Some(_)) => self.push_slot(cx, Key::lit(*name), n, None),
                }
                old.map_or(V::Null, normalize)
            }
            Expr::Exists(p) => match self.get_path(cx, p) {
                Some(V::Sd | V::Peer | V::Flags) if p.len() > 1 => return Err(Flow::Bail),
                found => V::Bool(found.is_some()),
            },
            Expr::Abort => return Err(Flow::Abort),
            Expr::Call(f, args) => {
                let mut vals = [V::Null; 2];
                for (slot, a) in vals.iter_mut().zip(args) {
                    *slot = self.eval(cx, a)?;
                }
                self.call(cx, f, vals)?
            }
        })
    }

    fn call(&mut self, cx: &mut Cx<'_, '_>, f: &Func, args: [V; 2]) -> Result<V, Flow> {
        let text = |cx: &Cx<'_, '_>, v: V| cx.text(v).map(<[u8]>::to_vec).ok_or(Flow::Bail);
        Ok(match f {
            Func::Contains { case_sensitive }
            | Func::StartsWith { case_sensitive }
            | Func::EndsWith { case_sensitive } => {
                let (Some(s), Some(sub)) = (cx.text(args[0]), cx.text(args[1])) else {
                    return Err(Flow::Bail);
                };
                if !(*case_sensitive || (s.is_ascii() && sub.is_ascii())) {
                    return Err(Flow::Bail);
                }
                let (s, sub) = if *case_sensitive {
                    (
                        std::borrow::Cow::Borrowed(s),
                        std::borrow::Cow::Borrowed(sub),
                    )
                } else {
                    (
                        std::borrow::Cow::Owned(s.to_ascii_lowercase()),
                        std::borrow::Cow::Owned(sub.to_ascii_lowercase()),
                    )
                };
                V::Bool(match f {
                    Func::Contains { .. } => memchr::memmem::find(&s, &sub).is_some(),
                    Func::StartsWith { .. } => s.starts_with(&sub),
                    _ => s.ends_with(&sub),
                })
            }
            Func::Downcase | Func::Upcase => {
                let s = text(cx, args[0])?;
                if !s.is_ascii() {
                    return Err(Flow::Bail);
                }
                let mapped = if matches!(f, Func::Downcase) {
                    s.to_ascii_lowercase()
                } else {
                    s.to_ascii_uppercase()
                };
                if mapped == s {
                    args[0]
                } else {
                    V::Str(cx.arena.push(&mapped))
                }
            }
            Func::StripWhitespace => {
                let span = match args[0] {
                    V::Str(s) | V::Rec(Value::Str(s) | Value::Bytes(s)) => s,
                    _ => return Err(Flow::Bail),
                };
                let s = cx.arena.get(span);
                let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
                let start = s.iter().position(|b| !ws(b)).unwrap_or(s.len());
                let end = s.iter().rposition(|b| !ws(b)).map_or(start, |i| i + 1);
                // Unicode white space past ASCII is the runtime's to judge.
                if s.get(start).is_some_and(|b| *b >= 0x80)
                    || (end > 0 && s.get(end - 1).is_some_and(|b| *b >= 0x80))
                {
                    return Err(Flow::Bail);
                }
                V::Str(Span::new(
                    span.start as usize + start,
                    span.start as usize + end,
                ))
            }
            Func::Length => match cx.text(args[0]) {
                Some(s) => V::Int(s.len() as i64),
                None => return Err(Flow::Bail),
            },
            Func::ToString => match args[0] {
                V::Int(i) => V::Str(cx.arena.push(i.to_string().as_bytes())),
                V::Bool(b) => V::Static(if b { b"true" } else { b"false" }),
                V::Null => V::Static(b""),
                v if cx.text(v).is_some() => v,
                _ => return Err(Flow::Bail),
            },
            Func::ToInt => match args[0] {
                V::Int(i) => V::Int(i),
                V::Bool(b) => V::Int(i64::from(b)),
                V::Null => V::Int(0),
                v => {
                    let s = cx.text(v).ok_or(Flow::Bail)?;
                    // Plain decimal integers only; the rest is the runtime's.
                    let digits = s.strip_prefix(b"-").unwrap_or(s);
                    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                        return Err(Flow::Bail);
                    }
                    let n = std::str::from_utf8(s)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .ok_or(Flow::Bail)?;
                    V::Int(n)
                }
            },
            Func::ToBool => match args[0] {
                V::Bool(b) => V::Bool(b),
                V::Null => V::Bool(false),
                V::Int(i) => V::Bool(i != 0),
                _ => return Err(Flow::Bail),
            },
            Func::Match(re) => {
                let s = cx.text(args[0]).ok_or(Flow::Bail)?;
                let s = std::str::from_utf8(s).map_err(|_| Flow::Bail)?;
                V::Bool(re.is_match(s))
            }
            Func::ParseRegex(re, names) => {
                let span = match args[0] {
                    V::Str(s) | V::Rec(Value::Str(s) | Value::Bytes(s)) => s,
                    _ => return Err(Flow::Bail),
                };
                let s = std::str::from_utf8(cx.arena.get(span)).map_err(|_| Flow::Bail)?;
                let caps = re.captures(s).ok_or(Flow::Bail)?;
                let mut entries: Vec<(&str, V)> = names
                    .iter()
                    .map(|(name, i)| {
                        let v = caps.get(*i).map_or(V::Null, |m| {
                            let base = span.start as usize;
                            V::Str(Span::new(base + m.start(), base + m.end()))
                        });
                        (&**name, v)
                    })
                    .collect();
                // VRL objects are ordered by key; a repeated name keeps its last capture.
                entries.sort_by(|a, b| a.0.cmp(b.0));
                entries.reverse();
                entries.dedup_by(|a, b| a.0 == b.0);
                entries.reverse();
                let o = self.new_obj();
                for (name, v) in entries {
                    let key = Key::span(cx.arena.push(name.as_bytes()));
                    self.objs[o as usize].push((key, Name::of(name.as_bytes()), v));
                }
                V::Obj(o)
            }
            Func::ParseKeyValue => {
                let s = match args[0] {
                    V::Str(s) | V::Rec(Value::Str(s) | Value::Bytes(s)) => s,
                    _ => return Err(Flow::Bail),
                };
                let o = self.new_obj();
                let mut pairs = std::mem::take(&mut self.objs[o as usize]);
                let line = cx.arena.get(s);
                let ok = parse_key_value(line, s, &mut pairs);
                // The keys are spans of `line`.
                let key = |k: Key| match k.get() {
                    KeyOf::Span(k) => line
                        .get((k.start - s.start) as usize..(k.end - s.start) as usize)
                        .unwrap_or_default(),
                    _ => &[],
                };
                // VRL orders an object by key, but no reader of the fast path's objects sees
                // their order (lookups are by name, the output sorts what it writes and VRL
                // values sort themselves), so the pairs stay in the line's order unless many.
                let mut repeated = false;
                if ok && pairs.len() <= 32 {
                    // A set of 64 bits by a hash of each name: only a name whose bit is taken
                    // already is compared with those before it (most lines repeat no key).
                    let mut seen = 0u64;
                    for (j, a) in pairs.iter().enumerate() {
                        let bit = 1u64 << (a.1.hash6());
                        if seen & bit != 0 {
                            repeated |= pairs[..j]
                                .iter()
                                .any(|b| a.1.same(|| key(a.0), b.1, || key(b.0)));
                        }
                        seen |= bit;
                    }
                } else if ok {
                    pairs.sort_by(|a, b| a.1.order(|| key(a.0), b.1, || key(b.0)));
                    repeated = pairs
                        .windows(2)
                        .any(|w| w[0].1.same(|| key(w[0].0), w[1].1, || key(w[1].0)));
                }
                self.objs[o as usize] = pairs;
                // Repeated keys become arrays in VRL: the runtime's case.
                if !ok || repeated {
                    return Err(Flow::Bail);
                }
                V::Obj(o)
            }
            Func::Now => V::Ts(Timestamp::now().nanos),
            Func::Vrl(program) => {
                let text = cx.text(args[0]).ok_or(Flow::Bail)?;
                let mut obj = vrl::value::ObjectMap::new();
                obj.insert(
                    "v".into(),
                    vrl::value::Value::Bytes(bytes::Bytes::copy_from_slice(text)),
                );
                let mut target = vrl::compiler::TargetValue {
                    value: vrl::value::Value::Object(obj),
                    metadata: vrl::value::Value::Object(vrl::value::ObjectMap::new()),
                    secrets: vrl::value::Secrets::default(),
                };
                let result = self.runtime.resolve(&mut target, program, &self.timezone);
                self.runtime.clear();
                let value = result.map_err(|_| Flow::Bail)?;
                self.vrl_to_fast(cx, &value, 0)?
            }
            Func::Assert(k) => {
                let v = normalize(args[0]);
                if kind_of(cx, v) != Some(*k) {
                    return Err(Flow::Bail);
                }
                v
            }
            Func::Is(k) => match kind_of(cx, normalize(args[0])) {
                Some(found) => V::Bool(found == *k),
                None => return Err(Flow::Bail),
            },
        })
    }
}

enum Flow {
    Abort,
    Bail,
}

/// Record scalars read as their VRL kind (so comparisons see a string, an integer).
fn normalize(v: V) -> V {
    match v {
        V::Rec(Value::Int(i)) => V::Int(i),
        V::Rec(Value::Bool(b)) => V::Bool(b),
        V::Rec(Value::Null) => V::Null,
        V::Rec(Value::Float(f)) if !f.is_nan() => V::Float(f),
        V::Rec(Value::Float(_)) => V::Null,
        other => other,
    }
}

/// VRL's comparison where it is simple; `None` where the runtime should judge.
fn compare(cx: &Cx<'_, '_>, op: Cmp, a: V, b: V) -> Option<bool> {
    let (a, b) = (normalize(a), normalize(b));
    if let (Some(x), Some(y)) = (cx.text(a), cx.text(b)) {
        return match op {
            Cmp::Eq => Some(x == y),
            Cmp::Ne => Some(x != y),
            _ => None,
        };
    }
    let ord = match (a, b) {
        (V::Int(x), V::Int(y)) => x.cmp(&y),
        (V::Bool(x), V::Bool(y)) if matches!(op, Cmp::Eq | Cmp::Ne) => x.cmp(&y),
        (V::Null, V::Null) if matches!(op, Cmp::Eq | Cmp::Ne) => std::cmp::Ordering::Equal,
        // Different simple kinds are unequal (a string is never an integer).
        (x, y) if matches!(op, Cmp::Eq | Cmp::Ne) && simple(cx, x) && simple(cx, y) => {
            if kind(cx, x) == kind(cx, y) {
                return None;
            }
            return Some(op == Cmp::Ne);
        }
        _ => return None,
    };
    Some(match op {
        Cmp::Eq => ord.is_eq(),
        Cmp::Ne => ord.is_ne(),
        Cmp::Lt => ord.is_lt(),
        Cmp::Le => ord.is_le(),
        Cmp::Gt => ord.is_gt(),
        Cmp::Ge => ord.is_ge(),
    })
}

/// The kind of a (normalized) value; `None` for kinds the type functions leave to the runtime.
fn kind_of(cx: &Cx<'_, '_>, v: V) -> Option<Kind> {
    match v {
        V::Null => Some(Kind::Null),
        V::Bool(_) => Some(Kind::Boolean),
        V::Int(_) => Some(Kind::Integer),
        V::Float(_) => Some(Kind::Float),
        V::Obj(_) | V::Rec(Value::Map(..)) => Some(Kind::Object),
        _ if cx.text(v).is_some() => Some(Kind::String),
        _ => None,
    }
}

fn simple(cx: &Cx<'_, '_>, v: V) -> bool {
    matches!(v, V::Null | V::Bool(_) | V::Int(_)) || cx.text(v).is_some()
}

fn kind(cx: &Cx<'_, '_>, v: V) -> u8 {
    match v {
        V::Null => 0,
        V::Bool(_) => 1,
        V::Int(_) => 2,
        _ if cx.text(v).is_some() => 3,
        _ => 4,
    }
}

/// A top-level field of the unchanged event, as [`super::convert::to_vrl`] shows it.
pub fn original_field(batch: &EventBatch, event: &Event, name: &[u8]) -> Option<V> {
    // The record first: its keys shadow loghaul's fields.
    if let Some(f) = batch
        .fields_of(event)
        .iter()
        .find(|f| batch.str(f.name) == name)
    {
        return Some(V::Rec(f.value));
    }
    own_of(Name::of(name), name).and_then(|i| original_own(batch, event, usize::from(i)))
}

/// loghaul's own field `i` ([`OWN_NAMES`]) of the unchanged event, ignoring the record.
pub fn original_own(batch: &EventBatch, event: &Event, i: usize) -> Option<V> {
    let span = |s: loghaul_core::OptSpan| s.get().map(V::Str);
    match i {
        0 => Some(V::Ts(batch.time_of(event).nanos)),
        1 => span(event.hostname),
        2 => span(event.appname),
        3 => span(event.procid),
        4 => span(event.msgid),
        5 => event
            .facility
            .and_then(names::facility_name)
            .map(|n| V::Static(n.as_bytes())),
        6 => event
            .severity
            .and_then(names::severity_name)
            .map(|n| V::Static(n.as_bytes())),
        7 => event.version.map(|v| V::Int(i64::from(v))),
        8 => event.structured_data.map(|_| V::Sd),
        9 => span(event.message),
        10 => batch.source_ip(event).map(|_| V::Peer),
        11 => Some(V::Static(static_source_type(batch.source_type))),
        12 => span(event.tag),
        13 => (!event.flags.is_empty()).then_some(V::Flags),
        _ => None,
    }
}

fn static_source_type(s: &'static str) -> &'static [u8] {
    s.as_bytes()
}

/// `parse_key_value` with its defaults (`=`, space, lenient, standalone keys) on the lines
/// whose reading is plain: space-separated `key=value`, `key="quoted value"` or `key` tokens
/// of printable ASCII or UTF-8 without backslashes, single quotes, tabs or spaces around `=`.
/// Anything else returns false: the runtime parses it (VRL's grammar has many corners).
/// Pairs are spans relative to `base` (the string's place in its arena).
fn parse_key_value(s: &[u8], base: Span, out: &mut Vec<(Key, Name, V)>) -> bool {
    out.clear();
    // The bytes that make a line unusual, in folds without an early exit (which the compiler
    // vectorises); UTF-8 is checked only past ASCII.
    let odd = s.iter().fold(false, |odd, b| {
        odd | (*b < 0x20) | (*b == b'\\') | (*b == b'\'') | (*b == 0x7f)
    });
    let wide = s.iter().fold(0u8, |w, b| w | *b);
    if odd || (wide >= 0x80 && std::str::from_utf8(s).is_err()) {
        return false;
    }
    let at = |a: usize, b: usize| Span::new(base.start as usize + a, base.start as usize + b);
    let mut i = 0;
    let n = s.len();
    while i < n && s[i] == b' ' {
        i += 1;
    }
    if i == n {
        return false;
    }
    // Tokens are short: their ends come from the line's classified blocks, not from `memchr`
    // calls (a call and a dispatch each); only a quoted value (often long) is searched with
    // `memchr`.
    let mut marks = Marks::new(s);
    while i < n {
        let start = i;
        if s[start] == b'"' || s[start] == b'=' {
            return false;
        }
        // The key: up to a space, an `=` or the end; a quote in it is the runtime's case.
        let j = marks.end(start, true);
        if j < n && s[j] == b'"' {
            return false;
        }
        let key = &s[start..j];
        if !plain_edges(key) {
            return false;
        }
        if j == n || s[j] == b' ' {
            // A standalone key; the next token must not begin with `=` (lenient spacing).
            out.push((Key::span(at(start, j)), Name::of(key), V::Bool(true)));
            i = j;
        } else {
            let vstart = j + 1;
            if vstart < n && s[vstart] == b'"' {
                // A quoted value: up to the next quote, which must end the token.
                let Some(close) = memchr::memchr(b'"', &s[vstart + 1..]) else {
                    return false;
                };
                let close = vstart + 1 + close;
                if close + 1 < n && s[close + 1] != b' ' {
                    return false;
                }
                out.push((
                    Key::span(at(start, j)),
                    Name::of(key),
                    V::Str(at(vstart + 1, close)),
                ));
                i = close + 1;
            } else {
                // The value: up to the next space (an `=` in it is part of it).
                let end = marks.end(vstart, false);
                if end < n && s[end] == b'"' {
                    return false;
                }
                let value = &s[vstart..end];
                if value.is_empty() {
                    // `key=` followed by a space reads the next token as its value
                    // (lenient spacing): the runtime's case.
                    if end < n {
                        return false;
                    }
                } else if !plain_edges(value) {
                    return false;
                }
                out.push((
                    Key::span(at(start, j)),
                    Name::of(key),
                    V::Str(at(vstart, end)),
                ));
                i = end;
            }
        }
        while i < n && s[i] == b' ' {
            i += 1;
        }
        if i < n && s[i] == b'=' {
            return false;
        }
    }
    !out.is_empty()
}

/// The ends of a line's tokens: its spaces and quotes, and its `=` signs, as bits, 64 bytes
/// at a time ([`loghaul_codec::kv_masks64`]). A token's end is a shift and a `trailing_zeros`
/// in the block at hand: a byte loop's exit (or a word loop's) depends on the token's length,
/// and mispredicted once a token.
struct Marks<'a> {
    s: &'a [u8],
    /// Where the classified block starts, and its masks.
    base: usize,
    delim: u64,
    eq: u64,
}

impl<'a> Marks<'a> {
    fn new(s: &'a [u8]) -> Marks<'a> {
        let (delim, eq) = loghaul_codec::kv_masks64(s, 0);
        Marks {
            s,
            base: 0,
            delim,
            eq,
        }
    }

    /// Where the token at `at` ends: the first space or quote from `at` (or `=` too, with
    /// `stop_at_eq`); the length of the line when none.
    #[inline]
    fn end(&mut self, at: usize, stop_at_eq: bool) -> usize {
        let n = self.s.len();
        let mut from = at;
        while from < n {
            if from < self.base || from - self.base >= 64 {
                self.base = from & !63;
                (self.delim, self.eq) = loghaul_codec::kv_masks64(self.s, self.base);
            }
            let eq = if stop_at_eq { self.eq } else { 0 };
            let m = (self.delim | eq) >> (from - self.base);
            if m != 0 {
                return (from + m.trailing_zeros() as usize).min(n);
            }
            from = self.base + 64;
        }
        n
    }
}

/// Whether `b` starts and ends with characters `str::trim` keeps (ASCII, not white space).
fn plain_edges(b: &[u8]) -> bool {
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => *f > b' ' && *f < 0x80 && *l > b' ' && *l < 0x80,
        _ => false,
    }
}

/// The bytes of a key.
pub fn key_bytes<'a>(arena: &'a Arena<'_>, literals: &'a [Box<[u8]>], k: Key) -> &'a [u8] {
    match k.get() {
        KeyOf::Span(s) => arena.get(s),
        KeyOf::Lit(i) => literals.get(i as usize).map_or(&[][..], |b| &b[..]),
    }
}

#[cfg(test)]
mod tests {
    use super::{Key, KeyOf, Name, Span, own_of};

    #[test]
    fn keys_pack_spans_and_literals_into_one_word() {
        for (start, end) in [
            (0, 0),
            (0, 5),
            (7, 7),
            (1 << 20, (1 << 20) + 9),
            (5, u32::MAX),
        ] {
            let span = Span { start, end };
            assert_eq!(Key::span(span).get(), KeyOf::Span(span));
        }
        for i in [0, 1, 77, u32::MAX] {
            assert_eq!(Key::lit(i).get(), KeyOf::Lit(i));
        }
        assert_ne!(Key::lit(3), Key::span(Span { start: 3, end: 3 }));
        assert_ne!(Key::lit(0), Key::span(Span { start: 0, end: 0 }));
    }

    #[test]
    fn own_names_are_found_by_name_and_length() {
        for (i, own) in loghaul_codec::encode::FIXED_FIELDS.iter().enumerate() {
            assert_eq!(
                own_of(Name::of(own.as_bytes()), own.as_bytes()),
                Some(i as u8)
            );
            // The same first eight bytes, another tail or length: not an own name.
            let longer = format!("{own}x");
            assert_eq!(own_of(Name::of(longer.as_bytes()), longer.as_bytes()), None);
            let mut other = own.as_bytes().to_vec();
            if let Some(last) = other.last_mut() {
                *last ^= 1;
            }
            assert_eq!(own_of(Name::of(&other), &other), None, "{own}");
        }
        for key in ["user", "status", "Message", "", "latency_ms", "sourceip"] {
            assert_eq!(own_of(Name::of(key.as_bytes()), key.as_bytes()), None);
        }
    }

    #[test]
    fn tokens_end_at_the_first_space_quote_or_stop() {
        // Every length and position around the 64-byte blocks, every stop in every place,
        // among ASCII and among bytes one bit away from a stop (UTF-8 continuation bytes).
        let lens = (0..20).chain(60..70).chain(126..131);
        for (len, filler) in lens.flat_map(|l| [(l, b'k'), (l, 0xa0), (l, 0xa2), (l, 0xbd)]) {
            for at in 0..=len {
                for (pos, byte) in (0..len)
                    .filter(|&p: &usize| p < 3 || p.abs_diff(at) < 3 || p + 3 > len || p % 64 < 2)
                    .flat_map(|p| [(p, b' '), (p, b'"'), (p, b'=')])
                {
                    let mut s = vec![filler; len];
                    s[pos] = byte;
                    if pos + 1 < len {
                        s[pos + 1] = 0x21;
                    }
                    for stop_at_eq in [true, false] {
                        let want = (at..len)
                            .find(|i| matches!(s[*i], b' ' | b'"') || (stop_at_eq && s[*i] == b'='))
                            .unwrap_or(len);
                        // A fresh scanner, and one that classified another block first.
                        let mut fresh = super::Marks::new(&s);
                        assert_eq!(fresh.end(at, stop_at_eq), want, "{s:?} from {at}");
                        let mut moved = super::Marks::new(&s);
                        moved.end(len.saturating_sub(1), stop_at_eq);
                        assert_eq!(moved.end(at, stop_at_eq), want, "{s:?} from {at}");
                    }
                }
            }
        }
    }

    #[test]
    fn names_order_as_their_bytes() {
        let keys: [&[u8]; 9] = [
            b"",
            b"a",
            b"a\0",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
            b"b",
        ];
        for a in keys {
            for b in keys {
                let (x, y) = (Name::of(a), Name::of(b));
                assert_eq!(x, Name::of_const(a), "{a:?}");
                assert_eq!(x.order(|| a, y, || b), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(x.same(|| a, y, || b), a == b, "{a:?} {b:?}");
            }
        }
    }
}

//! Vector Remap Language in loghaul: programs compiled at validation with VRL's own
//! diagnostics placed in the configuration file, and run on the events of a batch (the
//! event ↔ value mapping is [`convert`]).

pub mod convert;
pub mod fast;

use std::sync::{Arc, LazyLock};

use loghaul_config::Validator;
use loghaul_core::{Event, EventBatch};
use vrl::compiler::runtime::{Runtime, Terminate};
use vrl::compiler::{ExpressionError, Function, TargetValue, TimeZone};
use vrl::diagnostic::{Diagnostic, DiagnosticList, Formatter, Label};
use vrl::value::{Secrets, Value as Vrl};

/// VRL's standard library as this build has it (no network functions).
pub(crate) static FUNCTIONS: LazyLock<Vec<Box<dyn Function>>> = LazyLock::new(vrl::stdlib::all);

/// A compiled program and its text.
#[derive(Clone)]
pub struct Program {
    pub source: Arc<str>,
    pub program: Arc<vrl::compiler::Program>,
    /// The program on the fast path, when all of it is in the subset; otherwise why not.
    pub fast: Result<Arc<fast::FastProgram>, fast::Unsupported>,
}

impl Program {
    /// Which path the program runs on, for `loghaul validate`.
    pub fn path_note(&self) -> String {
        match &self.fast {
            Ok(_) => "fast path".to_owned(),
            Err(why) => {
                let (line, column) = line_column(&self.source, why.span.0);
                format!(
                    "VRL runtime: {} at the program's line {}, column {}",
                    why.what,
                    line + 1,
                    column + 1
                )
            }
        }
    }
}

impl PartialEq for Program {
    fn eq(&self, other: &Program) -> bool {
        self.source == other.source
    }
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Program").field(&self.source).finish()
    }
}

/// What a program must return.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Anything (a `remap` program: its effect is the event).
    Any,
    /// A boolean (a condition).
    Boolean,
}

/// Compiles `source`, the value of `key`; each of VRL's errors is reported at its place in the
/// configuration file with VRL's rendering of it as the hint.
pub fn compile(
    source: &str,
    expect: Expect,
    cx: &mut Validator<'_, '_>,
    key: &[&str],
) -> Option<Program> {
    compile_placed(source, expect, cx, key, true)
}

/// As [`compile`], for a program read from a file the key names: errors are reported at the
/// key, with the program's line and column in the message.
pub fn compile_elsewhere(
    source: &str,
    expect: Expect,
    cx: &mut Validator<'_, '_>,
    key: &[&str],
) -> Option<Program> {
    compile_placed(source, expect, cx, key, false)
}

fn compile_placed(
    source: &str,
    expect: Expect,
    cx: &mut Validator<'_, '_>,
    key: &[&str],
    inline: bool,
) -> Option<Program> {
    match vrl::compiler::compile(source, &FUNCTIONS) {
        Ok(result) => {
            for warning in result.warnings.iter() {
                cx.warn(key, headline(warning), Some(render(source, warning)));
            }
            if expect == Expect::Boolean && !result.program.info().target_assignments.is_empty() {
                cx.error(
                    key,
                    "a condition cannot change the event",
                    Some("use a `remap` transform before it to change events".to_owned()),
                );
                return None;
            }
            if expect == Expect::Boolean {
                let kind = result.program.final_type_info().result.kind().clone();
                if !kind.is_boolean() {
                    cx.error(
                        key,
                        format!("a condition must return a boolean; this one returns {kind}"),
                        Some("e.g. `.severity == \"err\"` or `exists(.user)`".to_owned()),
                    );
                    return None;
                }
            }
            Some(Program {
                source: source.into(),
                program: Arc::new(result.program),
                fast: fast::lower(source).map(Arc::new),
            })
        }
        Err(diagnostics) => {
            for d in diagnostics.iter() {
                let at = d
                    .labels
                    .iter()
                    .find(|l| l.primary)
                    .or(d.labels.first())
                    .map_or((0, 0), |l: &Label| line_column(source, l.span.start()));
                if inline {
                    cx.error_in_value(key, at, headline(d), Some(render(source, d)));
                } else {
                    let message = format!(
                        "{} (the program's line {}, column {})",
                        headline(d),
                        at.0 + 1,
                        at.1 + 1
                    );
                    cx.error(key, message, Some(render(source, d)));
                }
            }
            None
        }
    }
}

/// `error[E103]: unhandled fallible assignment: this expression is fallible`.
fn headline(d: &Diagnostic) -> String {
    let kind = if d.is_warning() { "warning" } else { "error" };
    match d.labels.iter().find(|l| l.primary) {
        Some(label) if !label.message.is_empty() => {
            format!("VRL {kind}[E{}]: {}: {}", d.code, d.message, label.message)
        }
        _ => format!("VRL {kind}[E{}]: {}", d.code, d.message),
    }
}

/// VRL's own rendering of one diagnostic (the program's lines, the labels, the notes).
fn render(source: &str, d: &Diagnostic) -> String {
    let text = Formatter::new(source, DiagnosticList::from(vec![d.clone()])).to_string();
    text.trim_matches('\n').to_owned()
}

/// 0-based line and character column of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count();
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
    (line, column)
}

/// What running a program on one event gave.
pub enum Outcome {
    /// It ran to its end: the event(s) it left, and what it returned.
    Done { event: Vrl, result: Vrl },
    /// `abort` ran.
    Aborted(String),
    /// An expression failed.
    Failed(String),
}

/// Runs programs on events; one per task (it holds the program's local variables).
pub struct Runner {
    runtime: Runtime,
    timezone: TimeZone,
    /// The fast path's state.
    pub machine: fast::Machine,
    /// What conditions on the fast path append (cleared per event).
    scratch: Vec<u8>,
    /// Events (or conditions) finished on the fast path, and run on the VRL runtime instead
    /// by a program on the fast path (a bail).
    pub fast_runs: u64,
    pub bails: u64,
}

impl Runner {
    pub fn new(timezone: TimeZone) -> Runner {
        let mut machine = fast::Machine::default();
        machine.timezone = timezone;
        Runner {
            runtime: Runtime::default(),
            timezone,
            machine,
            scratch: Vec::new(),
            fast_runs: 0,
            bails: 0,
        }
    }

    /// Whether a condition holds for `event`: on the fast path when it can, else on the VRL
    /// runtime with `target` (made once per event, on first need, and shared by the event's
    /// conditions).
    pub fn condition(
        &mut self,
        program: &Program,
        batch: &EventBatch,
        event: &Event,
        target: &mut Option<TargetValue>,
    ) -> Result<bool, String> {
        if let Ok(fp) = &program.fast {
            self.scratch.clear();
            let mut cx = fast::Cx {
                program: fp,
                batch,
                event,
                arena: fast::Arena {
                    input: &batch.arena,
                    extra: &mut self.scratch,
                },
            };
            if let Ok(b) = self.machine.test(&mut cx) {
                self.fast_runs += 1;
                return Ok(b);
            }
            self.bails += 1;
        }
        let target = target.get_or_insert_with(|| self::target(batch, event));
        self.test(program, target)
    }

    /// Runs `program` on `event` of `batch`.
    pub fn run(&mut self, program: &Program, batch: &EventBatch, event: &Event) -> Outcome {
        let mut target = target(batch, event);
        let result = self
            .runtime
            .resolve(&mut target, &program.program, &self.timezone);
        // Local variables do not outlive one event.
        self.runtime.clear();
        match result {
            Ok(result) => Outcome::Done {
                event: target.value,
                result,
            },
            Err(Terminate::Abort(e)) => Outcome::Aborted(e.to_string()),
            Err(Terminate::Error(e)) => Outcome::Failed(e.to_string()),
            Err(Terminate::Interrupted) => Outcome::Failed("execution interrupted".to_owned()),
        }
    }

    /// Whether a condition holds for the event in `target` (see [`target`]): true only when
    /// it returns `true`; a failing condition is false, its error returned for counting.
    /// Conditions cannot assign (validation refuses it), so one target serves every condition
    /// tested on an event.
    pub fn test(&mut self, program: &Program, target: &mut TargetValue) -> Result<bool, String> {
        let result = self
            .runtime
            .resolve(target, &program.program, &self.timezone);
        self.runtime.clear();
        match result {
            Ok(result) => Ok(matches!(result, Vrl::Boolean(true))),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Why a unit test's condition did not hold on an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// What failed: the assertion's message (`assertion failed: 404 == 200`), or the error.
    pub message: String,
    /// The byte range, in the program, of the expression that failed (the assertion), when
    /// VRL says it.
    pub span: Option<(usize, usize)>,
}

impl Runner {
    /// Runs a unit test's condition on `target` (see [`target`]): `Ok(true)` when it holds;
    /// `Ok(false)` when it returns anything but `true`; the failure, with the place of the
    /// failing assertion, when it ends with an error (a failed `assert!`/`assert_eq!`).
    ///
    /// # Errors
    ///
    /// The condition failed with an error (an assertion that did not hold).
    pub fn check(&mut self, program: &Program, target: &mut TargetValue) -> Result<bool, Failed> {
        let result = self
            .runtime
            .resolve(target, &program.program, &self.timezone);
        self.runtime.clear();
        let error = match result {
            Ok(result) => return Ok(matches!(result, Vrl::Boolean(true))),
            Err(Terminate::Abort(e) | Terminate::Error(e)) => e,
            Err(Terminate::Interrupted) => {
                return Err(Failed {
                    message: "execution interrupted".to_owned(),
                    span: None,
                });
            }
        };
        Err(match &error {
            // A function's error: its own message is the primary label's, at the call.
            ExpressionError::Error { labels, .. } => {
                match labels.iter().find(|l| l.primary).or(labels.first()) {
                    Some(label) => Failed {
                        message: if label.message.is_empty() {
                            error.to_string()
                        } else {
                            label.message.clone()
                        },
                        span: Some((label.span.start(), label.span.end())),
                    },
                    None => Failed {
                        message: error.to_string(),
                        span: None,
                    },
                }
            }
            ExpressionError::Abort { span, .. } => Failed {
                message: error.to_string(),
                span: Some((span.start(), span.end())),
            },
            _ => Failed {
                message: error.to_string(),
                span: None,
            },
        })
    }
}

/// Compiles a condition given outside a configuration (`loghaul tap --condition`): a
/// read-only VRL program that returns a boolean.
///
/// # Errors
///
/// VRL's diagnostics, rendered, or why the program is no condition.
pub fn compile_condition(source: &str) -> Result<Program, String> {
    let result = vrl::compiler::compile(source, &FUNCTIONS).map_err(|diagnostics| {
        diagnostics
            .iter()
            .map(|d| render(source, d))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    if !result.program.info().target_assignments.is_empty() {
        return Err("a condition cannot change the event".to_owned());
    }
    let kind = result.program.final_type_info().result.kind().clone();
    if !kind.is_boolean() {
        return Err(format!(
            "a condition must return a boolean; this one returns {kind}"
        ));
    }
    Ok(Program {
        source: source.into(),
        program: Arc::new(result.program),
        fast: fast::lower(source).map(Arc::new),
    })
}

/// Compiles a read-only expression for display (a failed `assert_eq!`'s sides); `None` when it
/// does not compile on its own (it names a variable of the program).
pub fn compile_expression(source: &str) -> Option<Program> {
    let result = vrl::compiler::compile(source, &FUNCTIONS).ok()?;
    Some(Program {
        source: source.into(),
        program: Arc::new(result.program),
        fast: Err(fast::Unsupported {
            span: (0, 0),
            what: "shown, not run on events".to_owned(),
        }),
    })
}

/// Runs a read-only expression on `target`; `None` when it fails.
pub fn evaluate(program: &Program, target: &mut TargetValue) -> Option<Vrl> {
    let mut runtime = Runtime::default();
    runtime
        .resolve(target, &program.program, &TimeZone::Local)
        .ok()
}

/// What a program runs on for `event`: its value and its metadata.
pub fn target(batch: &EventBatch, event: &Event) -> TargetValue {
    TargetValue {
        value: convert::to_vrl(batch, event),
        metadata: convert::metadata(batch, event),
        secrets: Secrets::default(),
    }
}

/// The time zone VRL functions use when a program names none: `local` (the default) or an
/// IANA name.
///
/// # Errors
///
/// The name is no time zone.
pub fn timezone(name: Option<&str>) -> Result<TimeZone, String> {
    match name {
        None | Some("local") => Ok(TimeZone::Local),
        Some(name) => TimeZone::parse(name).ok_or_else(|| format!("unknown time zone `{name}`")),
    }
}

#[cfg(test)]
mod docs_tests;

#[cfg(test)]
mod differential_tests;

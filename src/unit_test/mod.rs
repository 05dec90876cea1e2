//! `loghaul test`: unit tests of a configuration, in Vector's shape. A test inserts events at
//! sources or transforms, runs the configuration's transforms on them, and checks what comes
//! out of the components it names (VRL assertions) or that nothing does.
//!
//! ```text
//!  test input ─► log_fields ─► Builder (the VRL → event mapping of remap) ─┐
//!             └► raw value ─► the source's own framing and decoder ────────┤
//!                                                                            ▼
//!   insertion fan-out ─► transform tasks (built by topology::build_transform, wired by
//!                        topology::readers, as `loghaul run` builds them) ─► fan-outs
//!                                                   └─► capture queues of `extract_from` /
//!                                                       `no_outputs_from` ─► conditions
//! ```
//!
//! Each test runs on a fresh graph of the real transform tasks with in-memory queues, on a
//! current-thread runtime: no source binds a socket and no sink runs. The driver sends every
//! input in order, then closes the insertion points; each transform ends once its inputs have
//! ended, as at a stop, so when the last one has ended every event has come out where it will.
//! That makes a run deterministic with no timing involved. An output check passes when some
//! event that came out satisfies all its conditions (Vector's rule).

mod report;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use loghaul_config::{
    ComponentKind, ComponentSet as _, ConfigErrors, Diagnostic, FieldValue, TestEvent, TestInput,
    UnitTest,
};
use loghaul_core::{BatchStatus, Event, EventBatch, Timestamp};
use vrl::value::{KeyString, ObjectMap, Value as Vrl};

use crate::config::Config;
use crate::metrics::Registry;
use crate::pipeline::{Fanout, InputSender, QUEUE_BATCHES, input_queue};
use crate::sources::SourceConfig;
use crate::transforms::vrl::convert::Builder;
use crate::transforms::vrl::{Failed, Program, Runner, target};

/// `loghaul test`'s exit code when every test passed.
pub const EXIT_PASSED: u8 = 0;
/// ... when a test failed.
pub const EXIT_FAILED: u8 = 1;
/// ... when the configuration or a tests file is invalid (or holds no test): nothing ran.
pub const EXIT_INVALID: u8 = 2;

/// The source id and type of events inserted at a transform by their fields (their
/// `source_type` field, when it names a source type, sets the type).
pub const TEST_SOURCE: &str = "unit_test";

/// A compiled test of this server's configuration.
pub type Test = UnitTest<Program>;

/// Runs `loghaul test -c CONFIG [FILES...]`: prints `test NAME ... passed|failed` for each
/// test (with what failed, under it) and a summary, and returns the exit code.
pub fn command(config: &Path, files: &[PathBuf]) -> ExitCode {
    let (config, tests) = match load(config, files) {
        Ok(loaded) => loaded,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    if tests.is_empty() {
        eprintln!(
            "error: no tests: add a `tests:` list to the configuration, or give files that hold one"
        );
        return ExitCode::from(EXIT_INVALID);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start a runtime for the tests: {error}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    println!("running {} test{}", tests.len(), plural(tests.len()));
    let mut failed = 0;
    for test in &tests {
        let failures = runtime.block_on(run(&config, test));
        if failures.is_empty() {
            println!("test {} ... passed", test.name);
        } else {
            failed += 1;
            println!("test {} ... failed", test.name);
            for failure in &failures {
                print!("{failure}");
            }
        }
    }
    let passed = tests.len() - failed;
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("\ntest result: {verdict}. {passed} passed; {failed} failed");
    ExitCode::from(if failed == 0 {
        EXIT_PASSED
    } else {
        EXIT_FAILED
    })
}

/// Loads the configuration and the tests it and `files` hold, checked: names unique across
/// files, raw inputs inserted at sources that decode them.
///
/// # Errors
///
/// Every problem found, located in the file that holds it.
pub fn load(config: &Path, files: &[PathBuf]) -> Result<(Config, Vec<Test>), ConfigErrors> {
    let config = Config::load(config)?;
    let mut tests = config.tests.clone();
    let mut errors = Vec::new();
    for file in files {
        match config.load_tests(file) {
            Ok(more) => tests.extend(more),
            Err(e) => errors.extend(e.0),
        }
    }
    errors.extend(check(&config, &tests));
    if errors.is_empty() {
        Ok((config, tests))
    } else {
        Err(ConfigErrors(errors))
    }
}

/// What the loader cannot see: test names repeated across files, and raw inputs at sources
/// whose type has no decoder for tests.
pub fn check(config: &Config, tests: &[Test]) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let mut names: HashMap<&str, &Test> = HashMap::new();
    for test in tests {
        if let Some(first) = names.insert(&test.name, test)
            && first.origin != test.origin
        {
            let at = first.pos.map_or(String::new(), |p| format!(":{}", p.line));
            errors.push(
                Diagnostic::error(
                    &test.origin,
                    test.pos,
                    format!("a test named `{}` is already defined", test.name),
                )
                .with_hint(Some(format!(
                    "in {}{at}; give each test its own name",
                    first.origin
                ))),
            );
        }
        for input in &test.inputs {
            let TestEvent::Raw(value) = &input.event else {
                continue;
            };
            let Some(source) = config.source(&input.insert_at) else {
                continue;
            };
            let id: Arc<str> = source.id.as_str().into();
            if source
                .config
                .component()
                .decode_raw(id, value.as_bytes())
                .is_none()
            {
                errors.push(
                    Diagnostic::error(
                        &test.origin,
                        input.pos,
                        format!(
                            "source `{}` (type `{}`) takes no raw input in tests",
                            source.id,
                            source.config.type_name()
                        ),
                    )
                    .with_hint(Some(
                        "raw input is read by syslog sources; insert this event as `log_fields`",
                    )),
                );
            }
        }
    }
    errors
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Runs one test: what failed, each rendered for the terminal; empty when it passed.
pub async fn run(config: &Config, test: &Test) -> Vec<String> {
    let captured = match drive(config, test).await {
        Ok(captured) => captured,
        Err(error) => return vec![report::cannot_run(&error)],
    };
    let mut failures = Vec::new();
    let mut runner = Runner::new(vrl::compiler::TimeZone::Local);
    let events_of = |id: &str| -> Vec<(&EventBatch, &Event)> {
        captured
            .get(id)
            .into_iter()
            .flatten()
            .flat_map(|b| b.events.iter().map(move |e| (&**b, e)))
            .collect()
    };
    for output in &test.outputs {
        let events = events_of(&output.extract_from);
        if events.is_empty() {
            failures.push(report::no_events(&output.extract_from));
            continue;
        }
        let mut misses = Vec::new();
        for (batch, event) in &events {
            match first_miss(&mut runner, &output.conditions, batch, event) {
                None => {
                    misses.clear();
                    break;
                }
                Some(miss) => misses.push(miss),
            }
        }
        if !misses.is_empty() {
            failures.push(report::conditions_failed(
                &output.extract_from,
                &events,
                &misses,
            ));
        }
    }
    for id in &test.no_outputs_from {
        let events = events_of(id);
        if !events.is_empty() {
            failures.push(report::unexpected_events(id, &events));
        }
    }
    failures
}

/// A condition that did not hold on one event.
pub struct Miss<'p> {
    /// Which condition of the output (0-based), and its program.
    pub index: usize,
    pub condition: &'p Program,
    /// Why: the failed assertion, or `None` when the condition returned something else than
    /// `true`.
    pub failed: Option<Failed>,
    /// For a failed `assert_eq!`: each side's expression and its value on the event.
    pub sides: Option<[(String, String); 2]>,
}

/// The first condition that does not hold on `event`, if any.
fn first_miss<'p>(
    runner: &mut Runner,
    conditions: &'p [Program],
    batch: &EventBatch,
    event: &Event,
) -> Option<Miss<'p>> {
    for (index, condition) in conditions.iter().enumerate() {
        let mut t = target(batch, event);
        let failed = match runner.check(condition, &mut t) {
            Ok(true) => continue,
            Ok(false) => None,
            Err(failed) => Some(failed),
        };
        let sides = failed
            .as_ref()
            .and_then(|f| f.span)
            .and_then(|span| assert_eq_sides(condition, span, batch, event));
        return Some(Miss {
            index,
            condition,
            failed,
            sides,
        });
    }
    None
}

/// The two sides of the `assert_eq!` call at `span` of `program`, each evaluated on the event:
/// `[(".status", "404"), ("200", "200")]`. `None` when the call is not an `assert_eq`, or a
/// side cannot be evaluated on its own (it names one of the program's variables).
fn assert_eq_sides(
    program: &Program,
    (start, end): (usize, usize),
    batch: &EventBatch,
    event: &Event,
) -> Option<[(String, String); 2]> {
    use vrl::parser::ast::{Expr, RootExpr};
    let text = program.source.get(start..end)?;
    let ast = vrl::parser::parse(text).ok()?;
    let Some(RootExpr::Expr(expr)) = ast.0.first().map(|n| n.inner()) else {
        return None;
    };
    let Expr::FunctionCall(call) = expr.inner() else {
        return None;
    };
    let call = call.inner();
    if call.ident.inner().as_ref() != "assert_eq" {
        return None;
    }
    let mut positional = Vec::new();
    let (mut left, mut right) = (None, None);
    for arg in &call.arguments {
        let arg = arg.inner();
        let span = arg.expr.span();
        let source = text.get(span.start()..span.end())?.to_owned();
        match arg.ident.as_ref().map(|i| i.inner().as_ref().to_owned()) {
            Some(name) if name == "left" => left = Some(source),
            Some(name) if name == "right" => right = Some(source),
            Some(_) => {}
            None => positional.push(source),
        }
    }
    let mut positional = positional.into_iter();
    let left = left.or_else(|| positional.next())?;
    let right = right.or_else(|| positional.next())?;
    let value = |expr: &str| -> Option<String> {
        let program = crate::transforms::vrl::compile_expression(expr)?;
        let mut t = target(batch, event);
        crate::transforms::vrl::evaluate(&program, &mut t).map(|v| v.to_string())
    };
    Some([
        (left.clone(), value(&left)?),
        (right.clone(), value(&right)?),
    ])
}

/// What came out of each watched id (`ID` or `ID.NAME`), in order.
type Captured = HashMap<String, Vec<Arc<EventBatch>>>;

/// Builds the graph of transforms for `test`, sends its inputs, waits until every transform has
/// ended, and returns what came out where the test looks.
async fn drive(config: &Config, test: &Test) -> anyhow::Result<Captured> {
    let registry = Registry::default();
    let mut senders: HashMap<&str, InputSender> = HashMap::new();
    let mut built = Vec::new();
    for transform in &config.transforms {
        let metrics = registry.register(
            &transform.id,
            ComponentKind::Transform,
            transform.config.type_name(),
        );
        let (tx, rx) = input_queue(metrics.clone(), None, QUEUE_BATCHES);
        senders.insert(&transform.id, tx);
        built.push((transform, metrics, rx));
    }
    let mut downstream = crate::topology::readers(config, &senders);

    // A capture queue on each output the test looks at, read as the graph runs.
    let mut watched: Vec<&str> = test
        .outputs
        .iter()
        .map(|o| o.extract_from.as_str())
        .chain(test.no_outputs_from.iter().map(String::as_str))
        .collect();
    watched.sort_unstable();
    watched.dedup();
    let mut collectors = Vec::new();
    for id in watched {
        let metrics = registry.register(&format!("{id} (test)"), ComponentKind::Sink, "test");
        let (tx, mut rx) = input_queue(metrics, None, QUEUE_BATCHES);
        downstream.entry(id).or_default().push(tx);
        collectors.push((
            id.to_owned(),
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(delivery) = rx.recv().await {
                    got.push(delivery.batch.clone());
                    delivery.ack.commit(BatchStatus::Delivered);
                }
                got
            }),
        ));
    }

    // Where inputs go in: a source's fan-out (to whatever reads it), a transform's queue.
    let mut entries: HashMap<&str, Fanout> = HashMap::new();
    for input in &test.inputs {
        let id = input.insert_at.as_str();
        if entries.contains_key(id) {
            continue;
        }
        let fanout = match input.at_kind {
            ComponentKind::Source => {
                let ty = config
                    .source(id)
                    .map_or(TEST_SOURCE, |s| s.config.type_name());
                let metrics = registry.register(id, ComponentKind::Source, ty);
                Fanout::new(downstream.remove(id).unwrap_or_default(), metrics)
            }
            _ => {
                let metrics = registry.register(TEST_SOURCE, ComponentKind::Source, TEST_SOURCE);
                Fanout::new(senders.get(id).cloned().into_iter().collect(), metrics)
            }
        };
        entries.insert(id, fanout);
    }
    // From here only fan-outs hold senders, so each queue closes once its upstreams are done.
    drop(senders);
    let mut tasks = Vec::new();
    for (transform, metrics, input) in built {
        let task = crate::topology::build_transform(
            transform,
            metrics,
            input,
            &mut downstream,
            None,
            None,
        )?
        .0;
        tasks.push(tokio::spawn(task));
    }
    drop(downstream);

    for input in &test.inputs {
        let batch = batch_of(config, input)?;
        if let Some(fanout) = entries.get(input.insert_at.as_str()) {
            fanout.send(batch).await;
        }
    }
    drop(entries);
    for task in tasks {
        task.await?;
    }
    let mut captured = Captured::new();
    for (id, collector) in collectors {
        captured.insert(id, collector.await?);
    }
    Ok(captured)
}

/// The batch an input makes.
///
/// # Errors
///
/// A raw input at a source that takes none (refused before tests run).
fn batch_of(config: &Config, input: &TestInput) -> anyhow::Result<EventBatch> {
    let source = match input.at_kind {
        ComponentKind::Source => config.source(&input.insert_at),
        _ => None,
    };
    match &input.event {
        TestEvent::Raw(value) => {
            let source = source.ok_or_else(|| anyhow::anyhow!("raw input needs a source"))?;
            source
                .config
                .component()
                .decode_raw(source.id.as_str().into(), value.as_bytes())
                .ok_or_else(|| {
                    anyhow::anyhow!("source `{}` takes no raw input in tests", source.id)
                })
        }
        TestEvent::Log(fields) => {
            let (id, ty) = match source {
                Some(s) => (s.id.as_str(), s.config.type_name()),
                None => (
                    TEST_SOURCE,
                    named_source_type(fields).unwrap_or(TEST_SOURCE),
                ),
            };
            Ok(log_batch(fields, id.into(), ty))
        }
    }
}

/// The source type `log_fields` names in `source_type`, when it is one.
fn named_source_type(fields: &[(String, FieldValue)]) -> Option<&'static str> {
    let (_, FieldValue::Str(ty)) = fields.iter().find(|(k, _)| k == "source_type")? else {
        return None;
    };
    <SourceConfig as loghaul_config::ComponentSet>::TYPES
        .iter()
        .copied()
        .find(|t| t == ty)
}

/// One event made from its fields the way a `remap` program's result becomes an event (so a
/// field named like one of loghaul's own sets it, and the rest is the record), received now.
pub fn log_batch(
    fields: &[(String, FieldValue)],
    source: Arc<str>,
    source_type: &'static str,
) -> EventBatch {
    let mut input = EventBatch::new(Bytes::new(), source, source_type);
    input.received = Timestamp::now();
    let mut obj = ObjectMap::new();
    for (key, value) in fields {
        let value = match (key.as_str(), value) {
            // YAML has no timestamp type: RFC 3339 text sets the event's time.
            ("timestamp", FieldValue::Str(text)) => chrono::DateTime::parse_from_rfc3339(text)
                .map_or_else(
                    |_| to_vrl(value),
                    |t| Vrl::Timestamp(t.with_timezone(&chrono::Utc)),
                ),
            _ => to_vrl(value),
        };
        obj.insert(KeyString::from(key.as_str()), value);
    }
    let mut builder = Builder::new(&input);
    builder.push(&Event::default(), &Vrl::Object(obj));
    builder.finish()
}

fn to_vrl(value: &FieldValue) -> Vrl {
    match value {
        FieldValue::Null => Vrl::Null,
        FieldValue::Bool(b) => Vrl::Boolean(*b),
        FieldValue::Int(i) => Vrl::Integer(*i),
        FieldValue::Float(f) if f.is_nan() => Vrl::Null,
        FieldValue::Float(f) => Vrl::from_f64_or_zero(*f),
        FieldValue::Str(s) => Vrl::from(s.as_str()),
        FieldValue::List(items) => Vrl::Array(items.iter().map(to_vrl).collect()),
        FieldValue::Map(entries) => Vrl::Object(
            entries
                .iter()
                .map(|(k, v)| (KeyString::from(k.as_str()), to_vrl(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests;

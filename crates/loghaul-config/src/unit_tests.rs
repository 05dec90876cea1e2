//! Unit tests of a configuration (`loghaul test`): the `tests:` list, in the configuration
//! itself or in side files that hold nothing else, read into [`UnitTest`]s and checked against
//! the configuration's components, every problem at its place in the file that holds it.
//!
//! ```text
//! tests:
//!   - name: parses the status                   UnitTest { name, origin, pos,
//!     inputs:                                      inputs: [TestInput { insert_at, event,
//!       - insert_at: parse                           pos }],
//!         type: log                                outputs: [TestOutput { extract_from,
//!         log_fields: { message: "status=200" }      conditions: [R::Condition] }],
//!     outputs:                                     no_outputs_from: [..] }
//!       - extract_from: parse
//!         conditions:
//!           - type: vrl
//!             source: assert_eq!(.status, 200)   compiled by the registry (R::condition)
//! ```
//!
//! The loader knows no component type and no condition language: what a condition compiles to
//! is the [`Registry`]'s, and running the tests is the server's. What is checked here: the
//! schema (unknown keys, types), the names (present, unique in their file), that every input
//! is inserted at a source or a transform (raw input at a source: its decoder reads it), that
//! `extract_from` and `no_outputs_from` name a source, a transform or a named output
//! (`ID.NAME`) that exists, and that a test checks something.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::component::{ComponentKind, Registry};
use crate::diagnostic::{Pos, did_you_mean};
use crate::node::{Entry, Node};
use crate::validate::{Ctx, Resolved, Validator, resolve_input};

/// The top-level key that holds the tests.
pub const TESTS_KEY: &str = "tests";

/// One test, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTest {
    /// The test's name, printed with its result.
    pub name: String,
    /// The events to insert, in order.
    #[serde(default)]
    pub inputs: Vec<RawTestInput>,
    /// Where events must come out, and what must hold for them.
    #[serde(default)]
    pub outputs: Vec<RawTestOutput>,
    /// Components (or named outputs) out of which no event may come.
    #[serde(default)]
    pub no_outputs_from: Vec<String>,
}

/// One input of a test, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTestInput {
    /// The source or transform that receives the event.
    pub insert_at: String,
    /// `log` (an event given by its fields) or `raw` (bytes a source decodes); by default
    /// whichever of `log_fields` and `value` is given.
    #[serde(default, rename = "type")]
    pub kind: Option<InputType>,
    /// `type: log`: the event, as its JSON line shows it.
    #[serde(default)]
    pub log_fields: Option<FieldValue>,
    /// `type: raw`: what the source reads (a line, a datagram).
    #[serde(default)]
    pub value: Option<String>,
}

/// What a test input gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputType {
    Log,
    Raw,
}

/// One output check of a test, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTestOutput {
    /// The source, transform or named output (`ID.NAME`) whose events are checked.
    pub extract_from: String,
    /// What must hold for an event that came out; none: that some event came out.
    #[serde(default)]
    pub conditions: Vec<RawCondition>,
}

/// One condition, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCondition {
    /// The condition's language: `vrl` (the default).
    #[serde(default, rename = "type")]
    pub kind: Option<ConditionType>,
    /// The program: assertions (`assert_eq!(.status, 200)`) or a boolean expression.
    pub source: String,
}

/// A condition's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionType {
    Vrl,
}

/// A value of `log_fields`, in the file's order and with the file's types (YAML's core
/// schema: `200` is an integer, `"200"` a string).
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<FieldValue>),
    Map(Vec<(String, FieldValue)>),
}

impl<'de> Deserialize<'de> for FieldValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FieldValue, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FieldValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<FieldValue, E> {
                Ok(FieldValue::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<FieldValue, E> {
                Ok(FieldValue::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<FieldValue, D::Error> {
                FieldValue::deserialize(d)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<FieldValue, E> {
                Ok(FieldValue::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FieldValue, E> {
                Ok(FieldValue::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FieldValue, E> {
                Ok(i64::try_from(v).map_or(FieldValue::Float(v as f64), FieldValue::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<FieldValue, E> {
                Ok(FieldValue::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FieldValue, E> {
                Ok(FieldValue::Str(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FieldValue, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<FieldValue>()? {
                    items.push(item);
                }
                Ok(FieldValue::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FieldValue, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, FieldValue>()? {
                    entries.push((k, v));
                }
                Ok(FieldValue::Map(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// A validated test; `C` is the registry's compiled condition.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitTest<C> {
    pub name: String,
    /// The file it is written in.
    pub origin: String,
    /// Where it starts in that file.
    pub pos: Option<Pos>,
    pub inputs: Vec<TestInput>,
    pub outputs: Vec<TestOutput<C>>,
    /// Ids (`ID` or `ID.NAME`) out of which no event may come.
    pub no_outputs_from: Vec<String>,
}

/// One event to insert.
#[derive(Clone, Debug, PartialEq)]
pub struct TestInput {
    /// The source or transform that receives it.
    pub insert_at: String,
    /// Whether `insert_at` is a source or a transform.
    pub at_kind: ComponentKind,
    pub event: TestEvent,
    /// Where the input is written (its `insert_at` value), for errors found when it runs.
    pub pos: Option<Pos>,
}

/// What an input gives.
#[derive(Clone, Debug, PartialEq)]
pub enum TestEvent {
    /// An event by its fields (`log_fields`), in the file's order.
    Log(Vec<(String, FieldValue)>),
    /// Bytes for a source's decoder.
    Raw(String),
}

/// One output check.
#[derive(Clone, Debug, PartialEq)]
pub struct TestOutput<C> {
    /// `ID` (a source's or transform's default output) or `ID.NAME` (a named output).
    pub extract_from: String,
    pub conditions: Vec<C>,
}

/// What the tests may name: every component's kind and named outputs (`None`: its config did
/// not load, so any output name is taken, to report nothing spurious).
pub(crate) struct Graph<'a> {
    pub kind_of: &'a HashMap<&'a str, ComponentKind>,
    pub outputs_of: &'a HashMap<&'a str, Option<&'a [String]>>,
}

/// Reads and checks the `tests` entry of the document in `cx`.
pub(crate) fn read_tests<R: Registry>(
    entry: &Entry,
    cx: &mut Ctx<'_>,
    graph: &Graph<'_>,
) -> Vec<UnitTest<R::Condition>> {
    let mut out = Vec::new();
    if entry.value.is_null() {
        return out;
    }
    let crate::node::Kind::Seq(items) = &entry.value.kind else {
        cx.error(
            entry.value.pos.or(entry.key_pos),
            "`tests` must be a list of tests",
            Some(
                "e.g. tests: [{ name: my test, inputs: [...], outputs: [...] }]; \
                 each test starts with `- name:`"
                    .to_owned(),
            ),
        );
        return out;
    };
    let mut names: HashSet<String> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let raw = match crate::load::collect_all(item, item.pos, None, &[], |de| {
            RawTest::deserialize(de)
        }) {
            Ok(raw) => raw,
            Err(errors) => {
                for e in errors {
                    cx.errors += 1;
                    cx.diags.push(crate::load::de_diag(cx.origin, e));
                }
                continue;
            }
        };
        if let Some(test) = check_test::<R>(raw, i, item, cx, graph, &mut names) {
            out.push(test);
        }
    }
    out
}

/// One test's checks; `None` after reporting an error.
fn check_test<R: Registry>(
    raw: RawTest,
    i: usize,
    item: &Node,
    cx: &mut Ctx<'_>,
    graph: &Graph<'_>,
    names: &mut HashSet<String>,
) -> Option<UnitTest<R::Condition>> {
    let idx = i.to_string();
    let at = |cx: &Ctx<'_>, key: &[&str]| {
        let mut path = vec![TESTS_KEY, idx.as_str()];
        path.extend_from_slice(key);
        cx.val_pos(&path)
    };
    let errors_before = cx.errors;
    let name = raw.name.trim();
    if name.is_empty() {
        cx.error(at(cx, &["name"]), "a test's `name` is empty", None);
    } else if !names.insert(name.to_owned()) {
        cx.error(
            at(cx, &["name"]),
            format!("a test named `{name}` is already defined"),
            Some("give each test its own name".to_owned()),
        );
    }
    if raw.outputs.is_empty() && raw.no_outputs_from.is_empty() {
        cx.error(
            item.pos,
            format!("test `{name}` checks nothing"),
            Some("add `outputs` (with `extract_from`) or `no_outputs_from`".to_owned()),
        );
    }
    if raw.inputs.is_empty() {
        let pos = at(cx, &["inputs"]).or(item.pos);
        cx.error(
            pos,
            format!("test `{name}` has no inputs"),
            Some("e.g. inputs: [{ insert_at: my_transform, log_fields: { message: hi } }]".into()),
        );
    }
    let mut inputs = Vec::new();
    for (j, input) in raw.inputs.into_iter().enumerate() {
        let j = j.to_string();
        let key = |k: &'static str| ["inputs", j.as_str(), k];
        let insert_pos = at(cx, &key("insert_at"));
        let at_kind = match graph.kind_of.get(input.insert_at.as_str()) {
            Some(ComponentKind::Sink) => {
                cx.error(
                    insert_pos,
                    format!(
                        "`{}` is a sink; tests insert events at sources and transforms",
                        input.insert_at
                    ),
                    Some("sinks are not run by tests: insert at a transform".to_owned()),
                );
                None
            }
            Some(kind) => Some(*kind),
            None => {
                let hint = insertable_hint(&input.insert_at, graph);
                cx.error(
                    insert_pos,
                    format!(
                        "unknown component `{}`: no source or transform has this id",
                        input.insert_at
                    ),
                    Some(hint),
                );
                None
            }
        };
        let kind = match (input.kind, &input.log_fields, &input.value) {
            (Some(k), _, _) => Some(k),
            (None, Some(_), None) => Some(InputType::Log),
            (None, None, Some(_)) => Some(InputType::Raw),
            (None, Some(_), Some(_)) => {
                cx.error(
                    at(cx, &key("value")),
                    "an input gives `log_fields` or `value`, not both",
                    Some(
                        "`log_fields` makes a `type: log` input, `value` a `type: raw` one".into(),
                    ),
                );
                None
            }
            (None, None, None) => {
                cx.error(
                    insert_pos,
                    "an input needs `log_fields` (type: log) or `value` (type: raw)",
                    Some("e.g. { insert_at: parse, log_fields: { message: hi } }".to_owned()),
                );
                None
            }
        };
        let event = match (kind, input.log_fields, input.value) {
            (Some(InputType::Log), Some(FieldValue::Map(fields)), None) => {
                Some(TestEvent::Log(fields))
            }
            (Some(InputType::Log), Some(_), None) => {
                cx.error(
                    at(cx, &key("log_fields")),
                    "`log_fields` must be a map of field names to values",
                    Some("e.g. log_fields: { message: hi, status: 200 }".to_owned()),
                );
                None
            }
            (Some(InputType::Log), None, _) => {
                cx.error(
                    at(cx, &key("type")).or(insert_pos),
                    "a `type: log` input needs `log_fields`",
                    Some("give the event's fields, e.g. log_fields: { message: hi }".into()),
                );
                None
            }
            (Some(InputType::Raw), None, Some(value)) => {
                if at_kind == Some(ComponentKind::Transform) {
                    cx.error(
                        insert_pos,
                        format!(
                            "`{}` is a transform; raw input is read by a source's decoder",
                            input.insert_at
                        ),
                        Some(
                            "insert raw input at a source, or give the event as `log_fields`"
                                .to_owned(),
                        ),
                    );
                    None
                } else {
                    Some(TestEvent::Raw(value))
                }
            }
            (Some(InputType::Raw), _, None) => {
                cx.error(
                    at(cx, &key("type")).or(insert_pos),
                    "a `type: raw` input needs `value`",
                    Some("e.g. value: \"<13>Oct 11 22:14:15 host app: hi\"".to_owned()),
                );
                None
            }
            (Some(kind), Some(_), Some(_)) => {
                let (extra, fit) = match kind {
                    InputType::Log => ("value", "log_fields"),
                    InputType::Raw => ("log_fields", "value"),
                };
                cx.error(
                    at(cx, &key(extra)),
                    format!(
                        "`{extra}` does not go with `type: {}`",
                        if kind == InputType::Log { "log" } else { "raw" }
                    ),
                    Some(format!("this input's event is its `{fit}`")),
                );
                None
            }
            (None, _, _) => None,
        };
        if let (Some(at_kind), Some(event)) = (at_kind, event) {
            inputs.push(TestInput {
                insert_at: input.insert_at,
                at_kind,
                event,
                pos: insert_pos,
            });
        }
    }
    let mut outputs = Vec::new();
    for (j, output) in raw.outputs.into_iter().enumerate() {
        let j = j.to_string();
        let pos = at(cx, &["outputs", &j, "extract_from"]);
        check_readable(cx, graph, &output.extract_from, pos, "extract_from");
        let mut conditions = Vec::new();
        for (k, condition) in output.conditions.iter().enumerate() {
            let k = k.to_string();
            let key = ["outputs", j.as_str(), "conditions", k.as_str(), "source"];
            let mut v = Validator {
                cx,
                section: TESTS_KEY,
                id: &idx,
            };
            // Every language there is is VRL for now: `type` only has to be valid.
            let ConditionType::Vrl = condition.kind.unwrap_or(ConditionType::Vrl);
            if let Some(c) = R::condition(&condition.source, &mut v, &key) {
                conditions.push(c);
            }
        }
        outputs.push(TestOutput {
            extract_from: output.extract_from,
            conditions,
        });
    }
    for (j, id) in raw.no_outputs_from.iter().enumerate() {
        let j = j.to_string();
        let pos = at(cx, &["no_outputs_from", &j]);
        check_readable(cx, graph, id, pos, "no_outputs_from");
    }
    if cx.errors > errors_before {
        return None;
    }
    Some(UnitTest {
        name: name.to_owned(),
        origin: cx.origin.to_owned(),
        pos: item.pos,
        inputs,
        outputs,
        no_outputs_from: raw.no_outputs_from,
    })
}

/// The hint for an `insert_at` that names nothing: the closest source or transform.
fn insertable_hint(id: &str, graph: &Graph<'_>) -> String {
    let mut ids: Vec<&str> = graph
        .kind_of
        .iter()
        .filter(|(_, k)| **k != ComponentKind::Sink)
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    did_you_mean(id, &ids, "sources and transforms")
}

/// Checks that `id` names something whose events a test can see: a source, a transform or a
/// named output of one.
fn check_readable(cx: &mut Ctx<'_>, graph: &Graph<'_>, id: &str, pos: Option<Pos>, key: &str) {
    let (_, found) = resolve_input(id, graph.kind_of, graph.outputs_of);
    match found {
        Resolved::Component(ComponentKind::Sink) => cx.error(
            pos,
            format!("`{id}` is a sink; `{key}` names a source, a transform or `ID.NAME`"),
            Some("sinks are not run by tests: name the transform that feeds it".to_owned()),
        ),
        Resolved::Component(_) | Resolved::Output => {}
        Resolved::NoSuchOutput { owner, outputs } => {
            crate::validate::no_such_output(cx, pos, id, owner, &outputs, "name");
        }
        Resolved::Unknown => {
            let hint = insertable_hint(id, graph);
            cx.error(
                pos,
                format!("unknown component `{id}`: no source or transform has this id"),
                Some(hint),
            );
        }
    }
}

//! The loading pipeline: text → interpolated text → [`Node`] → raw types → validated [`Config`].
//!
//! ```text
//! read file ─► interpolate ${VAR} ─► parse (yaml.rs | toml_doc.rs | json.rs) ─► Node tree
//!          ─► raw types, one section and one component at a time ─► validate ─► Config
//! ```
//!
//! Each stage collects every problem it can find. A stage whose failure leaves nothing for the next
//! (unreadable file, bad interpolation, syntax error) stops the pipeline; otherwise a component
//! that fails to deserialize is left out but its id is still known, so the components that name it
//! as an input do not get spurious "unknown input" errors.

use std::collections::HashMap;
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::component::{Component, ComponentKind, ComponentLoader, ComponentSet, Registry};
use crate::diagnostic::{ConfigErrors, Diagnostic, Pos, did_you_mean};
use crate::node::{DeError, Entry, Extra, Kind, Node, NodeDe};
use crate::raw::{RawApi, RawDuration, RawLimits, RawTop};
use crate::runtime::Config;
use crate::unit_tests::{Graph, TESTS_KEY, UnitTest, read_tests};
use crate::validate::{Ctx, Declared, Validator};

/// The syntax a configuration is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigFormat {
    /// YAML 1.2, the primary format.
    Yaml,
    /// TOML (files ending in `.toml`).
    Toml,
    /// JSON (files ending in `.json`).
    Json,
}

impl ConfigFormat {
    /// The format for a file, by extension: `.toml`, `.json`, anything else YAML.
    pub fn from_path(path: &Path) -> ConfigFormat {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("toml") => ConfigFormat::Toml,
            Some("json") => ConfigFormat::Json,
            _ => ConfigFormat::Yaml,
        }
    }
}

/// Top-level keys.
pub const TOP_LEVEL_KEYS: [&str; 8] = [
    "api",
    "data_dir",
    "limits",
    "shutdown_timeout",
    "sources",
    "transforms",
    "sinks",
    "tests",
];

/// What reading the sections produced: the top-level values and every component that loaded.
pub(crate) struct Loaded<R: Registry> {
    pub api: Option<RawApi>,
    pub shutdown_timeout: Option<RawDuration>,
    pub data_dir: Option<String>,
    pub limits: Option<RawLimits>,
    pub sources: Vec<Component<R::Source>>,
    pub transforms: Vec<Component<R::Transform>>,
    pub sinks: Vec<Component<R::Sink>>,
}

/// Reads a file and loads it.
pub(crate) fn load_path<R: Registry>(
    path: &Path,
    env: crate::Environment<'_>,
) -> Result<Config<R>, ConfigErrors> {
    let origin = path.display().to_string();
    let text = read_text(path, &origin)?;
    load_str(&text, ConfigFormat::from_path(path), &origin, env)
}

/// Lines of the files of a merged configuration are numbered apart: file `k`'s line `l` is
/// `k * FILE_STRIDE + l` while the merged tree is validated, and mapped back for its messages.
const FILE_STRIDE: usize = 1 << 24;

/// Top-level keys whose maps several files add to (a component id in two files is an error);
/// `tests` lists are joined; any other key may be set in one file only.
const MERGED_MAPS: [&str; 3] = ["sources", "transforms", "sinks"];

/// Loads several files as one configuration (`-c a.yaml -c b.yaml`, `--config-dir`): their
/// components together, each global setting from the one file that sets it. Every message
/// names the file and line it is about.
pub(crate) fn load_paths<R: Registry>(
    paths: &[std::path::PathBuf],
    env: crate::Environment<'_>,
) -> Result<Config<R>, ConfigErrors> {
    if let [one] = paths {
        return load_path(one, env);
    }
    let origins: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let mut errors = Vec::new();
    let mut roots = Vec::new();
    for (k, path) in paths.iter().enumerate() {
        let origin = &origins[k];
        let loaded = read_text(path, origin).and_then(|text| {
            let format = ConfigFormat::from_path(path);
            let text = interpolated(&text, format, origin, &env)?;
            parse_node(&text, format, origin)
        });
        match loaded {
            Ok(mut root) => {
                shift(&mut root, k * FILE_STRIDE);
                roots.push(root);
            }
            Err(e) => errors.extend(e.0),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let at = |pos: Option<Pos>| -> String {
        match pos {
            Some(p) => format!("{}:{}", origins[p.line / FILE_STRIDE], p.line % FILE_STRIDE),
            None => "another file".to_owned(),
        }
    };
    let mut merged: Vec<Entry> = Vec::new();
    let mut diags = Vec::new();
    for (k, root) in roots.into_iter().enumerate() {
        let Kind::Map(entries) = root.kind else {
            diags.push(Diagnostic::error(
                &origins[k],
                root.pos,
                "a configuration file must be a map of keys (sources, sinks, ...)",
            ));
            continue;
        };
        for entry in entries {
            let Some(existing) = merged.iter_mut().find(|e| e.key == entry.key) else {
                merged.push(entry);
                continue;
            };
            match (&mut existing.value.kind, entry.value.kind) {
                (Kind::Map(mine), Kind::Map(theirs))
                    if MERGED_MAPS.contains(&entry.key.as_str()) =>
                {
                    for component in theirs {
                        if let Some(first) = mine.iter().find(|c| c.key == component.key) {
                            diags.push(
                                Diagnostic::error(
                                    &origins[k],
                                    component.key_pos,
                                    format!(
                                        "`{}` is defined twice: here and in {}",
                                        component.key,
                                        at(first.key_pos)
                                    ),
                                )
                                .with_hint(Some("give each component its own id")),
                            );
                        } else {
                            mine.push(component);
                        }
                    }
                }
                (Kind::Seq(mine), Kind::Seq(theirs)) if entry.key == "tests" => mine.extend(theirs),
                _ => diags.push(
                    Diagnostic::error(
                        &origins[k],
                        entry.key_pos,
                        format!(
                            "`{}` is set here and in {}",
                            entry.key,
                            at(existing.key_pos)
                        ),
                    )
                    .with_hint(Some(
                        "set each global setting in one file; sources, transforms and sinks may \
                         be spread over several",
                    )),
                ),
            }
        }
    }
    let root = Node {
        kind: Kind::Map(merged),
        pos: None,
    };
    let label = origins.join(", ");
    // The texts are not one text: positions inside string values fall back to the value's own.
    let config = crate::validate::validate::<R>(&root, "", &label, env.tls, &mut diags);
    let unshift = |mut d: Diagnostic| {
        if let Some(line) = d.line
            && let Some(origin) = origins.get(line / FILE_STRIDE)
        {
            d.origin.clone_from(origin);
            d.line = Some(line % FILE_STRIDE);
        }
        d
    };
    let (mut errors, mut warnings): (Vec<_>, Vec<_>) = diags
        .into_iter()
        .map(unshift)
        .partition(Diagnostic::is_error);
    match config {
        Some(mut c) if errors.is_empty() => {
            warnings
                .sort_by(|a, b| (&a.origin, a.line, a.column).cmp(&(&b.origin, b.line, b.column)));
            c.warnings = warnings;
            Ok(c)
        }
        _ => {
            if errors.is_empty() {
                errors.push(Diagnostic::error(&label, None, "configuration is invalid"));
            }
            errors.sort_by(|a, b| {
                (
                    &a.origin,
                    a.line.unwrap_or(usize::MAX),
                    a.column.unwrap_or(usize::MAX),
                )
                    .cmp(&(
                        &b.origin,
                        b.line.unwrap_or(usize::MAX),
                        b.column.unwrap_or(usize::MAX),
                    ))
            });
            Err(ConfigErrors(errors))
        }
    }
}

/// Moves every position of `node` down by `lines` (see [`FILE_STRIDE`]).
fn shift(node: &mut Node, lines: usize) {
    if let Some(p) = &mut node.pos {
        p.line += lines;
    }
    match &mut node.kind {
        Kind::Map(entries) => {
            for e in entries {
                if let Some(p) = &mut e.key_pos {
                    p.line += lines;
                }
                shift(&mut e.value, lines);
            }
        }
        Kind::Seq(items) => {
            for item in items {
                shift(item, lines);
            }
        }
        _ => {}
    }
}

/// A configuration file's text; a diagnostic when it cannot be read or is not UTF-8.
fn read_text(path: &Path, origin: &str) -> Result<String, ConfigErrors> {
    let bytes = std::fs::read(path).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::NotFound => {
                "check the path; the default configuration is a good starting point"
            }
            std::io::ErrorKind::PermissionDenied => {
                "make the file readable by the user running loghaul"
            }
            _ => "check that the path names a readable file",
        };
        ConfigErrors(vec![
            Diagnostic::error(origin, None, format!("cannot read config file: {e}"))
                .with_hint(Some(hint)),
        ])
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let pos = crate::toml_doc::LineIndex::new(&String::from_utf8_lossy(e.as_bytes()))
            .pos(e.utf8_error().valid_up_to());
        ConfigErrors(vec![
            Diagnostic::error(origin, Some(pos), "config file is not valid UTF-8")
                .with_hint(Some("save the file as UTF-8")),
        ])
    })?;
    Ok(text)
}

/// Reads a side file of unit tests for `config` and loads it.
pub(crate) fn load_tests_path<R: Registry>(
    config: &Config<R>,
    path: &Path,
    env: crate::Environment<'_>,
) -> Result<Vec<UnitTest<R::Condition>>, ConfigErrors> {
    let origin = path.display().to_string();
    let text = read_text(path, &origin)?;
    load_tests_str(config, &text, ConfigFormat::from_path(path), &origin, env)
}

/// Loads a side file of unit tests (a document holding `tests:` only), checked against the
/// components of `config`.
pub(crate) fn load_tests_str<R: Registry>(
    config: &Config<R>,
    text: &str,
    format: ConfigFormat,
    origin: &str,
    env: crate::Environment<'_>,
) -> Result<Vec<UnitTest<R::Condition>>, ConfigErrors> {
    let text = interpolated(text, format, origin, &env)?;
    let root = parse_node(&text, format, origin)?;
    let mut diags = Vec::new();
    let mut cx = Ctx {
        origin,
        root: &root,
        text: &text,
        diags: &mut diags,
        errors: 0,
        tls_check: env.tls,
    };
    // What the tests may name: the configuration's components and their named outputs.
    let components: Vec<(&str, ComponentKind, Vec<String>)> = config
        .sources
        .iter()
        .map(|c| (c.id.as_str(), ComponentKind::Source, c.config.outputs()))
        .chain(
            config
                .transforms
                .iter()
                .map(|c| (c.id.as_str(), ComponentKind::Transform, c.config.outputs())),
        )
        .chain(
            config
                .sinks
                .iter()
                .map(|c| (c.id.as_str(), ComponentKind::Sink, Vec::new())),
        )
        .collect();
    let kind_of: HashMap<&str, ComponentKind> = components
        .iter()
        .map(|(id, kind, _)| (*id, *kind))
        .collect();
    let outputs_of: HashMap<&str, Option<&[String]>> = components
        .iter()
        .map(|(id, _, outputs)| (*id, Some(outputs.as_slice())))
        .collect();
    let graph = Graph {
        kind_of: &kind_of,
        outputs_of: &outputs_of,
    };
    let mut tests = Vec::new();
    match root.entries() {
        None if root.is_null() => {}
        None => cx.error(
            root.pos,
            "a tests file must be a map with a `tests` key",
            Some("e.g. tests: [{ name: my test, inputs: [...], outputs: [...] }]".to_owned()),
        ),
        Some(entries) => {
            for entry in entries {
                if entry.key == TESTS_KEY {
                    tests = read_tests::<R>(entry, &mut cx, &graph);
                } else {
                    let hint = if TOP_LEVEL_KEYS.contains(&entry.key.as_str()) {
                        format!(
                            "`{}` belongs in the configuration given with -c; a tests file holds `tests` only",
                            entry.key
                        )
                    } else {
                        "a tests file holds `tests` only".to_owned()
                    };
                    cx.error(
                        entry.key_pos,
                        format!("unexpected key `{}` in a tests file", entry.key),
                        Some(hint),
                    );
                }
            }
        }
    }
    let mut errors: Vec<Diagnostic> = diags.into_iter().filter(Diagnostic::is_error).collect();
    if errors.is_empty() {
        return Ok(tests);
    }
    errors.sort_by_key(|d| (d.line.unwrap_or(usize::MAX), d.column.unwrap_or(usize::MAX)));
    Err(ConfigErrors(errors))
}

/// `text` with its `${VAR}` references replaced (not in JSON); each bad reference an error.
fn interpolated(
    text: &str,
    format: ConfigFormat,
    origin: &str,
    env: &crate::Environment<'_>,
) -> Result<String, ConfigErrors> {
    crate::interpolate::interpolate(text, format != ConfigFormat::Json, env.vars).map_err(|errs| {
        ConfigErrors(
            errs.into_iter()
                .map(|(pos, msg, hint)| {
                    Diagnostic::error(origin, Some(pos), msg).with_hint(Some(hint))
                })
                .collect(),
        )
    })
}

/// Loads configuration text.
pub(crate) fn load_str<R: Registry>(
    text: &str,
    format: ConfigFormat,
    origin: &str,
    env: crate::Environment<'_>,
) -> Result<Config<R>, ConfigErrors> {
    let text = interpolated(text, format, origin, &env)?;
    let root = parse_node(&text, format, origin)?;
    let mut diags = Vec::new();
    let config = crate::validate::validate::<R>(&root, &text, origin, env.tls, &mut diags);
    let (mut errors, warnings): (Vec<_>, Vec<_>) =
        diags.into_iter().partition(Diagnostic::is_error);
    match config {
        Some(mut c) if errors.is_empty() => {
            c.warnings = warnings;
            c.warnings.sort_by_key(|d| (d.line, d.column));
            Ok(c)
        }
        _ => {
            if errors.is_empty() {
                // Validation never returns `None` without an error; keep the contract anyway.
                errors.push(Diagnostic::error(origin, None, "configuration is invalid"));
            }
            // Stable: equal positions keep the order they were found in.
            errors.sort_by_key(|d| (d.line.unwrap_or(usize::MAX), d.column.unwrap_or(usize::MAX)));
            Err(ConfigErrors(errors))
        }
    }
}

/// Parses text in `format` into a node tree.
pub(crate) fn parse_node(
    text: &str,
    format: ConfigFormat,
    origin: &str,
) -> Result<Node, ConfigErrors> {
    let one = |pos: Option<Pos>, msg: String, hint: Option<String>| {
        ConfigErrors(vec![Diagnostic::error(origin, pos, msg).with_hint(hint)])
    };
    match format {
        ConfigFormat::Yaml => crate::yaml::parse(text).map_err(|errs| {
            ConfigErrors(
                errs.into_iter()
                    .map(|e| Diagnostic::error(origin, e.pos, e.message).with_hint(e.hint))
                    .collect(),
            )
        }),
        ConfigFormat::Toml => {
            crate::toml_doc::parse(text).map_err(|(pos, msg)| one(pos, msg, None))
        }
        ConfigFormat::Json => crate::json::parse(text).map_err(|(pos, msg)| one(pos, msg, None)),
    }
}

pub(crate) fn de_diag(origin: &str, e: DeError) -> Diagnostic {
    Diagnostic::error(origin, e.pos, e.message).with_hint(e.hint)
}

/// Deserializes `node` with `f`; after a value error, retries without the key at fault, so one bad
/// value does not hide the next. Unknown keys (recorded, not returned, by [`NodeDe`]) are collected
/// from every attempt.
///
/// A "missing field" error for a key we removed is an artifact of the retry and is dropped; it
/// ends the retries, since serde stops there.
pub(crate) fn collect_all<T>(
    node: &Node,
    key_pos: Option<Pos>,
    key: Option<&str>,
    skip: &[&str],
    f: impl Fn(NodeDe<'_>) -> Result<T, DeError>,
) -> Result<T, Vec<DeError>> {
    let mut current = node.clone();
    let mut removed: Vec<String> = Vec::new();
    let mut errors: Vec<DeError> = Vec::new();
    loop {
        let extra = Extra::default();
        let mut de = NodeDe::new(&current, key_pos, skip, &extra);
        if let Some(k) = key {
            de = de.with_key(k);
        }
        let result = f(de);
        for e in extra.into_inner() {
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
        let e = match result {
            Ok(v) if errors.is_empty() => return Ok(v),
            Ok(_) => return Err(errors),
            Err(e) => e,
        };
        if let Some(field) = e.missing {
            // A misspelt key (`adress`) is one mistake: its "did you mean" already names the
            // missing field, which needs no error of its own.
            let suggested = format!("did you mean '{field}'?");
            let misspelt = errors
                .iter()
                .any(|u| u.hint.as_deref() == Some(suggested.as_str()));
            if !removed.iter().any(|r| r == field) && !misspelt {
                errors.push(e);
            }
            return Err(errors);
        }
        let culprit = e.pos.and_then(|p| culprit_index(&current, p));
        errors.push(e);
        let (Some(i), crate::node::Kind::Map(entries)) = (culprit, &mut current.kind) else {
            return Err(errors);
        };
        removed.push(entries.remove(i).key);
    }
}

/// The entry of a map whose text holds `pos`: the last key at or before it.
fn culprit_index(node: &Node, pos: Pos) -> Option<usize> {
    node.entries()?
        .iter()
        .enumerate()
        .filter(|(_, e)| e.key_pos.is_some_and(|k| k <= pos))
        .max_by_key(|(_, e)| e.key_pos)
        .map(|(i, _)| i)
}

/// Deserializes one top-level value, turning every error into a diagnostic.
fn read<T: DeserializeOwned>(entry: &Entry, cx: &mut Ctx<'_>) -> Option<T> {
    match collect_all(&entry.value, entry.key_pos, Some(&entry.key), &[], |de| {
        T::deserialize(de)
    }) {
        Ok(v) => Some(v),
        Err(errs) => {
            for e in errs {
                cx.errors += 1;
                cx.diags.push(de_diag(cx.origin, e));
            }
            None
        }
    }
}

/// Deserializes a component's raw schema from its entry, leaving out the keys in `skip`.
pub(crate) fn deserialize_component<T: DeserializeOwned>(
    entry: &Entry,
    skip: &[&str],
    v: &mut Validator<'_, '_>,
) -> Option<T> {
    match collect_all(&entry.value, entry.key_pos, None, skip, |de| {
        T::deserialize(de)
    }) {
        Ok(raw) => Some(raw),
        Err(errs) => {
            for e in errs {
                v.cx.errors += 1;
                v.cx.diags.push(de_diag(v.cx.origin, e));
            }
            None
        }
    }
}

/// Reads the top-level sections, component by component.
pub(crate) fn read_sections<R: Registry>(
    cx: &mut Ctx<'_>,
    declared: &mut Vec<Declared>,
) -> Loaded<R> {
    let mut loaded = Loaded {
        api: None,
        shutdown_timeout: None,
        data_dir: None,
        limits: None,
        sources: Vec::new(),
        transforms: Vec::new(),
        sinks: Vec::new(),
    };
    let root = cx.root;
    if root.is_null() {
        return loaded;
    }
    let Some(entries) = root.entries() else {
        cx.error(
            root.pos,
            "the configuration must be a map of sections",
            Some(format!("top-level keys: {}", TOP_LEVEL_KEYS.join(", "))),
        );
        return loaded;
    };
    let mut top = RawTop::default();
    for entry in entries {
        match entry.key.as_str() {
            "api" => top.api = read::<RawApi>(entry, cx),
            "shutdown_timeout" => top.shutdown_timeout = read::<RawDuration>(entry, cx),
            "data_dir" => top.data_dir = read::<String>(entry, cx),
            "limits" => loaded.limits = read::<RawLimits>(entry, cx),
            "sources" => loaded.sources = read_components::<R, R::Source>(entry, cx, declared),
            "transforms" => {
                loaded.transforms = read_components::<R, R::Transform>(entry, cx, declared)
            }
            "sinks" => loaded.sinks = read_components::<R, R::Sink>(entry, cx, declared),
            // Read once every component is known (`validate`): tests name them.
            crate::unit_tests::TESTS_KEY => {}
            other => cx.error(
                entry.key_pos,
                format!("unknown top-level key `{other}`"),
                Some(did_you_mean(other, &TOP_LEVEL_KEYS, "valid keys")),
            ),
        }
    }
    loaded.api = top.api;
    loaded.shutdown_timeout = top.shutdown_timeout;
    loaded.data_dir = top.data_dir;
    loaded
}

/// The kind a component type belongs to, for "that is a sink type" hints.
fn kind_of_type<R: Registry>(ty: &str) -> Option<ComponentKind> {
    [
        (R::Source::KIND, R::Source::TYPES),
        (R::Transform::KIND, R::Transform::TYPES),
        (R::Sink::KIND, R::Sink::TYPES),
    ]
    .into_iter()
    .find(|(_, types)| types.contains(&ty))
    .map(|(kind, _)| kind)
}

fn read_components<R: Registry, S: ComponentSet>(
    section: &Entry,
    cx: &mut Ctx<'_>,
    declared: &mut Vec<Declared>,
) -> Vec<Component<S>> {
    let mut out = Vec::new();
    if section.value.is_null() {
        return out;
    }
    let kind = S::KIND;
    let first_type = S::TYPES.first().copied().unwrap_or("TYPE");
    let Some(entries) = section.value.entries() else {
        cx.error(
            section.value.pos,
            format!("`{}` must be a map of {kind} ids to {kind}s", section.key),
            Some(format!(
                "e.g. {}: {{ my_{kind}: {{ type: {first_type}, ... }} }}",
                section.key
            )),
        );
        return out;
    };
    let types = S::TYPES.join(", ");
    for entry in entries {
        let id = &entry.key;
        let mut decl = Declared {
            id: id.clone(),
            kind,
            key_pos: entry.key_pos,
            inputs: Vec::new(),
            resources: Vec::new(),
            outputs: None,
            default_output: true,
        };
        let component = read_component::<R, S>(entry, cx, &types, &mut decl);
        if let Some(component) = component {
            decl.resources = component.config.resources();
            decl.outputs = Some(component.config.outputs());
            decl.default_output = component.config.has_default_output();
            out.push(component);
        }
        declared.push(decl);
    }
    out
}

/// One component: its type, the keys every component has, then its type's own config.
fn read_component<R: Registry, S: ComponentSet>(
    entry: &Entry,
    cx: &mut Ctx<'_>,
    types: &str,
    decl: &mut Declared,
) -> Option<Component<S>> {
    let (kind, id) = (S::KIND, &entry.key);
    let first_type = S::TYPES.first().copied().unwrap_or("TYPE");
    if entry.value.entries().is_none() {
        cx.error(
            entry.value.pos.or(entry.key_pos),
            format!("{kind} `{id}` must be a map with a `type` key"),
            Some(format!("{kind} types: {types}")),
        );
        return None;
    }
    let Some(type_entry) = entry.value.entry("type") else {
        cx.error(
            entry.key_pos,
            format!("{kind} `{id}` has no `type`"),
            Some(format!("add `type: {first_type}` (one of: {types})")),
        );
        return None;
    };
    let Some(ty) = type_entry.value.scalar_text() else {
        cx.error(
            type_entry.value.pos,
            "`type` must be a string",
            Some(format!("{kind} types: {types}")),
        );
        return None;
    };
    // The keys every component has are read here, once, for every type.
    let mut skip: Vec<&str> = vec!["type"];
    let inputs = match entry.value.entry("inputs") {
        Some(e) if kind != ComponentKind::Source => {
            skip.push("inputs");
            read::<Vec<String>>(e, cx).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    decl.inputs.clone_from(&inputs);
    let acknowledgements = match entry.value.entry("acknowledgements") {
        Some(e) if kind == ComponentKind::Source => {
            skip.push("acknowledgements");
            read::<bool>(e, cx).unwrap_or(true)
        }
        _ => true,
    };
    let mut buffer = Some(crate::delivery::BufferConfig::default());
    let mut retry = Some(None);
    if kind == ComponentKind::Sink {
        if let Some(e) = entry.value.entry("buffer") {
            skip.push("buffer");
            let raw = read::<crate::delivery::RawBuffer>(e, cx);
            let mut v = Validator {
                cx,
                section: kind.section(),
                id,
            };
            buffer = raw.and_then(|raw| crate::delivery::validate_buffer(Some(raw), &mut v));
        }
        if let Some(e) = entry.value.entry("retry") {
            skip.push("retry");
            let raw = read::<crate::delivery::RawRetry>(e, cx);
            let mut v = Validator {
                cx,
                section: kind.section(),
                id,
            };
            retry = raw
                .and_then(|raw| crate::delivery::validate_retry(Some(raw), &mut v))
                .map(Some);
        }
    }
    let mut raw_tls = None;
    if kind != ComponentKind::Transform
        && let Some(e) = entry.value.entry("tls")
    {
        skip.push("tls");
        raw_tls = Some(read::<crate::tls::RawTls>(e, cx));
    }
    debug_assert!(skip.iter().all(|k| kind.common_keys().contains(k)));
    let loader = ComponentLoader {
        entry,
        skip: &skip,
        validator: Validator {
            cx,
            section: kind.section(),
            id,
        },
    };
    match S::load(&ty, loader) {
        Some(config) => {
            let config = config?;
            // Whether `tls` fits is the type's to say, once its own keys are known.
            let tls = match raw_tls {
                None => None,
                Some(raw) => {
                    let mut v = Validator {
                        cx,
                        section: kind.section(),
                        id,
                    };
                    match config.tls_role() {
                        Ok(role) => crate::tls::validate_tls(
                            raw?,
                            role,
                            &mut crate::tls::At::component(&mut v),
                        )?,
                        Err(why) => {
                            v.error_at_key(&["tls"], why, None);
                            return None;
                        }
                    }
                }
            };
            Some(Component {
                id: id.clone(),
                inputs,
                acknowledgements,
                buffer: buffer?,
                retry: retry?,
                tls,
                config,
            })
        }
        None => {
            let hint = match kind_of_type::<R>(&ty) {
                Some(other) => format!("`{ty}` is a {other} type; {kind} types: {types}"),
                None => did_you_mean(&ty, S::TYPES, &format!("{kind} types")),
            };
            cx.error(
                type_entry.value.pos,
                format!("unknown {kind} type `{ty}`"),
                Some(hint),
            );
            None
        }
    }
}

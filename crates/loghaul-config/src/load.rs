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

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::diagnostic::{ConfigErrors, Diagnostic, Pos, did_you_mean};
use crate::node::{DeError, Entry, Extra, Node, NodeDe};
use crate::raw::{
    Component, ComponentMap, RawApi, RawConfig, RawDuration, RawSink, RawSource, RawTransform,
};
use crate::runtime::Config;

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
pub(crate) const TOP_KEYS: [&str; 5] =
    ["api", "shutdown_timeout", "sources", "transforms", "sinks"];

/// Where a component id was declared, kept even when the component itself failed to load.
#[derive(Clone, Debug)]
pub(crate) struct DeclaredId {
    pub id: String,
    /// `source`, `transform` or `sink`.
    pub kind: &'static str,
    pub key_pos: Option<Pos>,
}

/// What reading the raw types produced.
pub(crate) struct Loaded {
    pub raw: RawConfig,
    pub declared: Vec<DeclaredId>,
}

/// Reads a file and loads it.
pub(crate) fn load_path(
    path: &Path,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let origin = path.display().to_string();
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
            Diagnostic::error(&origin, None, format!("cannot read config file: {e}"))
                .with_hint(Some(hint)),
        ])
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let pos = crate::toml_doc::LineIndex::new(&String::from_utf8_lossy(e.as_bytes()))
            .pos(e.utf8_error().valid_up_to());
        ConfigErrors(vec![
            Diagnostic::error(&origin, Some(pos), "config file is not valid UTF-8")
                .with_hint(Some("save the file as UTF-8")),
        ])
    })?;
    load_str(&text, ConfigFormat::from_path(path), &origin, vars)
}

/// Loads configuration text.
pub(crate) fn load_str(
    text: &str,
    format: ConfigFormat,
    origin: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let text = crate::interpolate::interpolate(text, format != ConfigFormat::Json, vars).map_err(
        |errs| {
            ConfigErrors(
                errs.into_iter()
                    .map(|(pos, msg, hint)| {
                        Diagnostic::error(origin, Some(pos), msg).with_hint(Some(hint))
                    })
                    .collect(),
            )
        },
    )?;
    let root = parse_node(&text, format, origin)?;
    let mut diags = Vec::new();
    let loaded = read_raw(&root, origin, &mut diags);
    let config = crate::validate::validate(&loaded, &root, origin, &mut diags);
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

fn de_diag(origin: &str, e: DeError) -> Diagnostic {
    Diagnostic::error(origin, e.pos, e.message).with_hint(e.hint)
}

/// Deserializes `node` with `f`; after a value error, retries without the key at fault, so one bad
/// value does not hide the next. Unknown keys (recorded, not returned, by [`NodeDe`]) are collected
/// from every attempt.
///
/// A "missing field" error for a key we removed is an artifact of the retry and is dropped; it
/// ends the retries, since serde stops there.
fn collect_all<T>(
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
            if !removed.iter().any(|r| r == field) {
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
fn read<T: DeserializeOwned>(
    entry: &Entry,
    origin: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    collect_all(&entry.value, entry.key_pos, Some(&entry.key), &[], |de| {
        T::deserialize(de)
    })
    .map_err(|errs| diags.extend(errs.into_iter().map(|e| de_diag(origin, e))))
    .ok()
}

/// Builds the raw types section by section, component by component.
pub(crate) fn read_raw(root: &Node, origin: &str, diags: &mut Vec<Diagnostic>) -> Loaded {
    let mut raw = RawConfig::default();
    let mut declared = Vec::new();
    if root.is_null() {
        return Loaded { raw, declared };
    }
    let Some(entries) = root.entries() else {
        diags.push(
            Diagnostic::error(
                origin,
                root.pos,
                "the configuration must be a map of sections",
            )
            .with_hint(Some(format!("top-level keys: {}", TOP_KEYS.join(", ")))),
        );
        return Loaded { raw, declared };
    };
    for entry in entries {
        match entry.key.as_str() {
            "api" => raw.api = read::<RawApi>(entry, origin, diags),
            "shutdown_timeout" => raw.shutdown_timeout = read::<RawDuration>(entry, origin, diags),
            "sources" => {
                raw.sources = read_components::<RawSource>(entry, origin, diags, &mut declared)
            }
            "transforms" => {
                raw.transforms =
                    read_components::<RawTransform>(entry, origin, diags, &mut declared)
            }
            "sinks" => raw.sinks = read_components::<RawSink>(entry, origin, diags, &mut declared),
            other => diags.push(
                Diagnostic::error(
                    origin,
                    entry.key_pos,
                    format!("unknown top-level key `{other}`"),
                )
                .with_hint(Some(did_you_mean(other, &TOP_KEYS, "valid keys"))),
            ),
        }
    }
    Loaded { raw, declared }
}

/// The section a component type belongs to, for "that is a sink type" hints.
fn kind_of_type(ty: &str) -> Option<&'static str> {
    [
        (RawSource::KIND, RawSource::TYPES),
        (RawTransform::KIND, RawTransform::TYPES),
        (RawSink::KIND, RawSink::TYPES),
    ]
    .into_iter()
    .find(|(_, types)| types.contains(&ty))
    .map(|(kind, _)| kind)
}

fn read_components<T: Component>(
    section: &Entry,
    origin: &str,
    diags: &mut Vec<Diagnostic>,
    declared: &mut Vec<DeclaredId>,
) -> ComponentMap<T> {
    let mut out = Vec::new();
    if section.value.is_null() {
        return ComponentMap(out);
    }
    let Some(entries) = section.value.entries() else {
        diags.push(
            Diagnostic::error(
                origin,
                section.value.pos,
                format!(
                    "`{}` must be a map of {} ids to {}s",
                    section.key,
                    T::KIND,
                    T::KIND
                ),
            )
            .with_hint(Some(format!(
                "e.g. {}: {{ my_{}: {{ type: {}, ... }} }}",
                section.key,
                T::KIND,
                T::TYPES[0]
            ))),
        );
        return ComponentMap(out);
    };
    let types = T::TYPES.join(", ");
    for entry in entries {
        let id = &entry.key;
        declared.push(DeclaredId {
            id: id.clone(),
            kind: T::KIND,
            key_pos: entry.key_pos,
        });
        if entry.value.entries().is_none() {
            diags.push(
                Diagnostic::error(
                    origin,
                    entry.value.pos.or(entry.key_pos),
                    format!("{} `{id}` must be a map with a `type` key", T::KIND),
                )
                .with_hint(Some(format!("{} types: {types}", T::KIND))),
            );
            continue;
        }
        let Some(type_entry) = entry.value.entry("type") else {
            diags.push(
                Diagnostic::error(
                    origin,
                    entry.key_pos,
                    format!("{} `{id}` has no `type`", T::KIND),
                )
                .with_hint(Some(format!(
                    "add `type: {}` (one of: {types})",
                    T::TYPES[0]
                ))),
            );
            continue;
        };
        let Some(ty) = type_entry.value.scalar_text() else {
            diags.push(
                Diagnostic::error(origin, type_entry.value.pos, "`type` must be a string")
                    .with_hint(Some(format!("{} types: {types}", T::KIND))),
            );
            continue;
        };
        if T::TYPES.contains(&ty.as_str()) {
            let result = collect_all(&entry.value, entry.key_pos, None, &["type"], |de| {
                T::from_type(&ty, de)
                    .unwrap_or_else(|| Err(serde::de::Error::custom("unknown type")))
            });
            match result {
                Ok(component) => out.push((id.clone(), component)),
                Err(errs) => diags.extend(errs.into_iter().map(|e| de_diag(origin, e))),
            }
        } else {
            {
                let hint = match kind_of_type(&ty) {
                    Some(kind) => format!("`{ty}` is a {kind} type; {} types: {types}", T::KIND),
                    None => did_you_mean(&ty, T::TYPES, &format!("{} types", T::KIND)),
                };
                diags.push(
                    Diagnostic::error(
                        origin,
                        type_entry.value.pos,
                        format!("unknown {} type `{ty}`", T::KIND),
                    )
                    .with_hint(Some(hint)),
                );
            }
        }
    }
    ComponentMap(out)
}

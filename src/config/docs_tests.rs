//! `docs/configuration.md` against the code: every key the loader accepts is documented, and
//! nothing is documented that the loader would refuse.
//!
//! The keys come from where the loader gets them for its "unknown key, did you mean" errors:
//! serde's field list of each raw schema (`loghaul_config::keys_of`, `ComponentSet::keys`), the
//! keys every component of a kind has (`ComponentKind::common_keys`) and the top-level keys. The
//! document marks keys in tables whose header's first cell is `field`: each row names its keys
//! in backticks in its first cell (several when they are documented together; `a.b`, a key
//! nested in `a`, counts as `a`). A table belongs to the `##` section it is in and, below a
//! `###` heading, to that too (so `#### ` subsections count as their `###`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use loghaul_config::delivery::{RawBuffer, RawRetry};
use loghaul_config::raw::RawApi;
use loghaul_config::tls::RawTls;
use loghaul_config::unit_tests::{RawCondition, RawTest, RawTestInput, RawTestOutput};
use loghaul_config::{ComponentKind, ComponentSet, Registry, TOP_LEVEL_KEYS, keys_of};

use super::Components;

const DOC: &str = include_str!("../../docs/configuration.md");

/// `(## heading, ### heading or "")` → the keys its `field` tables name.
type Documented = BTreeMap<(String, String), BTreeSet<String>>;

fn documented(doc: &str) -> Documented {
    let mut out = Documented::new();
    let (mut h2, mut h3) = (String::new(), String::new());
    let mut in_code = false;
    let mut in_field_table = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if let Some(h) = line.strip_prefix("## ") {
            (h2, h3) = (h.trim().to_owned(), String::new());
        } else if let Some(h) = line.strip_prefix("### ") {
            h3 = h.trim().to_owned();
        }
        if !line.starts_with('|') {
            in_field_table = false;
            continue;
        }
        let first = line.split('|').nth(1).unwrap_or_default().trim();
        if first == "field" {
            in_field_table = true;
            out.entry((h2.clone(), h3.clone())).or_default();
            continue;
        }
        if !in_field_table || first.starts_with("---") {
            continue;
        }
        let keys = out.entry((h2.clone(), h3.clone())).or_default();
        for (i, name) in first.split('`').enumerate() {
            if i % 2 == 1 {
                let top = name.split('.').next().unwrap_or_default();
                keys.insert(top.to_owned());
            }
        }
    }
    out
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

#[track_caller]
fn same(doc: &Documented, section: (&str, &str), declared: &[&str]) {
    let key = (section.0.to_owned(), section.1.to_owned());
    let documented = doc
        .get(&key)
        .unwrap_or_else(|| panic!("no `field` table under {section:?}"));
    assert_eq!(
        documented,
        &set(declared),
        "{section:?}: documented (left) and declared (right) keys differ"
    );
}

/// A kind's types: every one has a `### `type`` section under the kind's `##` whose table
/// names all its own keys and nothing but them and the keys every component of the kind has.
fn components<S: ComponentSet>(doc: &Documented, heading: &str) {
    let kind = S::KIND;
    let headings: BTreeSet<String> = doc
        .keys()
        .filter(|(h2, h3)| h2 == heading && !h3.is_empty())
        .map(|(_, h3)| h3.clone())
        .collect();
    let types: BTreeSet<String> = S::TYPES.iter().map(|t| format!("`{t}`")).collect();
    assert_eq!(
        headings, types,
        "{heading}: documented (left) and declared (right) types"
    );
    for ty in S::TYPES {
        let own = S::keys(ty).expect("a type of the set has keys");
        let section = (heading.to_owned(), format!("`{ty}`"));
        let documented = &doc[&section];
        for key in own {
            assert!(
                documented.contains(*key),
                "{kind} `{ty}`: `{key}` is declared but not documented in its table"
            );
        }
        for key in documented {
            assert!(
                own.contains(&key.as_str()) || kind.common_keys().contains(&key.as_str()),
                "{kind} `{ty}`: `{key}` is documented but the loader does not take it"
            );
        }
    }
}

#[test]
fn configuration_md_documents_exactly_the_declared_keys() {
    let doc = documented(DOC);
    same(&doc, ("Top-level keys", ""), &TOP_LEVEL_KEYS);
    same(&doc, ("Top-level keys", "`api`"), keys_of::<RawApi>());
    let common: BTreeSet<&str> = [
        ComponentKind::Source,
        ComponentKind::Transform,
        ComponentKind::Sink,
    ]
    .into_iter()
    .flat_map(ComponentKind::common_keys)
    .copied()
    .collect();
    same(
        &doc,
        ("Keys every component has", ""),
        &common.into_iter().collect::<Vec<_>>(),
    );
    same(&doc, ("Buffers", ""), keys_of::<RawBuffer>());
    same(&doc, ("Retries", ""), keys_of::<RawRetry>());
    same(&doc, ("TLS", ""), keys_of::<RawTls>());
    same(&doc, ("Unit tests", ""), keys_of::<RawTest>());
    same(&doc, ("Unit tests", "`inputs`"), keys_of::<RawTestInput>());
    same(
        &doc,
        ("Unit tests", "`outputs`"),
        keys_of::<RawTestOutput>(),
    );
    same(
        &doc,
        ("Unit tests", "`conditions`"),
        keys_of::<RawCondition>(),
    );
    components::<<Components as Registry>::Source>(&doc, "Sources");
    components::<<Components as Registry>::Transform>(&doc, "Transforms");
    components::<<Components as Registry>::Sink>(&doc, "Sinks");
}

#[test]
fn the_parser_reads_field_tables_only() {
    let doc = "## A\n\n| field | t |\n|---|---|\n| `x`, `y.z` | `not_a_key` |\n\n\
               | key | t |\n|---|---|\n| `ignored` | |\n\n### `b`\n\n| field |\n|---|\n\
               | `w` |\n\n```\n| field |\n| `in_code` |\n```\n";
    let d = documented(doc);
    assert_eq!(d[&("A".into(), String::new())], set(&["x", "y"]));
    assert_eq!(d[&("A".into(), "`b`".into())], set(&["w"]));
    assert_eq!(d.len(), 2);
}

//! Configuration errors at their keys; groups that end by each rule, on tokio's paused clock;
//! acknowledgements held until the merged event is committed; the memory charged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use loghaul_core::{BatchNotifier, BatchStatusReceiver, MemoryBudget};
use serde_json::{Value as Json, json};

use super::*;
use crate::config::testing::{error_at, ok, transform};
use crate::transforms::testing::{json_batch, json_lines, syslog_batch, test_metrics};

#[test]
fn conditions_strategies_and_bounds_are_checked() {
    let t = transform("type: reduce\nends_when: '.a == 1'\nstarts_when: '.b == 1'");
    error_at(
        &t,
        "starts_when:",
        "only one of `ends_when` and `starts_when`",
    );
    let t = transform("type: reduce\nmerge_strategies:\n  message: concat_newlines");
    error_at(
        &t,
        "message: concat_newlines",
        "unknown merge strategy `concat_newlines`",
    );
    let t = transform("type: reduce\nmerge_strategies:\n  items.0: array");
    error_at(&t, "items.0:", "indexes are not supported");
    let t = transform("type: reduce\nends_when: '.message'");
    error_at(&t, "ends_when:", "a condition must return a boolean");
    let t =
        transform("type: reduce\nstarts_when: { type: vrl, source: 'match(.message, r''x'')' }");
    error_at(&t, "starts_when:", "VRL error");
    for key in [
        "expire_after_ms",
        "flush_period_ms",
        "end_every_period_ms",
        "max_events",
        "max_groups",
    ] {
        error_at(&transform(&format!("type: reduce\n{key}: 0")), key, "");
    }
    error_at(
        &transform("type: reduce\ngroup_by: ['']"),
        "group_by",
        "no field name",
    );
    error_at(
        &transform("type: reduce\nmerge: {}"),
        "merge:",
        "unknown key `merge`",
    );
    ok(&transform(
        "type: reduce\ngroup_by: [host]\nmerge_strategies: { message: concat_newline, n: max }\nexpire_after_ms: 500\nmax_events: 10",
    ));
}

fn reduce(body: &str) -> Reduce {
    reduce_with(body, None)
}

fn reduce_with(body: &str, budget: Option<&Arc<MemoryBudget>>) -> Reduce {
    let config = ok(&transform(body));
    let t = config.transforms.into_iter().next().expect("one transform");
    match t.config {
        crate::transforms::TransformConfig::Reduce(c) => Reduce::new(c, budget),
        other => panic!("{other:?}"),
    }
}

/// Every event of what was flushed, as its JSON output line.
fn lines(flushed: Flushed) -> Vec<Json> {
    flushed
        .batches
        .into_iter()
        .flat_map(|(batch, acks)| {
            for ack in acks {
                ack.commit(BatchStatus::Delivered);
            }
            json_lines(&batch)
        })
        .collect()
}

fn untracked() -> Ack {
    Finalizer::none().ack()
}

/// The Java stack trace of the documentation's example: its first line, then 39 `\tat` lines.
fn stack_trace() -> Vec<String> {
    let mut trace =
        vec!["Exception in thread \"main\" java.lang.IllegalStateException: boom".to_owned()];
    for i in 1..40 {
        trace.push(format!(
            "\tat com.example.Layer{i}.call(Layer{i}.java:{})",
            10 + i
        ));
    }
    trace
}

/// The example of docs/configuration.md: a 40-line Java stack trace sent as 40 syslog
/// messages, between other messages, split across batches anywhere, becomes one event whose
/// message is the 40 lines joined by newlines; the events around it stay apart; the last one
/// goes out at the end of the input. The merged event has the first line's header and time,
/// and the last line's time as `timestamp_end`.
#[test]
fn a_java_stack_trace_sent_line_by_line_becomes_one_event() {
    let metrics = test_metrics();
    let trace = stack_trace();
    let mut wire: Vec<String> = vec![
        "<14>Jan  1 00:00:00 web app[7]: starting".to_owned(),
        "<14>Jan  1 00:00:01 web app[7]: request 1".to_owned(),
    ];
    for (i, line) in trace.iter().enumerate() {
        wire.push(format!(
            "<11>Jan  1 00:00:{:02} web app[7]: {line}",
            2 + i / 20
        ));
    }
    wire.push("<14>Jan  1 00:00:05 web app[7]: request 2".to_owned());
    wire.push("<14>Jan  1 00:00:06 web app[7]: stopping".to_owned());
    for chunk in [1, 3, 7, 45] {
        let mut r = reduce(
            "type: reduce\nstarts_when: 'match(string!(.message), r''^[^\\s]'')'\nmerge_strategies:\n  message: concat_newline",
        );
        let now = Instant::now();
        let mut out = Vec::new();
        for lines_of in wire.chunks(chunk) {
            let refs: Vec<&str> = lines_of.iter().map(String::as_str).collect();
            out.extend(lines(r.push_batch(
                &syslog_batch(&refs),
                &untracked(),
                now,
                &metrics,
            )));
        }
        assert_eq!(
            r.open_groups(),
            1,
            "`stopping` waits for what may follow it"
        );
        out.extend(lines(r.flush_all()));
        let messages: Vec<&str> = out.iter().map(|e| e["message"].as_str().unwrap()).collect();
        let joined = trace.join("\n");
        assert_eq!(
            messages,
            [
                "starting",
                "request 1",
                joined.as_str(),
                "request 2",
                "stopping"
            ],
            "batches of {chunk}"
        );
        let merged = &out[2];
        assert_eq!(
            merged["timestamp"],
            json!("2026-01-01T00:00:02Z"),
            "{merged}"
        );
        assert_eq!(
            merged["timestamp_end"],
            json!("2026-01-01T00:00:03Z"),
            "{merged}"
        );
        assert_eq!(merged["severity"], json!("err"));
        assert_eq!(
            (&merged["hostname"], &merged["appname"]),
            (&json!("web"), &json!("app"))
        );
        assert_eq!(merged["procid"], json!("7"));
        assert_eq!(out[0]["timestamp_end"], json!("2026-01-01T00:00:00Z"));
        assert_eq!(r.bytes(), 0);
    }
    assert_eq!(metrics.errors(ErrorKind::Program), 0);
}

/// Groups by `group_by`, interleaved; `ends_when` closes its group with the event; numbers
/// are summed, strings keep the first, `max`, `array` and `retain` as asked; nested fields
/// merge leaf by leaf.
#[test]
fn groups_interleave_and_end_with_their_last_event() {
    let metrics = test_metrics();
    let mut r = reduce(
        "type: reduce\ngroup_by: [request_id]\nends_when: 'exists(.done)'\nmerge_strategies:\n  peak: max\n  steps: array\n  status: retain",
    );
    let batch = json_batch(&[
        json!({"request_id": "a", "message": "a1", "n": 1, "peak": 3, "steps": "s1", "status": null, "http": {"ms": 5, "path": "/a"}}),
        json!({"request_id": "b", "message": "b1", "n": 10, "peak": 1, "steps": "t1"}),
        json!({"request_id": "a", "message": "a2", "n": 2, "peak": 9, "steps": "s2", "status": 200, "http": {"ms": 7, "code": 1}}),
        json!({"request_id": "b", "message": "b2", "n": 20, "peak": 2, "steps": "t2", "done": true}),
        json!({"request_id": "a", "message": "a3", "n": 4, "peak": 5, "steps": "s3", "status": null, "done": true}),
        json!({"message": "no id", "n": 1}),
    ]);
    let out = lines(r.push_batch(&batch, &untracked(), Instant::now(), &metrics));
    assert_eq!(out.len(), 2, "{out:?}");
    let b = &out[0];
    assert_eq!(
        (&b["message"], &b["n"], &b["peak"]),
        (&json!("b1"), &json!(30), &json!(2))
    );
    assert_eq!(b["steps"], json!(["t1", "t2"]));
    let a = &out[1];
    assert_eq!(
        (&a["message"], &a["n"], &a["peak"]),
        (&json!("a1"), &json!(7), &json!(9))
    );
    assert_eq!(a["steps"], json!(["s1", "s2", "s3"]));
    assert_eq!(
        a["status"],
        json!(200),
        "retain keeps the last that is not null"
    );
    assert_eq!(a["http"], json!({"ms": 12, "path": "/a", "code": 1}));
    assert_eq!(a["done"], json!(true));
    assert_eq!(
        r.open_groups(),
        1,
        "the event without request_id is a group of its own"
    );
    let rest = lines(r.flush_all());
    assert_eq!(rest[0]["message"], json!("no id"));
}

/// A group goes out `expire_after_ms` after its last event, not before (tokio's paused clock;
/// the check runs every `flush_period_ms`); `end_every_period_ms` ends a busy group.
#[tokio::test(start_paused = true)]
async fn groups_expire_after_their_last_event() {
    let metrics = test_metrics();
    let mut r = reduce("type: reduce\ngroup_by: [k]\nexpire_after_ms: 1000\nflush_period_ms: 100");
    let event = |k: &str| json_batch(&[json!({"k": k, "n": 1})]);
    assert!(lines(r.push_batch(&event("a"), &untracked(), Instant::now(), &metrics)).is_empty());
    tokio::time::advance(Duration::from_millis(600)).await;
    assert!(lines(r.push_batch(&event("a"), &untracked(), Instant::now(), &metrics)).is_empty());
    assert!(lines(r.push_batch(&event("b"), &untracked(), Instant::now(), &metrics)).is_empty());
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(
        lines(r.expire(Instant::now())).is_empty(),
        "999 ms after the last event"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    let out = lines(r.expire(Instant::now()));
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!((&out[0]["k"], &out[0]["n"]), (&json!("a"), &json!(2)));

    let mut r = reduce("type: reduce\nend_every_period_ms: 1000\nexpire_after_ms: 60000");
    let mut flushed = Vec::new();
    for _ in 0..25 {
        flushed.extend(lines(r.push_batch(
            &event("a"),
            &untracked(),
            Instant::now(),
            &metrics,
        )));
        tokio::time::advance(Duration::from_millis(100)).await;
        flushed.extend(lines(r.expire(Instant::now())));
    }
    let counts: Vec<&Json> = flushed.iter().map(|e| &e["n"]).collect();
    assert_eq!(counts, [&json!(10), &json!(10)]);
}

/// `max_events` ends a group at that many; `max_groups` flushes the group that waited longest
/// when a new one would pass it.
#[test]
fn groups_are_bounded_in_events_and_in_number() {
    let metrics = test_metrics();
    let mut r = reduce("type: reduce\nmax_events: 3");
    let records: Vec<Json> = (0..8).map(|i| json!({"n": i})).collect();
    let out = lines(r.push_batch(
        &json_batch(&records),
        &untracked(),
        Instant::now(),
        &metrics,
    ));
    let sums: Vec<&Json> = out.iter().map(|e| &e["n"]).collect();
    assert_eq!(sums, [&json!(3), &json!(12)]);
    assert_eq!(lines(r.flush_all())[0]["n"], json!(13));

    let mut r = reduce("type: reduce\ngroup_by: [k]\nmax_groups: 2");
    let batch = json_batch(&[
        json!({"k": "a", "n": 1}),
        json!({"k": "b", "n": 1}),
        json!({"k": "a", "n": 1}),
        json!({"k": "c", "n": 1}),
    ]);
    let out = lines(r.push_batch(&batch, &untracked(), Instant::now(), &metrics));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (&out[0]["k"], &out[0]["n"]),
        (&json!("b"), &json!(1)),
        "b waited longest"
    );
    assert_eq!(r.open_groups(), 2);
}

fn poll(rx: &mut BatchStatusReceiver) -> Option<BatchStatus> {
    rx.try_status()
}

/// A source's batch is settled only when every event made of it is committed downstream:
/// events of two batches merged into one keep both pending until the merged batch's ack is
/// committed, and both get its status; a reduce that ends with a group open reports it
/// errored.
#[test]
fn acknowledgements_wait_for_the_merged_event() {
    let metrics = test_metrics();
    for status in [BatchStatus::Delivered, BatchStatus::Rejected] {
        let mut r = reduce("type: reduce\nends_when: 'exists(.last)'");
        let (fa, mut rx_a) = BatchNotifier::new_with_receiver();
        let (fb, mut rx_b) = BatchNotifier::new_with_receiver();
        let mut a = json_batch(&[json!({"n": 1}), json!({"n": 2})]);
        a.finalizer = fa;
        let mut b = json_batch(&[json!({"n": 3, "last": true}), json!({"n": 100})]);
        b.finalizer = fb;
        // As the transform's input queue delivers them: the batch and its ack.
        let (ack_a, ack_b) = (a.finalizer.ack(), b.finalizer.ack());
        let first = r.push_batch(&a, &ack_a, Instant::now(), &metrics);
        assert!(first.batches.is_empty());
        ack_a.commit(BatchStatus::Delivered);
        drop(a);
        assert_eq!(poll(&mut rx_a), None, "a's events wait in the group");
        let mut flushed = r.push_batch(&b, &ack_b, Instant::now(), &metrics);
        ack_b.commit(BatchStatus::Delivered);
        drop(b);
        let (merged, acks) = flushed.batches.remove(0);
        assert_eq!(json_lines(&merged)[0]["n"], json!(6));
        for ack in acks {
            ack.commit(BatchStatus::Delivered);
        }
        assert_eq!(
            (poll(&mut rx_a), poll(&mut rx_b)),
            (None, None),
            "until the sink commits"
        );
        let sink = merged.finalizer.ack();
        drop(merged);
        sink.commit(status);
        assert_eq!(poll(&mut rx_a), Some(status));
        // b's second event is still in an open group: b waits for it.
        assert_eq!(poll(&mut rx_b), None);
        drop(r);
        // ... and learns its worst: the open group, dropped unflushed, is an error.
        assert_eq!(
            poll(&mut rx_b),
            Some(status.max(BatchStatus::Errored)),
            "a group dropped unflushed"
        );
    }
}

/// The open groups' bytes are charged to the memory budget, and given back when they go out.
#[test]
fn open_groups_are_charged_to_the_memory_budget() {
    let metrics = test_metrics();
    let budget = MemoryBudget::new(1 << 30);
    let mut r = reduce_with(
        "type: reduce\ngroup_by: [k]\nmerge_strategies: { message: concat }",
        Some(&budget),
    );
    let records: Vec<Json> = (0..100)
        .map(|i| json!({"k": i % 10, "message": "x".repeat(1000)}))
        .collect();
    assert!(
        lines(r.push_batch(
            &json_batch(&records),
            &untracked(),
            Instant::now(),
            &metrics
        ))
        .is_empty()
    );
    assert_eq!(budget.used(), r.bytes());
    assert!(r.bytes() > 100 * 1000, "{}", r.bytes());
    let out = lines(r.flush_all());
    assert_eq!(out.len(), 10);
    assert_eq!(budget.used(), 0);
    // Under a small budget already spent, groups are flushed rather than kept.
    let small = MemoryBudget::new(64 << 10);
    let _spent = small.hold();
    _spent.grow(70 << 10);
    let mut r = reduce_with(
        "type: reduce\ngroup_by: [k]\nmerge_strategies: { message: concat }",
        Some(&small),
    );
    let out = lines(r.push_batch(
        &json_batch(&records),
        &untracked(),
        Instant::now(),
        &metrics,
    ));
    assert!(!out.is_empty());
    assert!(r.bytes() <= (64 << 10) / 4, "{}", r.bytes());
}

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use super::logs::{self, MAX_DEPTH};
use super::wire::Writer;
use super::{Code, json};
use crate::encode::encode_json;

fn any_str(w: &mut Writer, s: &str) {
    w.bytes(1, s.as_bytes());
}

fn kv(w: &mut Writer, number: u32, key: &str, value: impl FnOnce(&mut Writer)) {
    w.message(number, |w| {
        w.bytes(1, key.as_bytes());
        w.message(2, value);
    });
}

/// A request as the OpenTelemetry SDKs send one: a resource, a scope, `n` records.
fn request(n: usize) -> Vec<u8> {
    let mut w = Writer::default();
    w.message(1, |w| {
        w.message(1, |w| {
            kv(w, 1, "service.name", |w| any_str(w, "checkout"));
            kv(w, 1, "host.name", |w| any_str(w, "web-1"));
        });
        w.message(2, |w| {
            w.message(1, |w| {
                w.bytes(1, b"app.logger");
                w.bytes(2, b"1.2");
            });
            for i in 0..n {
                w.message(2, |w| {
                    w.fixed64(1, 1_700_000_000_123_456_789 + i as u64);
                    w.fixed64(11, 1_700_000_001_000_000_000);
                    w.uint(2, 17);
                    w.bytes(3, b"ERROR");
                    w.message(5, |w| any_str(w, &format!("record {i}")));
                    kv(w, 6, "n", |w| w.int(3, i as i64));
                    kv(w, 6, "ratio", |w| w.double(4, 0.5));
                    kv(w, 6, "tags", |w| {
                        w.message(5, |w| {
                            w.message(1, |w| any_str(w, "a"));
                            w.message(1, |w| w.uint(2, 1));
                        })
                    });
                    kv(w, 6, "http", |w| {
                        w.message(6, |w| kv(w, 1, "status", |w| w.int(3, 503)))
                    });
                    w.fixed32(8, 1);
                    w.bytes(
                        9,
                        &[
                            0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33,
                            0x81, 0x3f, 0xc6, 0x0c,
                        ],
                    );
                    w.bytes(10, &[0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74]);
                });
            }
        });
    });
    w.buf
}

fn lines(body: &[u8]) -> Vec<serde_json::Value> {
    let body = Bytes::copy_from_slice(body);
    logs::measure(&body).expect("measures");
    let d = logs::decode(&body, Arc::from("otel")).expect("decodes");
    d.batch
        .events
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            encode_json(&d.batch, e, &mut out);
            serde_json::from_slice(&out).expect("json line")
        })
        .collect()
}

#[test]
fn a_record_maps_to_the_documented_fields() {
    let got = lines(&request(2));
    assert_eq!(got.len(), 2);
    let e = &got[1];
    assert_eq!(e["timestamp"], "2023-11-14T22:13:20.123456790Z");
    assert_eq!(e["message"], "record 1");
    assert_eq!(e["severity"], "err");
    assert_eq!(e["hostname"], "web-1");
    assert_eq!(e["appname"], "checkout");
    assert_eq!(e["source_type"], "opentelemetry");
    assert_eq!(e["severity_number"], 17);
    assert_eq!(e["severity_text"], "ERROR");
    assert_eq!(
        e["attributes"],
        serde_json::json!({"n": 1, "ratio": 0.5, "tags": ["a", true], "http": {"status": 503}})
    );
    assert_eq!(
        e["resources"],
        serde_json::json!({"service.name": "checkout", "host.name": "web-1"})
    );
    assert_eq!(
        e["scope"],
        serde_json::json!({"name": "app.logger", "version": "1.2"})
    );
    assert_eq!(e["trace_id"], "5b8efff798038103d269b633813fc60c");
    assert_eq!(e["span_id"], "eee19b7ec3c1b174");
    assert_eq!(e["flags"], 1);
    assert_eq!(e["observed_timestamp"], "2023-11-14T22:13:21.000000000Z");
}

#[test]
fn the_measure_bounds_the_batch() {
    let body = request(50);
    let m = logs::measure(&body).expect("measures");
    let d = logs::decode(&Bytes::from(body), Arc::from("otel")).expect("decodes");
    assert_eq!(m.records, 50);
    assert!(
        m.fields >= d.batch.fields.len(),
        "{m:?} < {}",
        d.batch.fields.len()
    );
    assert_eq!(d.rejected, 0);
}

/// One walk builds what stays within the charged bound, the same batch as measuring first, and
/// counts as `measure` does (one byte less than its measure gives up); past the bound (bytes or
/// records) it gives up and keeps nothing.
#[test]
fn decoding_within_a_bound_builds_the_same_batch_or_gives_up() {
    let body = Bytes::from(request(50));
    let m = logs::measure(&body).expect("measures");
    let whole = logs::decode(&body, Arc::from("otel")).expect("decodes");
    let quick = logs::decode_within(&body, Arc::from("otel"), m.bytes(), 50)
        .expect("decodes")
        .expect("within its own measure");
    assert_eq!(quick.batch.len(), whole.batch.len());
    assert_eq!(quick.batch.fields.len(), whole.batch.fields.len());
    assert_eq!(reencode(&quick.batch), reencode(&whole.batch));
    assert!(
        logs::decode_within(&body, Arc::from("otel"), m.bytes() - 1, 50)
            .expect("decodes")
            .is_none()
    );
    assert!(
        logs::decode_within(&body, Arc::from("otel"), usize::MAX, 49)
            .expect("decodes")
            .is_none()
    );
    // A broken request is an error, not a bound exceeded.
    let cut = Bytes::copy_from_slice(&body[..body.len() - 1]);
    assert!(logs::decode_within(&cut, Arc::from("otel"), usize::MAX, usize::MAX).is_err());
}

/// A request of one resource and one scope, neither with fields, whose log records (`log_records`
/// fields, number 2) `records` writes.
fn one_scope(records: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::default();
    w.message(1, |w| w.message(2, records));
    w.buf
}

#[test]
fn a_body_of_another_type_stays_in_the_record() {
    let body = one_scope(|w| {
        w.message(2, |w| {
            w.message(5, |w| w.message(6, |w| kv(w, 1, "k", |w| any_str(w, "v"))));
        });
        w.message(2, |w| w.message(5, |w| w.int(3, 7)));
        // No body at all, no time: an event with neither.
        w.message(2, |w| w.bytes(3, b"warning"));
    });
    let got = lines(&body);
    assert_eq!(got[0]["message"], serde_json::json!({"k": "v"}));
    assert_eq!(got[1]["message"], 7);
    assert_eq!(got[2]["severity"], "warning");
    assert!(got[2].get("message").is_none());
}

/// An AnyValue of `depth` arrays, innermost a string.
fn arrays(w: &mut Writer, depth: usize) {
    if depth == 0 {
        any_str(w, "deep");
    } else {
        w.message(5, |w| w.message(1, |w| arrays(w, depth - 1)));
    }
}

/// Two records: the first with a body of `depth` nested arrays, the second a plain one.
fn nested(depth: usize) -> Vec<u8> {
    nested_in(depth, false)
}

/// As [`nested`], the arrays in the first record's body or in its attribute `deep`.
fn nested_in(depth: usize, attribute: bool) -> Vec<u8> {
    one_scope(|w| {
        w.message(2, |w| {
            if attribute {
                kv(w, 6, "deep", |w| arrays(w, depth));
            } else {
                w.message(5, |w| arrays(w, depth));
            }
        });
        w.message(2, |w| w.message(5, |w| any_str(w, "kept")));
    })
}

#[test]
fn a_record_nested_too_deep_is_rejected_and_the_rest_kept() {
    let body = Bytes::from(nested(MAX_DEPTH + 5));
    logs::measure(&body).expect("the structure is valid");
    let d = logs::decode(&body, Arc::from("otel")).expect("decodes");
    assert_eq!(d.rejected, 1);
    assert_eq!(d.batch.len(), 1);
    let ok = Bytes::from(nested(MAX_DEPTH - 2));
    assert_eq!(
        logs::decode(&ok, Arc::from("otel"))
            .expect("decodes")
            .rejected,
        0
    );
}

/// A body and an attribute nest equally far: a value at depth 64 (the top value and 63 arrays)
/// is kept, one level more is rejected, and measuring and building agree at the edge.
#[test]
fn the_depth_limit_is_the_same_for_bodies_and_attributes() {
    for attribute in [false, true] {
        for (arrays, rejected) in [(MAX_DEPTH - 1, 0), (MAX_DEPTH, 1)] {
            let body = Bytes::from(nested_in(arrays, attribute));
            let measure = logs::measure(&body).expect("the structure is valid");
            let d = logs::decode(&body, Arc::from("otel")).expect("decodes");
            assert_eq!(
                d.rejected, rejected,
                "{arrays} arrays, attribute: {attribute}"
            );
            assert_eq!(d.batch.len(), 2 - rejected);
            assert!(d.batch.fields.len() <= measure.fields, "{measure:?}");
            let quick = logs::decode_within(&body, Arc::from("otel"), usize::MAX, 10)
                .expect("decodes")
                .expect("within the bound");
            assert_eq!(quick.rejected, rejected);
        }
    }
}

/// Long strings and a long map in a body and attributes: building counts exactly the entries
/// measuring bounds, so the one walk gives up exactly where the measure passes the bound.
#[test]
fn long_values_are_counted_as_measured() {
    let long = "x".repeat(300);
    let body = Bytes::from(one_scope(|w| {
        for _ in 0..3 {
            w.message(2, |w| {
                w.message(5, |w| any_str(w, &long));
                kv(w, 6, "long", |w| any_str(w, &long));
                kv(w, 6, "short", |w| any_str(w, "s"));
                kv(w, 6, "map", |w| {
                    w.message(6, |w| {
                        for k in ["a", "b", "c"] {
                            kv(w, 1, k, |w| any_str(w, &long));
                        }
                    });
                });
            });
        }
    }));
    let measure = logs::measure(&body).expect("valid");
    let within =
        |bound: usize| logs::decode_within(&body, Arc::from("otel"), bound, 10).expect("decodes");
    let d = within(measure.bytes()).expect("within its own measure");
    assert_eq!(d.batch.len(), 3);
    assert!(d.batch.fields.len() <= measure.fields, "{measure:?}");
    assert!(within(measure.bytes() - 1).is_none(), "{measure:?}");
}

#[test]
fn truncated_and_mistyped_requests_are_refused() {
    let body = request(3);
    for cut in [1, 7, body.len() / 2, body.len() - 1] {
        assert!(logs::measure(&body[..cut]).is_err(), "cut at {cut}");
    }
    // resource_logs as a varint.
    assert!(logs::measure(&[0x08, 0x01]).is_err());
    // Unknown fields are skipped.
    let mut w = Writer::default();
    w.uint(99, 1);
    w.message(1, |w| w.bytes(77, b"x"));
    assert_eq!(logs::measure(&w.buf).expect("valid").records, 0);
}

#[test]
fn json_requests_decode_like_protobuf() {
    let body = br#"{"resourceLogs":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"checkout"}},
        {"key":"host.name","value":{"stringValue":"web-1"}}]},
      "scopeLogs":[{"scope":{"name":"app.logger","version":"1.2"},"logRecords":[
        {"timeUnixNano":"1700000000123456789","observedTimeUnixNano":1700000001000000000,
         "severityNumber":17,"severityText":"ERROR","body":{"stringValue":"record 0"},
         "attributes":[{"key":"n","value":{"intValue":"0"}},{"key":"ratio","value":{"doubleValue":0.5}},
           {"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"boolValue":true}]}}},
           {"key":"http","value":{"kvlistValue":{"values":[{"key":"status","value":{"intValue":503}}]}}}],
         "flags":1,"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"eee19b7ec3c1b174",
         "unknownField":{"ignored":true}}]}]}]}"#;
    let proto = json::logs_request(body).expect("converts");
    let from_json = lines(&proto);
    let from_proto = lines(&request(1));
    assert_eq!(from_json.len(), 1);
    let strip = |mut v: serde_json::Value| {
        v.as_object_mut().expect("object").remove("timestamp");
        v
    };
    // The protobuf request's first record has the same fields, and its time ends in ...789.
    assert_eq!(from_json[0]["timestamp"], "2023-11-14T22:13:20.123456789Z");
    assert_eq!(strip(from_json[0].clone()), strip(from_proto[0].clone()));
}

#[test]
fn severity_numbers_by_name_are_accepted() {
    let body = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[
        {"severityNumber":"SEVERITY_NUMBER_WARN"},{"severityNumber":"SEVERITY_NUMBER_ERROR3"},
        {"severityNumber":"SEVERITY_NUMBER_UNSPECIFIED"},{"severityNumber":"21"}]}]}]}"#;
    let got = lines(&json::logs_request(body).expect("converts"));
    let numbers: Vec<_> = got
        .iter()
        .map(|e| e.get("severity_number").cloned())
        .collect();
    assert_eq!(
        numbers,
        [Some(13.into()), Some(19.into()), None, Some(21.into())]
    );
    assert!(
        json::logs_request(
            br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityNumber":"LOUD"}]}]}]}"#
        )
        .is_err()
    );
}

#[test]
fn the_json_memory_bound_grows_with_the_values_not_the_bytes() {
    let zeros = format!("[{}0]", "0,".repeat(1000));
    assert!(json::memory_bound(zeros.as_bytes()) >= 1000 * 96);
    let text = format!("{{\"k\":\"{}\"}}", "x".repeat(1000));
    assert!(json::memory_bound(text.as_bytes()) < 4 * text.len());
}

#[test]
fn bad_json_names_the_field() {
    for (body, says) in [
        (
            &br#"{"resourceLogs":{}}"#[..],
            "resourceLogs is not an array",
        ),
        (
            br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"soon"}]}]}]}"#,
            "resourceLogs[0].scopeLogs[0].logRecords[0].timeUnixNano is not an integer",
        ),
        (
            br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"xyz1"}]}]}]}"#,
            "traceId is not hex",
        ),
        (
            br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"bytesValue":"%%%"}}]}]}]}"#,
            "bytesValue is not base64",
        ),
        (b"[1,2", "not JSON"),
    ] {
        let e = json::logs_request(body).expect_err("refused");
        assert!(e.0.contains(says), "{} does not say {says}", e.0);
    }
}

#[test]
fn answers_are_the_messages_the_specification_names() {
    assert!(super::logs_response(0, "", false).is_empty());
    assert_eq!(super::logs_response(0, "", true), b"{}");
    let partial = super::logs_response(2, "too deep", false);
    // partial_success (1) { rejected_log_records (1) = 2, error_message (2) = "too deep" }
    assert_eq!(
        partial,
        [&[0x0a, 12, 0x08, 2, 0x12, 8][..], b"too deep"].concat()
    );
    let s = super::status(Code::Unavailable, "busy", Some(1), false);
    assert_eq!(&s[..2], &[0x08, 14]);
    assert!(s.windows(9).any(|w| w == b"RetryInfo"));
    assert_eq!(
        super::partial_success(&partial),
        Some((2, "too deep".to_owned()))
    );
    assert_eq!(super::partial_success(&[]), None);
    assert_eq!(super::status_message(&s).as_deref(), Some("busy"));
    assert_eq!(super::status_message(b"<html>"), None);
    let j: serde_json::Value =
        serde_json::from_slice(&super::status(Code::InvalidArgument, "bad", None, true))
            .expect("json");
    assert_eq!(j, serde_json::json!({"code": 3, "message": "bad"}));
}

#[test]
fn grpc_frames_unwrap_exactly_one_message() {
    let framed = super::grpc::frame(b"abc");
    assert_eq!(super::grpc::unframe(&framed), Ok((false, &b"abc"[..])));
    assert!(super::grpc::unframe(&framed[..6]).is_err());
    assert!(super::grpc::unframe(&[framed.clone(), framed.clone()].concat()).is_err());
    assert!(super::grpc::unframe(&[2, 0, 0, 0, 0]).is_err());
    assert!(super::grpc::unframe(&[0, 0, 0]).is_err());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let body = Bytes::from(body);
        if logs::measure(&body).is_ok() {
            let _ = logs::decode(&body, Arc::from("otel"));
        }
        let _ = json::logs_request(&body);
    }

    #[test]
    fn a_mutated_request_never_panics(flip in 0usize..2000, to in any::<u8>(), cut in 0usize..2000) {
        let mut body = request(3);
        let at = flip % body.len();
        body[at] = to;
        body.truncate(cut.max(1).min(body.len()));
        let body = Bytes::from(body);
        if let Ok(m) = logs::measure(&body) {
            let d = logs::decode(&body, Arc::from("otel")).expect("what measures decodes");
            prop_assert!(d.batch.len() <= m.records);
            prop_assert!(d.batch.fields.len() <= m.fields);
        }
    }
}

#[test]
fn the_fuzz_corpus_seeds_decode() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/otlp");
    for (name, json_form) in [("protobuf", false), ("json", true)] {
        let seed = std::fs::read(dir.join(name)).expect("seed");
        let body = if json_form {
            json::logs_request(&seed[1..]).expect("the JSON seed converts")
        } else {
            seed[1..].to_vec()
        };
        let got = lines(&body);
        assert_eq!(got.len(), 2, "{name}");
        assert_eq!(
            got[0]["trace_id"], "0102030405060708090a0b0c0d0e0f10",
            "{name}"
        );
        assert_eq!(
            got[0]["attributes"]["map"],
            serde_json::json!({"k": "v"}),
            "{name}"
        );
        assert_eq!(got[1]["message"], serde_json::json!({"k": -1}), "{name}");
        assert_eq!(got[1]["severity"], "warning", "{name}");
    }
}

fn reencode(batch: &loghaul_core::EventBatch) -> Vec<u8> {
    let mut w = super::encode::LogsWriter::default();
    let mut out = Vec::new();
    for e in &batch.events {
        w.push(batch, e, &mut out);
    }
    w.finish(&mut out);
    out
}

#[test]
fn a_decoded_request_encodes_back_to_the_same_records() {
    let body = Bytes::from(request(3));
    let first = logs::decode(&body, Arc::from("otel")).expect("decodes");
    let again = reencode(&first.batch);
    // One resource and scope for all three: one group, as sent.
    let m = logs::measure(&again).expect("valid");
    assert_eq!(m.records, 3);
    assert_eq!(lines(&again), lines(&body));
    let groups = {
        let mut r = super::wire::Reader::new(&again);
        let mut n = 0;
        while r.field().expect("valid").is_some() {
            n += 1;
        }
        n
    };
    assert_eq!(groups, 1);
}

#[test]
fn syslog_events_become_records_with_a_resource_per_host_and_app() {
    use loghaul_core::{Event, EventBatch, Span, Timestamp};
    let arena = Bytes::from_static(b"web-1nginxGET /1234");
    let mut batch = EventBatch::new(arena, Arc::from("in"), "syslog");
    batch.received = Timestamp::from_nanos(1_700_000_009_000_000_000, 9);
    for (host, sev) in [((0, 5), 3u8), ((0, 5), 6), ((5, 10), 6)] {
        batch.events.push(Event {
            timestamp: Some(Timestamp::from_nanos(1_700_000_000_500_000_000, 3)),
            hostname: Span::new(host.0, host.1).into(),
            appname: Span::new(5, 10).into(),
            procid: Span::new(15, 19).into(),
            message: Span::new(10, 15).into(),
            severity: Some(sev),
            facility: Some(16),
            ..Event::default()
        });
    }
    let body = reencode(&batch);
    let got = lines(&body);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0]["message"], "GET /");
    assert_eq!(got[0]["timestamp"], "2023-11-14T22:13:20.500000000Z");
    assert_eq!(
        got[0]["observed_timestamp"],
        "2023-11-14T22:13:29.000000000Z"
    );
    assert_eq!(
        (
            got[0]["severity_number"].clone(),
            got[0]["severity"].clone()
        ),
        (17.into(), "err".into())
    );
    assert_eq!(got[0]["severity_text"], "err");
    assert_eq!(got[1]["severity_number"], 9);
    assert_eq!(got[0]["hostname"], "web-1");
    assert_eq!(got[0]["appname"], "nginx");
    assert_eq!(got[2]["hostname"], "nginx");
    assert_eq!(
        got[0]["attributes"],
        serde_json::json!({"syslog.facility": "local0", "syslog.procid": "1234"})
    );
    // The first two share host and app: one group; the third has its own.
    let mut r = super::wire::Reader::new(&body);
    let mut groups = 0;
    while r.field().expect("valid").is_some() {
        groups += 1;
    }
    assert_eq!(groups, 2);
}

#[test]
fn protobuf_to_json_and_back_keeps_every_record() {
    let proto = request(3);
    let json_form = json::from_logs_request(&proto).expect("converts");
    let back = json::logs_request(&json_form).expect("reads back");
    assert_eq!(lines(&back), lines(&proto));
    let v: serde_json::Value = serde_json::from_slice(&json_form).expect("JSON");
    let r = &v["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(r["timeUnixNano"], "1700000000123456789");
    assert_eq!(r["traceId"], "5b8efff798038103d269b633813fc60c");
    assert_eq!(r["severityNumber"], 17);
}

/// A key-value with two values, the first malformed: building keeps the last only, and still
/// refuses the request as measuring does.
#[test]
fn a_replaced_attribute_value_is_checked_too() {
    let body = Bytes::from(one_scope(|w| {
        w.message(2, |w| {
            w.message(6, |w| {
                w.bytes(1, b"k");
                // An AnyValue whose string field has a group's wire type.
                w.bytes(2, &[0x0b]);
                w.message(2, |w| any_str(w, "last"));
            });
        });
    }));
    assert!(logs::measure(&body).is_err());
    assert!(logs::decode_within(&body, Arc::from("otel"), usize::MAX, 10).is_err());
}

//! Decoder unit tests: the RFC 5424 §6.5 examples, then edge cases of both formats, checked
//! through the JSON encoder (so the expectations read like the output users see).

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use serde_json::{Value as J, json};

use super::*;
use crate::encode::encode_json;
use crate::time::days_from_civil;

/// 2024-03-15T12:00:00.123456Z: the receive time of every test event.
fn received() -> Timestamp {
    let secs = days_from_civil(2024, 3, 15) * 86_400 + 12 * 3600;
    Timestamp::from_nanos(secs * 1_000_000_000 + 123_456_000, 6)
}

fn decode_with(input: &[u8], opts: DecodeOptions) -> (EventBatch, DecodeStats) {
    let mut batch = EventBatch::new(Bytes::copy_from_slice(input), "test".into(), "syslog");
    let frames = [Frame {
        start: 0,
        end: input.len() as u32,
        truncated: false,
    }];
    let mut stats = DecodeStats::default();
    let ip = "192.0.2.7".parse().ok();
    Decoder::new(opts).decode_batch(&mut batch, &frames, received(), ip, &mut stats);
    assert_eq!(batch.events.len(), 1);
    (batch, stats)
}

fn to_json(batch: &EventBatch) -> J {
    let mut out = Vec::new();
    encode_json(batch, &batch.events[0], &mut out);
    assert_eq!(out.last(), Some(&b'\n'));
    serde_json::from_slice(&out).unwrap()
}

fn decode_json(input: &[u8], format: Format, strict: bool) -> J {
    let opts = DecodeOptions {
        format,
        strict,
        timezone: TimeZone::Utc,
    };
    to_json(&decode_with(input, opts).0)
}

/// Assert that every key of `expected` matches `actual`; a `null` expectation means "absent".
#[track_caller]
fn check(input: &str, strict: bool, expected: J) {
    check_bytes(input.as_bytes(), Format::Auto, strict, expected);
}

#[track_caller]
fn check_bytes(input: &[u8], format: Format, strict: bool, expected: J) {
    let actual = decode_json(input, format, strict);
    for (k, v) in expected.as_object().unwrap() {
        let got = actual.get(k).unwrap_or(&J::Null);
        assert_eq!(
            got,
            v,
            "field {k:?} of {:?}\nfull output: {actual}",
            String::from_utf8_lossy(input)
        );
    }
}

const PARSE_ERROR: &str = "parse_error";

fn flags(v: &J) -> Vec<String> {
    v.get("flags")
        .and_then(J::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[track_caller]
fn rejected(input: &str, strict: bool) {
    let v = decode_json(input.as_bytes(), Format::Auto, strict);
    assert!(
        flags(&v).iter().any(|f| f == PARSE_ERROR),
        "{input:?} accepted: {v}"
    );
    assert_eq!(
        v["message"],
        J::from(input.trim_end_matches(['\n', '\r', '\0']))
    );
    assert_eq!(v["timestamp"], "2024-03-15T12:00:00.123456Z");
}

// ---- RFC 5424 §6.5 examples ----

#[test]
fn rfc5424_example_1() {
    let input = "<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - \u{feff}'su root' failed for lonvick on /dev/pts/8";
    for strict in [false, true] {
        let v = decode_json(input.as_bytes(), Format::Rfc5424, strict);
        assert_eq!(
            v,
            json!({"timestamp":"2003-10-11T22:14:15.003Z","hostname":"mymachine.example.com","appname":"su",
                   "msgid":"ID47","facility":"auth","severity":"crit","version":1,
                   "message":"'su root' failed for lonvick on /dev/pts/8","source_ip":"192.0.2.7","source_type":"syslog"})
        );
    }
}

#[test]
fn rfc5424_example_2() {
    let input = "<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time to make the do-nuts.";
    check(
        input,
        true,
        json!({"timestamp":"2003-08-24T12:14:15.000003Z","hostname":"192.0.2.1","appname":"myproc","procid":"8710",
               "msgid":null,"structured_data":null,"facility":"local4","severity":"notice",
               "message":"%% It's time to make the do-nuts.","flags":null}),
    );
}

#[test]
fn rfc5424_example_3() {
    let input = "<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] \u{feff}An application event log entry...";
    check(
        input,
        true,
        json!({"appname":"evntslog","procid":null,"msgid":"ID47",
               "structured_data":{"exampleSDID@32473":{"iut":"3","eventSource":"Application","eventID":"1011"}},
               "message":"An application event log entry...","flags":null}),
    );
}

#[test]
fn rfc5424_example_4() {
    let input = "<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"][examplePriority@32473 class=\"high\"]";
    let (batch, _) = decode_with(
        input.as_bytes(),
        DecodeOptions {
            strict: true,
            ..DecodeOptions::default()
        },
    );
    let ev = batch.events[0];
    assert_eq!(batch.sd_elements_of(&ev).len(), 2);
    assert_eq!(ev.message.or_empty().len(), 0);
    check(
        input,
        true,
        json!({"structured_data":{"exampleSDID@32473":{"iut":"3","eventSource":"Application","eventID":"1011"},
                                  "examplePriority@32473":{"class":"high"}},"message":""}),
    );
}

// ---- RFC 5424 edge cases ----

#[test]
fn rfc5424_nil_everything() {
    check(
        "<13>1 - - - - - -",
        true,
        json!({"hostname":null,"appname":null,"procid":null,"msgid":null,
        "structured_data":null,"message":"","facility":"user","severity":"notice","timestamp":"2024-03-15T12:00:00.123456Z"}),
    );
}

#[test]
fn rfc5424_sd_escapes_resolved_and_flagged() {
    let input = r#"<13>1 - - - - - [x@1 a="q\"t" b="b\\s" c="br\]" d="keep\n"] m"#;
    check(
        input,
        true,
        json!({"structured_data":{"x@1":{"a":"q\"t","b":"b\\s","c":"br]","d":"keep\\n"}},"message":"m"}),
    );
    let (batch, _) = decode_with(input.as_bytes(), DecodeOptions::default());
    let escaped: Vec<bool> = batch.sd_params.iter().map(|p| p.escaped).collect();
    assert_eq!(escaped, vec![true, true, true, true]);
    assert_eq!(batch.str(batch.sd_params[0].value), br#"q\"t"#);
}

#[test]
fn rfc5424_sd_value_with_spaces_and_unescaped_bracket() {
    check(
        r#"<13>1 - - - - - [x a="one two"] m"#,
        true,
        json!({"structured_data":{"x":{"a":"one two"}}}),
    );
    rejected(r#"<13>1 - - - - - [x a="b]c"] m"#, true);
    check(
        r#"<13>1 - - - - - [x a="b]c"] m"#,
        false,
        json!({"structured_data":{"x":{"a":"b]c"}},"message":"m"}),
    );
}

#[test]
fn rfc5424_repeated_param_becomes_array() {
    check(
        r#"<1>1 - - - - - [id k="a" k="b" j="c"] msg"#,
        true,
        json!({"structured_data":{"id":{"k":["a","b"],"j":"c"}}}),
    );
}

#[test]
fn rfc5424_duplicate_sd_id_strict_rejects_lenient_merges() {
    rejected(
        "<165>1 2003-10-11T22:14:15.003Z example.com evnts - ID27 [id1][id1]",
        true,
    );
    check(
        r#"<1>1 - - - - - [a x="1"][a y="2"] m"#,
        false,
        json!({"structured_data":{"a":{"x":"1","y":"2"}}}),
    );
}

#[test]
fn rfc5424_sd_without_params_and_empty_value() {
    check(
        r#"<1>1 - - - - - [a][b c=""] m"#,
        true,
        json!({"structured_data":{"a":{},"b":{"c":""}}}),
    );
}

#[test]
fn rfc5424_bad_sd_is_kept_as_message_when_lenient() {
    let input = r#"<1>1 - - - - - [ x a="1"] tail"#;
    rejected(input, true);
    check(
        input,
        false,
        json!({"structured_data":null,"message":"[ x a=\"1\"] tail","flags":null}),
    );
    check(
        r#"<1>1 - - - - - [x a="unterminated"#,
        false,
        json!({"message":"[x a=\"unterminated"}),
    );
}

#[test]
fn rfc5424_space_around_equals_is_lenient_only() {
    let input = r#"<1>1 - - - - - [x a= "1" b ="2"] m"#;
    rejected(input, true);
    check(
        input,
        false,
        json!({"structured_data":{"x":{"a":"1","b":"2"}},"message":"m"}),
    );
}

#[test]
fn rfc5424_one_space_before_msg_only() {
    check("<1>1 - - - - - -  two", true, json!({"message":" two"}));
    check("<1>1 - - - - - -", true, json!({"message":""}));
    check("<1>1 - - - - - - ", true, json!({"message":""}));
}

#[test]
fn rfc5424_msg_may_hold_newlines_but_trailer_is_dropped() {
    check("<1>1 - - - - - - x\ny\r\n", true, json!({"message":"x\ny"}));
}

#[test]
fn rfc5424_bom_only_message() {
    check("<1>1 - - - - - - \u{feff}", true, json!({"message":""}));
}

#[test]
fn rfc5424_offsets_and_fraction_digits() {
    check(
        "<1>1 1985-04-12T19:20:50.52-04:00 h - - - -",
        true,
        json!({"timestamp":"1985-04-12T23:20:50.52Z"}),
    );
    check(
        "<1>1 2018-12-31T23:59:59.999999-23:59 h - - - -",
        true,
        json!({"timestamp":"2019-01-01T23:58:59.999999Z"}),
    );
    check(
        "<1>1 2003-10-11T22:14:15+05:30 h - - - -",
        true,
        json!({"timestamp":"2003-10-11T16:44:15Z"}),
    );
}

#[test]
fn rfc5424_nanosecond_fraction_is_lenient_only() {
    let input = "<1>1 2003-08-24T05:14:15.000000003-07:00 host - - - -";
    rejected(input, true);
    check(
        input,
        false,
        json!({"timestamp":"2003-08-24T12:14:15.000000003Z","hostname":"host"}),
    );
}

#[test]
fn rfc5424_bad_timestamp_falls_back_to_received_when_lenient() {
    for ts in [
        "2003-09-31T22:14:15.003Z",
        "2006-01-02T15:04:05Z+07:00",
        "yesterday",
    ] {
        let input = format!("<29>1 {ts} h a - - - m");
        rejected(&input, true);
        check(
            &input,
            false,
            json!({"timestamp":"2024-03-15T12:00:00.123456Z","hostname":"h","message":"m","flags":null}),
        );
    }
}

#[test]
fn rfc5424_zoneless_timestamp_is_lenient_and_local() {
    let input = b"<29>1 2003-10-11T22:14:15 h a - - - m";
    let opts = DecodeOptions {
        timezone: TimeZone::Fixed(-3600),
        ..DecodeOptions::default()
    };
    assert_eq!(
        to_json(&decode_with(input, opts).0)["timestamp"],
        "2003-10-11T23:14:15Z"
    );
    rejected("<29>1 2003-10-11T22:14:15 h a - - - m", true);
}

#[test]
fn rfc5424_pri_rules() {
    rejected("<192>1 - - - - - -", true);
    rejected("<192>1 - - - - - -", false);
    rejected("<002>1 - - - - - -", true);
    check(
        "<002>1 - - - - - -",
        false,
        json!({"facility":"kern","severity":"crit"}),
    );
    check(
        "<191>1 - - - - - -",
        true,
        json!({"facility":"local7","severity":"debug"}),
    );
    check(
        "<0>1 - - - - - -",
        true,
        json!({"facility":"kern","severity":"emerg"}),
    );
}

#[test]
fn rfc5424_version_is_kept() {
    check(
        "<78>5 2016-01-15T00:04:01+00:00 host1 CROND 10391 - [sdid] some_message",
        true,
        json!({"version":5,"appname":"CROND"}),
    );
    rejected("<78>0 - - - - - -", true);
}

#[test]
fn rfc5424_field_length_limits_are_strict_only() {
    let long = "x".repeat(49);
    let input = format!("<1>1 - h {long} - - -");
    rejected(&input, true);
    check(&input, false, json!({"appname":long}));
    let host = "h".repeat(256);
    rejected(&format!("<1>1 - {host} - - - -"), true);
}

#[test]
fn rfc5424_truncated_header_is_an_error() {
    rejected("<39>1 2018-05-15T20:56:58+00:00 -web1west -", true);
    rejected("<39>1 2018-05-15T20:56:58+00:00 -web1west -", false);
    rejected("<39>1 - host app proc msgid", false);
}

#[test]
fn rfc5424_non_ascii_header_is_strict_error() {
    let input = "<1>1 - hôst - - - -";
    rejected(input, true);
    check(input, false, json!({"hostname":"hôst"}));
}

#[test]
fn rfc5424_invalid_utf8_message_is_flagged_and_replaced() {
    let input = b"<1>1 - - - - - - fond\xfc";
    let v = decode_json(input, Format::Auto, true);
    assert_eq!(v["message"], "fond\u{FFFD}");
    assert_eq!(flags(&v), vec!["invalid_utf8"]);
}

#[test]
fn rfc5424_format_forced_on_bsd_line_is_an_error() {
    let input = b"<34>Oct 11 22:14:15 mymachine su: hi";
    let v = decode_json(input, Format::Rfc5424, false);
    assert_eq!(flags(&v), vec![PARSE_ERROR]);
}

// ---- RFC 3164 edge cases ----

#[test]
fn bsd_classic_with_pid() {
    check(
        "<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed",
        true,
        json!({"timestamp":"2023-10-11T22:14:15Z","hostname":"mymachine","appname":"su","procid":"123",
               "facility":"auth","severity":"crit","message":"'su root' failed","version":null,"flags":null}),
    );
}

/// Network devices that put a space after the PRI, or double the spaces between the fields,
/// keep their timestamp, hostname and tag (as rsyslog and syslog-ng read them); the message
/// keeps its own spaces. Strict mode does not take them.
#[test]
fn bsd_space_after_pri_and_doubled_spaces_between_fields() {
    check(
        "<132> Apr  4 10:11:12 router1 kernel: link down",
        false,
        // Received 2024-03-15: April 4 is last year's.
        json!({"timestamp":"2023-04-04T10:11:12Z","hostname":"router1","appname":"kernel",
               "facility":"local0","severity":"warning","message":"link down"}),
    );
    check(
        "<132>Apr  4 10:11:12  router1   kernel:  two spaces kept",
        false,
        json!({"hostname":"router1","appname":"kernel","message":" two spaces kept"}),
    );
    check(
        "<132>  Apr  4 10:11:12 router1 kernel[7]: both",
        false,
        json!({"hostname":"router1","appname":"kernel","procid":"7","message":"both"}),
    );
    // No timestamp after the space: no header either, the words are the message.
    check(
        "<13> plain words here",
        false,
        json!({"hostname":null,"appname":null,"message":"plain words here"}),
    );
    rejected("<132> Apr  4 10:11:12 router1 kernel: link down", true);
}

#[test]
fn bsd_year_rolls_back_for_future_dates() {
    // Received 2024-03-15: a Dec 31 event is from last December, a Mar 16 event is (clock skew) this year.
    check(
        "<13>Dec 31 23:59:59 h a: m",
        false,
        json!({"timestamp":"2023-12-31T23:59:59Z"}),
    );
    check(
        "<13>Mar 16 11:00:00 h a: m",
        false,
        json!({"timestamp":"2024-03-16T11:00:00Z"}),
    );
    check(
        "<13>Mar 17 11:00:00 h a: m",
        false,
        json!({"timestamp":"2023-03-17T11:00:00Z"}),
    );
}

#[test]
fn bsd_timezone_option_applies_to_zoneless_times() {
    let opts = DecodeOptions {
        timezone: TimeZone::Fixed(2 * 3600),
        ..DecodeOptions::default()
    };
    let v = to_json(&decode_with(b"<13>Mar 10 10:00:00 h a: m", opts).0);
    assert_eq!(v["timestamp"], "2024-03-10T08:00:00Z");
    let v = to_json(&decode_with(b"<13>2024-03-10T10:00:00 h a: m", opts).0);
    assert_eq!(v["timestamp"], "2024-03-10T08:00:00Z");
    let v = to_json(&decode_with(b"<13>2024-03-10T10:00:00Z h a: m", opts).0);
    assert_eq!(v["timestamp"], "2024-03-10T10:00:00Z");
}

#[test]
fn bsd_space_padded_and_unpadded_day() {
    check(
        "<13>Mar  6 16:57:54 h a: m",
        true,
        json!({"timestamp":"2024-03-06T16:57:54Z"}),
    );
    check(
        "<13>Jan 5 10:01:00 h a: m",
        false,
        json!({"timestamp":"2024-01-05T10:01:00Z","hostname":"h"}),
    );
    rejected("<13>Jan 5 10:01:00 h a: m", true);
}

#[test]
fn bsd_year_after_day_and_fractional_seconds() {
    check(
        "<175>Oct 16 2009 23:47:31 hostname tag[1234] This is a message",
        false,
        json!({"timestamp":"2009-10-16T23:47:31Z","hostname":"hostname","appname":"tag","procid":"1234","message":"This is a message"}),
    );
    check(
        "<13>Jan  8 19:46:03.295 h a: m",
        false,
        json!({"timestamp":"2024-01-08T19:46:03.295Z"}),
    );
}

#[test]
fn bsd_iso_timestamps() {
    check(
        "<13>2003-10-11T22:14:15.003Z host app[7]: m",
        false,
        json!({"timestamp":"2003-10-11T22:14:15.003Z","hostname":"host","appname":"app","procid":"7","message":"m"}),
    );
    check(
        "<13>2003-10-11T22:14:15-02:00 host app: m",
        false,
        json!({"timestamp":"2003-10-12T00:14:15Z"}),
    );
}

#[test]
fn bsd_cisco_forms() {
    check(
        "<189>52: *Mar  1 00:00:32.123: %SYS-5-CONFIG_I: Configured from console",
        false,
        json!({"timestamp":"2024-03-01T00:00:32.123Z","hostname":null,"appname":"%SYS-5-CONFIG_I",
               "message":"Configured from console","facility":"local7","severity":"notice"}),
    );
    check(
        "<189>269614: myhostname: Apr 11 10:02:08: %LINEPROTO-5-UPDOWN: Line protocol up",
        false,
        json!({"hostname":"myhostname","appname":"%LINEPROTO-5-UPDOWN","message":"Line protocol up"}),
    );
    check(
        "<32>Mar 05 2011 22:21:02: %ASA-6-302013: Built inbound",
        false,
        json!({"timestamp":"2011-03-05T22:21:02Z","hostname":null,"appname":"%ASA-6-302013","message":"Built inbound"}),
    );
}

#[test]
fn bsd_missing_pri_is_user_notice() {
    check(
        "Oct 11 22:14:15 host app: hi",
        false,
        json!({"facility":"user","severity":"notice","hostname":"host","message":"hi"}),
    );
    check(
        "just some text",
        false,
        json!({"facility":"user","severity":"notice","hostname":null,"appname":null,"message":"just some text","flags":null}),
    );
    rejected("just some text", true);
}

#[test]
fn bsd_missing_timestamp_uses_received_and_no_hostname() {
    check(
        "<13>myapp: started",
        false,
        json!({"timestamp":"2024-03-15T12:00:00.123456Z","hostname":null,"appname":"myapp","message":"started"}),
    );
    check(
        "<13>myapp[42]: started",
        false,
        json!({"appname":"myapp","procid":"42","message":"started"}),
    );
    check(
        "<13>see http://x.y now",
        false,
        json!({"appname":null,"message":"see http://x.y now"}),
    );
    rejected("<13>myapp: started", true);
}

#[test]
fn bsd_no_hostname_when_first_word_is_a_tag() {
    check(
        "<133>Jan 13 16:33:35 haproxy[73411]: Proxy started.",
        true,
        json!({"hostname":null,"appname":"haproxy","procid":"73411","message":"Proxy started."}),
    );
    check(
        "<13>Jan 13 16:33:35 su: hi",
        true,
        json!({"hostname":null,"appname":"su","message":"hi"}),
    );
}

#[test]
fn bsd_ipv6_hostname() {
    check(
        "<13>Jan 13 16:33:35 fe80::1 app: hi",
        true,
        json!({"hostname":"fe80::1","appname":"app","message":"hi"}),
    );
}

#[test]
fn bsd_tag_variants() {
    check(
        "<13>Jan 13 16:33:35 h tag: m",
        true,
        json!({"appname":"tag","procid":null,"message":"m"}),
    );
    check(
        "<13>Jan 13 16:33:35 h tag:m",
        true,
        json!({"appname":"tag","message":"m"}),
    );
    check(
        "<13>Jan 13 16:33:35 h tag[]: m",
        true,
        json!({"appname":"tag","procid":null,"message":"m"}),
    );
    check(
        "<13>Jan 13 16:33:35 h tag[12 m",
        true,
        json!({"appname":"tag[12","procid":null,"message":"m"}),
    );
    check(
        "<13>Jan 13 16:33:35 h tag m",
        true,
        json!({"appname":"tag","message":"m"}),
    );
    check(
        "<13>Jan 13 16:33:35 h tag:  two",
        true,
        json!({"appname":"tag","message":" two"}),
    );
    check(
        "<0>Sep 17 04:05:37 host.domain.tld monit[2340:0]: subsvc[12345]: x",
        true,
        json!({"appname":"monit","procid":"2340:0","message":"subsvc[12345]: x"}),
    );
}

#[test]
fn bsd_truncated_headers() {
    check(
        "<14>Aug 30 23:00:05",
        false,
        json!({"timestamp":"2023-08-30T23:00:05Z","hostname":null,"appname":null,"message":""}),
    );
    check(
        "<14>Jan  6 2009 15:22:26 localhost",
        false,
        json!({"hostname":"localhost","appname":null,"message":""}),
    );
    check(
        "<14>Jan  6 15:22:26 localhost app",
        true,
        json!({"hostname":"localhost","appname":"app","message":""}),
    );
    check(
        "<14>",
        false,
        json!({"facility":"user","severity":"info","message":""}),
    );
    rejected("<14>Aug 30 23:00:05", true);
    rejected("<14>", true);
}

#[test]
fn bsd_invalid_pri() {
    for input in [
        "<>Feb 28 12:00:00 h a: m",
        "<1011>Mar 27 19:06:53 h a: m",
        "<0123>Nov 14 12:34:56 h f",
        "<13",
        "<1a>x",
    ] {
        rejected(input, true);
        rejected(input, false);
        check(input, false, json!({"severity":"debug","facility":null}));
    }
}

#[test]
fn bsd_invalid_dates_keep_fields_but_use_received() {
    check(
        "<13>Feb 30 10:00:00 h a: m",
        false,
        json!({"timestamp":"2024-03-15T12:00:00.123456Z","hostname":"h","appname":"a","message":"m"}),
    );
    check(
        "<13>Feb 29 10:00:00 h a: m",
        false,
        json!({"timestamp":"2024-02-29T10:00:00Z"}),
    );
}

#[test]
fn bsd_uppercase_month_is_lenient_only() {
    check(
        "<167>AUG 10 22:18:24 host tag msg",
        false,
        json!({"timestamp":"2023-08-10T22:18:24Z","hostname":"host","appname":"tag"}),
    );
    rejected("<167>AUG 10 22:18:24 host tag msg", true);
}

#[test]
fn bsd_extra_spaces_are_tolerated_when_lenient() {
    check(
        "<13>Jan 13 16:33:35  host app: m",
        false,
        json!({"hostname":"host","appname":"app","message":"m"}),
    );
}

#[test]
fn bsd_control_characters_are_escaped_in_json() {
    check(
        "<13>Jan 13 16:33:35 h a: tab\there \"q\" back\\slash \u{1}",
        true,
        json!({"message":"tab\there \"q\" back\\slash \u{1}"}),
    );
}

#[test]
fn bsd_invalid_utf8_is_flagged_not_fatal() {
    let v = decode_json(b"<13>Jan 13 16:33:35 h\xff a: m\xfe", Format::Auto, true);
    assert_eq!(v["hostname"], "h\u{FFFD}");
    assert_eq!(v["message"], "m\u{FFFD}");
    assert_eq!(flags(&v), vec!["invalid_utf8"]);
}

#[test]
fn bsd_forced_on_5424_line_still_yields_an_event() {
    check_bytes(
        b"<13>1 - - - - - - hi",
        Format::Rfc3164,
        false,
        json!({"facility":"user","message":"1 - - - - - - hi"}),
    );
}

// ---- Raw, batches, flags ----

#[test]
fn raw_keeps_the_whole_frame() {
    check_bytes(
        b"<13>1 - - - - - - hi\r\n",
        Format::Raw,
        true,
        json!({"message":"<13>1 - - - - - - hi","facility":null,"hostname":null,"timestamp":"2024-03-15T12:00:00.123456Z","source_ip":"192.0.2.7"}),
    );
}

#[test]
fn one_event_per_frame_with_truncation_and_stats() {
    let arena = b"<13>1 - - - - - - a<1011>bad\xff<13>Jan 13 16:33:35 h a: m";
    let mut batch = EventBatch::new(Bytes::copy_from_slice(arena), "t".into(), "syslog");
    let frames = [
        Frame {
            start: 0,
            end: 19,
            truncated: false,
        },
        Frame {
            start: 19,
            end: 29,
            truncated: false,
        },
        Frame {
            start: 29,
            end: arena.len() as u32,
            truncated: true,
        },
        // A bogus range is clamped, never a panic.
        Frame {
            start: 90,
            end: 10_000,
            truncated: false,
        },
    ];
    let mut stats = DecodeStats::default();
    let mut d = Decoder::new(DecodeOptions::default());
    d.decode_batch(&mut batch, &frames, received(), None, &mut stats);
    assert_eq!(batch.events.len(), 4);
    assert_eq!(
        stats,
        DecodeStats {
            parse_errors: 1,
            invalid_utf8: 1
        }
    );
    let e = &batch.events;
    assert_eq!(batch.str(e[0].message.or_empty()), b"a");
    assert!(e[1].flags.contains(Flags::PARSE_ERROR) && e[1].flags.contains(Flags::INVALID_UTF8));
    assert!(e[2].flags.contains(Flags::TRUNCATED));
    assert_eq!(e[2].appname.get().map(|s| batch.str(s)), Some(&b"a"[..]));
    assert!(e[3].message.or_empty().is_empty());
    let mut out = Vec::new();
    encode_json(&batch, &e[1], &mut out);
    let v: J = serde_json::from_slice(&out).unwrap();
    assert_eq!(flags(&v), vec!["parse_error", "invalid_utf8"]);
}

#[test]
fn failed_sd_parse_leaves_no_side_table_rows() {
    let (batch, _) = decode_with(
        br#"<1>1 - - - - - [a x="1"][b y="2" oops] m"#,
        DecodeOptions::default(),
    );
    assert!(batch.sd_elements.is_empty() && batch.sd_params.is_empty());
    assert_eq!(batch.events[0].structured_data, None);
}

/// `timezone: local` follows a daylight-saving change while one decoder runs: the offset is
/// the zone's at each receive time. The zone must come from `TZ` before the first lookup, and
/// setting the environment in-process is unsound with other test threads, so the test runs
/// itself again as a child process with `TZ` set (a POSIX rule: no tz database needed).
#[test]
fn local_zone_follows_a_dst_change_between_batches() {
    const NAME: &str = "syslog::tests::local_zone_follows_a_dst_change_between_batches";
    if std::env::var_os("LOGHAUL_TEST_TZ_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env("TZ", "CET-1CEST,M3.5.0,M10.5.0/3")
            .env("LOGHAUL_TEST_TZ_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child run failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    // 2026-03-29 01:00Z: central Europe goes from +01:00 to +02:00 (02:00 local becomes 03:00).
    let switch = days_from_civil(2026, 3, 29) * 86_400 + 3600;
    let at = |secs: i64| Timestamp::from_nanos(secs * 1_000_000_000, 0);
    let opts = DecodeOptions {
        timezone: TimeZone::Local,
        ..DecodeOptions::default()
    };
    let mut decoder = Decoder::new(opts);
    let mut decode = |line: &[u8], received: Timestamp| {
        let mut batch = EventBatch::new(Bytes::copy_from_slice(line), "test".into(), "syslog");
        let frames = [Frame {
            start: 0,
            end: line.len() as u32,
            truncated: false,
        }];
        decoder.decode_batch(
            &mut batch,
            &frames,
            received,
            None,
            &mut DecodeStats::default(),
        );
        to_json(&batch)["timestamp"].clone()
    };
    // Half a minute before the change, 01:59:30 local is 00:59:30Z; just after it, 03:00:30
    // local is 01:00:30Z. A decoder that kept its first offset would give 02:00:30Z.
    assert_eq!(
        decode(b"<13>Mar 29 01:59:30 h app: before", at(switch - 30)),
        "2026-03-29T00:59:30Z"
    );
    assert_eq!(
        decode(b"<13>Mar 29 03:00:30 h app: after", at(switch + 30)),
        "2026-03-29T01:00:30Z"
    );
}

/// A batch reserves its structured-data tables for what the last batch held per frame: after a
/// batch of frames with three elements and six params each, the next one needs no growth, and
/// after a batch without structured data, the next one reserves none.
#[test]
fn sd_tables_are_reserved_for_the_last_batches_shape() {
    let line = b"<14>1 2024-03-15T12:00:00Z h a - - [a@1 x=\"1\" y=\"2\"][b@1 x=\"1\" y=\"2\"][c@1 x=\"1\" y=\"2\"] m\n";
    let input: Vec<u8> = line.repeat(100);
    let frames: Vec<Frame> = (0..100)
        .map(|k| Frame {
            start: (k * line.len()) as u32,
            end: ((k + 1) * line.len() - 1) as u32,
            truncated: false,
        })
        .collect();
    let mut decoder = Decoder::new(DecodeOptions::default());
    let decode = |decoder: &mut Decoder, input: &[u8], frames: &[Frame]| {
        let mut batch = EventBatch::new(Bytes::copy_from_slice(input), "test".into(), "syslog");
        let mut stats = DecodeStats::default();
        decoder.decode_batch(&mut batch, frames, received(), None, &mut stats);
        batch
    };
    let first = decode(&mut decoder, &input, &frames);
    assert_eq!((first.sd_elements.len(), first.sd_params.len()), (300, 600));
    // Reserved for one element and two params per frame, so the first batch had to grow.
    assert!(first.sd_elements.capacity() > 300);
    let second = decode(&mut decoder, &input, &frames);
    assert_eq!(
        (second.sd_elements.len(), second.sd_params.len()),
        (300, 600)
    );
    assert_eq!(second.sd_elements.capacity(), 300);
    assert_eq!(second.sd_params.capacity(), 600);
    // A batch with no structured data, then one reserves nothing.
    let whole = [Frame {
        start: 0,
        end: 9,
        truncated: false,
    }];
    decode(&mut decoder, b"<14>hello", &whole);
    let third = decode(&mut decoder, &input, &frames[..1]);
    assert_eq!(third.sd_elements.len(), 3);
    assert!(third.sd_elements.capacity() < 300);
}

//! The `http` sink's configuration errors, each at the line of the key that causes it (the
//! `tests` module beside them checks what valid values become).

use crate::config::testing::{error_at, ok, sink, warning_at};

const BASE: &str = "type: http\nuri: \"http://127.0.0.1:9/in\"\n";

#[test]
fn required_keys_types_and_enums() {
    error_at(&sink("type: http"), "  x:", "missing required field `uri`");
    error_at(&sink("type: http\nuri: [a]"), "uri", "expected");
    error_at(
        &sink(&format!("{BASE}encoding: xml")),
        "encoding",
        "unknown value `xml`",
    );
    error_at(
        &sink(&format!("{BASE}compression: lz4")),
        "compression",
        "unknown value `lz4`",
    );
    error_at(&sink(&format!("{BASE}headers: [a]")), "headers", "expected");
    error_at(&sink(&format!("{BASE}url: x")), "url:", "unknown key `url`");
}

#[test]
fn uris() {
    error_at(
        &sink("type: http\nuri: \"ftp://h/in\""),
        "uri",
        "is not an http:// or https:// URI",
    );
    error_at(
        &sink("type: http\nuri: \"/in\""),
        "uri",
        "is not an http:// or https:// URI",
    );
    let t = sink("type: http\nuri: \"{{ scheme }}://h/in\"");
    error_at(
        &t,
        "uri",
        "a templated URI must start with a literal http://",
    );
    error_at(
        &sink("type: http\nuri: \"http://h/{{ appname\""),
        "uri",
        "unterminated",
    );
    let t = sink("type: http\nuri: \"http://h:{{ appname }}x/in\"");
    error_at(&t, "uri", "no valid request can be made");
    warning_at(
        &sink("type: http\nuri: \"http://h/{{ appnme }}\""),
        "uri",
        "appname",
    );
    let t = sink(&format!(
        "{BASE}healthcheck_uri: \"https://127.0.0.1:9/health\""
    ));
    error_at(
        &t,
        "healthcheck_uri",
        "`healthcheck_uri` is not an http:// URI with a host",
    );
    let t = sink(&format!("{BASE}healthcheck_uri: \"not a uri\""));
    error_at(&t, "healthcheck_uri", "is not an http:// URI");
}

#[test]
fn out_of_range_values() {
    for key in [
        "max_events: 0",
        "max_bytes: 0",
        "timeout: 0s",
        "request_timeout: 0s",
        "concurrency: 0",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &sink(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    let t = sink(&format!("{BASE}concurrency: lots"));
    error_at(
        &t,
        "concurrency",
        "is neither a number of requests nor `adaptive`",
    );
    let t = sink(&format!(
        "{BASE}concurrency: adaptive\nmax_concurrency: 5000"
    ));
    error_at(&t, "max_concurrency", "must be at most 1024");
    let t = sink(&format!("{BASE}concurrency: adaptive\nmax_concurrency: 0"));
    error_at(
        &t,
        "max_concurrency",
        "`max_concurrency` must be greater than 0",
    );
    let t = sink(&format!("{BASE}concurrency: 4\nmax_concurrency: 8"));
    warning_at(
        &t,
        "max_concurrency",
        "only applies with `concurrency: adaptive`",
    );
}

#[test]
fn credentials_and_headers() {
    for auth in [
        "bearer: \"\"",
        "username: u",
        "password: p",
        "bearer: t\nusername: u\npassword: p",
    ] {
        error_at(
            &sink(&format!("{BASE}{auth}")),
            auth.lines().next().unwrap_or_default(),
            "give either a non-empty `bearer` token, or `username` and `password`",
        );
    }
    ok(&sink(&format!("{BASE}username: u\npassword: p")));
    let t = sink(&format!("{BASE}headers:\n  \"bad name\": x"));
    error_at(&t, "bad name", "is not a valid header name");
    let t = sink(&format!("{BASE}headers:\n  Content-Length: \"9\""));
    error_at(&t, "Content-Length", "is set by the sink itself");
    let t = sink(&format!(
        "{BASE}bearer: t\nheaders:\n  Authorization: \"Bearer u\""
    ));
    error_at(&t, "Authorization", "both here and by `bearer`");
    let t = sink(&format!("{BASE}headers:\n  X-A: a\n  x-a: b"));
    error_at(&t, "x-a", "given twice");
    let t = sink(&format!("{BASE}headers:\n  X-A: \"a\\u0001b\""));
    error_at(&t, "X-A", "is not a valid header value");
    let t = sink(&format!("{BASE}headers:\n  X-A: \"{{{{ appname\""));
    error_at(&t, "X-A", "unterminated");
}

#[test]
fn tls_needs_https() {
    let t = sink(&format!("{BASE}tls: {{ ca: /c.pem }}"));
    error_at(&t, "tls:", "`tls` needs an https:// `uri`");
    let t = sink("type: http\nuri: \"https://127.0.0.1:9/in\"\ntls:\n  ca: /no/such/ca.pem");
    error_at(&t, "ca:", "cannot read");
}

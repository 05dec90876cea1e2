//! OTLP/JSON (protobuf's JSON mapping with OTLP's deviations: hex trace and span ids, integer
//! enums, 64-bit integers as strings or numbers) into the binary form, so that both encodings
//! take the one decoder in [`super::logs`].
//!
//! Keys are lowerCamelCase as the specification requires; the original snake_case names are
//! accepted too, as protobuf's own JSON parsers accept them, and so are severity numbers given
//! by name (`SEVERITY_NUMBER_WARN`), as protobuf's generic JSON printers write them. Unknown
//! keys are ignored, as the specification requires.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::wire::{Reader, Wire, WireError, Writer};

/// Why a JSON request does not convert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError(pub String);

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JsonError {}

/// The most memory [`logs_request`] takes for `body`: the parsed document (a `serde_json`
/// value of at most 96 bytes, with its map entry, for each `,` `:` `[` `{`, and its strings'
/// bytes) and the protobuf it writes (never longer than the JSON). A server charges this
/// before converting: a small body of `0,0,0,…` parses into far more than its size.
pub fn memory_bound(body: &[u8]) -> usize {
    let tokens = body
        .iter()
        .filter(|&&b| matches!(b, b',' | b':' | b'[' | b'{'))
        .count()
        + 1;
    tokens
        .saturating_mul(96)
        .saturating_add(body.len().saturating_mul(2))
}

/// Deepest nesting of JSON the conversion follows (serde_json stops at 128 levels itself).
const MAX_DEPTH: usize = 100;

/// An `ExportLogsServiceRequest` in OTLP/JSON as binary protobuf.
///
/// # Errors
///
/// The body is not JSON, or a field has a type the schema does not allow; the message names
/// the field's path.
pub fn logs_request(body: &[u8]) -> Result<Vec<u8>, JsonError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|e| JsonError(format!("not JSON: {e}")))?;
    let root = object(&root, "the request")?;
    // Checked whole first: the writers below run in closures that cannot return errors.
    check(root)?;
    let mut w = Writer::default();
    for (i, rl) in list(root, &["resourceLogs", "resource_logs"], "resourceLogs")?
        .iter()
        .enumerate()
    {
        let path = format!("resourceLogs[{i}]");
        let rl = object(rl, &path)?;
        w.message(1, |w| resource_logs(w, rl, &path));
    }
    Ok(w.buf)
}

fn get<'a>(o: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| o.get(*n))
        .filter(|v| !v.is_null())
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, JsonError> {
    v.as_object()
        .ok_or_else(|| JsonError(format!("{path} is not an object")))
}

fn list<'a>(
    o: &'a Map<String, Value>,
    names: &[&str],
    path: &str,
) -> Result<&'a [Value], JsonError> {
    match get(o, names) {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(JsonError(format!("{path} is not an array"))),
    }
}

/// A 64-bit integer written as a number or a decimal string.
fn integer(v: &Value, path: &str) -> Result<i128, JsonError> {
    let n = match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    n.ok_or_else(|| JsonError(format!("{path} is not an integer")))
}

fn uint64(o: &Map<String, Value>, names: &[&str], path: &str) -> Result<u64, JsonError> {
    match get(o, names) {
        None => Ok(0),
        Some(v) => u64::try_from(integer(v, path)?)
            .map_err(|_| JsonError(format!("{path} is out of range"))),
    }
}

fn string<'a>(o: &'a Map<String, Value>, names: &[&str], path: &str) -> Result<&'a str, JsonError> {
    match get(o, names) {
        None => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(JsonError(format!("{path} is not a string"))),
    }
}

fn hex(s: &str, path: &str) -> Result<Vec<u8>, JsonError> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return Err(JsonError(format!("{path} is not hex")));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| JsonError(format!("{path} is not hex")))
}

/// Checks every field the writers below read, so that writing cannot fail.
fn check(root: &Map<String, Value>) -> Result<(), JsonError> {
    for (i, rl) in list(root, &["resourceLogs", "resource_logs"], "resourceLogs")?
        .iter()
        .enumerate()
    {
        let path = format!("resourceLogs[{i}]");
        let rl = object(rl, &path)?;
        if let Some(r) = get(rl, &["resource"]) {
            let r = object(r, &format!("{path}.resource"))?;
            check_attributes(r, &format!("{path}.resource"))?;
            uint64(
                r,
                DROPPED,
                &format!("{path}.resource.droppedAttributesCount"),
            )?;
        }
        for (j, sl) in list(
            rl,
            &["scopeLogs", "scope_logs"],
            &format!("{path}.scopeLogs"),
        )?
        .iter()
        .enumerate()
        {
            let path = format!("{path}.scopeLogs[{j}]");
            let sl = object(sl, &path)?;
            if let Some(s) = get(sl, &["scope"]) {
                let sp = format!("{path}.scope");
                let s = object(s, &sp)?;
                string(s, &["name"], &format!("{sp}.name"))?;
                string(s, &["version"], &format!("{sp}.version"))?;
                check_attributes(s, &sp)?;
                uint64(s, DROPPED, &format!("{sp}.droppedAttributesCount"))?;
            }
            string(sl, SCHEMA, &format!("{path}.schemaUrl"))?;
            for (k, lr) in list(
                sl,
                &["logRecords", "log_records"],
                &format!("{path}.logRecords"),
            )?
            .iter()
            .enumerate()
            {
                let path = format!("{path}.logRecords[{k}]");
                let lr = object(lr, &path)?;
                check_record(lr, &path)?;
            }
        }
        string(rl, SCHEMA, &format!("{path}.schemaUrl"))?;
    }
    Ok(())
}

const DROPPED: &[&str] = &["droppedAttributesCount", "dropped_attributes_count"];
const SCHEMA: &[&str] = &["schemaUrl", "schema_url"];

fn check_record(lr: &Map<String, Value>, path: &str) -> Result<(), JsonError> {
    for names in [
        &["timeUnixNano", "time_unix_nano"][..],
        &["observedTimeUnixNano", "observed_time_unix_nano"],
        DROPPED,
        &["flags"],
    ] {
        uint64(lr, names, &format!("{path}.{}", names[0]))?;
    }
    if let Some(n) = get(lr, &["severityNumber", "severity_number"]) {
        severity_number(n).ok_or_else(|| {
            JsonError(format!(
                "{path}.severityNumber is neither an integer nor a SEVERITY_NUMBER_ name"
            ))
        })?;
    }
    string(
        lr,
        &["severityText", "severity_text"],
        &format!("{path}.severityText"),
    )?;
    string(
        lr,
        &["eventName", "event_name"],
        &format!("{path}.eventName"),
    )?;
    for names in [&["traceId", "trace_id"][..], &["spanId", "span_id"]] {
        hex(
            string(lr, names, &format!("{path}.{}", names[0]))?,
            &format!("{path}.{}", names[0]),
        )?;
    }
    if let Some(b) = get(lr, &["body"]) {
        check_any(b, &format!("{path}.body"), 1)?;
    }
    check_attributes(lr, path)
}

fn check_attributes(o: &Map<String, Value>, path: &str) -> Result<(), JsonError> {
    for (i, kv) in list(o, &["attributes"], &format!("{path}.attributes"))?
        .iter()
        .enumerate()
    {
        check_kv(kv, &format!("{path}.attributes[{i}]"), 1)?;
    }
    Ok(())
}

fn check_kv(kv: &Value, path: &str, depth: usize) -> Result<(), JsonError> {
    let kv = object(kv, path)?;
    string(kv, &["key"], &format!("{path}.key"))?;
    match get(kv, &["value"]) {
        Some(v) => check_any(v, &format!("{path}.value"), depth),
        None => Ok(()),
    }
}

fn check_any(v: &Value, path: &str, depth: usize) -> Result<(), JsonError> {
    if depth > MAX_DEPTH {
        return Err(JsonError(format!(
            "{path} nests deeper than {MAX_DEPTH} levels"
        )));
    }
    let o = object(v, path)?;
    if let Some(s) = get(o, &["stringValue", "string_value"]) {
        s.as_str()
            .ok_or_else(|| JsonError(format!("{path}.stringValue is not a string")))?;
    }
    if let Some(b) = get(o, &["boolValue", "bool_value"]) {
        b.as_bool()
            .ok_or_else(|| JsonError(format!("{path}.boolValue is not a boolean")))?;
    }
    if let Some(i) = get(o, &["intValue", "int_value"]) {
        let n = integer(i, &format!("{path}.intValue"))?;
        i64::try_from(n).map_err(|_| JsonError(format!("{path}.intValue is out of range")))?;
    }
    if let Some(d) = get(o, &["doubleValue", "double_value"]) {
        double(d).ok_or_else(|| JsonError(format!("{path}.doubleValue is not a number")))?;
    }
    if let Some(b) = get(o, &["bytesValue", "bytes_value"]) {
        let s = b
            .as_str()
            .ok_or_else(|| JsonError(format!("{path}.bytesValue is not a string")))?;
        base64_bytes(s).ok_or_else(|| JsonError(format!("{path}.bytesValue is not base64")))?;
    }
    if let Some(a) = get(o, &["arrayValue", "array_value"]) {
        let ap = format!("{path}.arrayValue");
        let a = object(a, &ap)?;
        for (i, item) in list(a, &["values"], &ap)?.iter().enumerate() {
            check_any(item, &format!("{ap}.values[{i}]"), depth + 1)?;
        }
    }
    if let Some(m) = get(o, &["kvlistValue", "kvlist_value"]) {
        let mp = format!("{path}.kvlistValue");
        let m = object(m, &mp)?;
        for (i, kv) in list(m, &["values"], &mp)?.iter().enumerate() {
            check_kv(kv, &format!("{mp}.values[{i}]"), depth + 1)?;
        }
    }
    Ok(())
}

/// `SeverityNumber`: an integer as OTLP/JSON requires, or the enum's name as protobuf's
/// generic JSON mapping writes it (`SEVERITY_NUMBER_WARN`), which senders built on a protobuf
/// library's JSON printer send.
fn severity_number(v: &Value) -> Option<i64> {
    if let Value::String(s) = v
        && let Some(name) = s.strip_prefix("SEVERITY_NUMBER_")
    {
        let (level, step) = match name.as_bytes().last() {
            Some(d @ b'2'..=b'4') => (&name[..name.len() - 1], i64::from(d - b'1')),
            _ => (name, 0),
        };
        let base = match level {
            "UNSPECIFIED" if step == 0 => return Some(0),
            "TRACE" => 1,
            "DEBUG" => 5,
            "INFO" => 9,
            "WARN" => 13,
            "ERROR" => 17,
            "FATAL" => 21,
            _ => return None,
        };
        return Some(base + step);
    }
    i32::try_from(integer(v, "").ok()?).ok().map(i64::from)
}

/// A double: a number, or one of the strings protobuf's JSON mapping uses for what JSON
/// numbers cannot say.
fn double(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            s => s.parse().ok(),
        },
        _ => None,
    }
}

fn base64_bytes(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s))
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(s))
        .ok()
}

// The writers below run after `check`: a value they cannot read is one `check` refused.

fn resource_logs(w: &mut Writer, rl: &Map<String, Value>, _path: &str) {
    if let Some(Value::Object(r)) = get(rl, &["resource"]) {
        w.message(1, |w| {
            attributes(w, r, 1);
            let dropped = uint64(r, DROPPED, "").unwrap_or(0);
            if dropped != 0 {
                w.uint(2, dropped);
            }
        });
    }
    for sl in list(rl, &["scopeLogs", "scope_logs"], "").unwrap_or(&[]) {
        if let Value::Object(sl) = sl {
            w.message(2, |w| scope_logs(w, sl));
        }
    }
    let schema = string(rl, SCHEMA, "").unwrap_or("");
    if !schema.is_empty() {
        w.bytes(3, schema.as_bytes());
    }
}

fn scope_logs(w: &mut Writer, sl: &Map<String, Value>) {
    if let Some(Value::Object(s)) = get(sl, &["scope"]) {
        w.message(1, |w| {
            for (n, name) in [(1, "name"), (2, "version")] {
                let v = string(s, &[name], "").unwrap_or("");
                if !v.is_empty() {
                    w.bytes(n, v.as_bytes());
                }
            }
            attributes(w, s, 3);
            let dropped = uint64(s, DROPPED, "").unwrap_or(0);
            if dropped != 0 {
                w.uint(4, dropped);
            }
        });
    }
    for lr in list(sl, &["logRecords", "log_records"], "").unwrap_or(&[]) {
        if let Value::Object(lr) = lr {
            w.message(2, |w| log_record(w, lr));
        }
    }
    let schema = string(sl, SCHEMA, "").unwrap_or("");
    if !schema.is_empty() {
        w.bytes(3, schema.as_bytes());
    }
}

fn log_record(w: &mut Writer, lr: &Map<String, Value>) {
    let time = uint64(lr, &["timeUnixNano", "time_unix_nano"], "").unwrap_or(0);
    if time != 0 {
        w.fixed64(1, time);
    }
    if let Some(n) = get(lr, &["severityNumber", "severity_number"]) {
        let n = severity_number(n).unwrap_or(0);
        if n != 0 {
            w.int(2, n);
        }
    }
    for (n, names) in [
        (3, &["severityText", "severity_text"][..]),
        (12, &["eventName", "event_name"]),
    ] {
        let v = string(lr, names, "").unwrap_or("");
        if !v.is_empty() {
            w.bytes(n, v.as_bytes());
        }
    }
    if let Some(b) = get(lr, &["body"]) {
        w.message(5, |w| any_value(w, b));
    }
    attributes(w, lr, 6);
    let dropped = uint64(lr, DROPPED, "").unwrap_or(0);
    if dropped != 0 {
        w.uint(7, dropped);
    }
    let flags = uint64(lr, &["flags"], "").unwrap_or(0);
    if flags != 0 {
        w.fixed32(8, flags as u32);
    }
    for (n, names) in [
        (9, &["traceId", "trace_id"][..]),
        (10, &["spanId", "span_id"]),
    ] {
        let id = hex(string(lr, names, "").unwrap_or(""), "").unwrap_or_default();
        if !id.is_empty() {
            w.bytes(n, &id);
        }
    }
    let observed =
        uint64(lr, &["observedTimeUnixNano", "observed_time_unix_nano"], "").unwrap_or(0);
    if observed != 0 {
        w.fixed64(11, observed);
    }
}

fn attributes(w: &mut Writer, o: &Map<String, Value>, number: u32) {
    for kv in list(o, &["attributes"], "").unwrap_or(&[]) {
        if let Value::Object(kv) = kv {
            w.message(number, |w| key_value(w, kv));
        }
    }
}

fn key_value(w: &mut Writer, kv: &Map<String, Value>) {
    let key = string(kv, &["key"], "").unwrap_or("");
    if !key.is_empty() {
        w.bytes(1, key.as_bytes());
    }
    if let Some(v) = get(kv, &["value"]) {
        w.message(2, |w| any_value(w, v));
    }
}

fn any_value(w: &mut Writer, v: &Value) {
    let Value::Object(o) = v else { return };
    if let Some(Value::String(s)) = get(o, &["stringValue", "string_value"]) {
        w.bytes(1, s.as_bytes());
    } else if let Some(Value::Bool(b)) = get(o, &["boolValue", "bool_value"]) {
        w.uint(2, u64::from(*b));
    } else if let Some(i) = get(o, &["intValue", "int_value"]) {
        w.int(3, integer(i, "").unwrap_or(0) as i64);
    } else if let Some(d) = get(o, &["doubleValue", "double_value"]) {
        w.double(4, double(d).unwrap_or(0.0));
    } else if let Some(Value::Object(a)) = get(o, &["arrayValue", "array_value"]) {
        w.message(5, |w| {
            for item in list(a, &["values"], "").unwrap_or(&[]) {
                w.message(1, |w| any_value(w, item));
            }
        });
    } else if let Some(Value::Object(m)) = get(o, &["kvlistValue", "kvlist_value"]) {
        w.message(6, |w| {
            for kv in list(m, &["values"], "").unwrap_or(&[]) {
                if let Value::Object(kv) = kv {
                    w.message(1, |w| key_value(w, kv));
                }
            }
        });
    } else if let Some(Value::String(s)) = get(o, &["bytesValue", "bytes_value"]) {
        w.bytes(7, &base64_bytes(s).unwrap_or_default());
    }
}

/// An `ExportLogsServiceRequest` in binary protobuf as OTLP/JSON: what a sink sends a receiver
/// that takes JSON (ids in hex, 64-bit integers as strings, enums as integers, bytes in
/// base64), the inverse of [`logs_request`].
///
/// # Errors
///
/// The protobuf is malformed.
pub fn from_logs_request(proto: &[u8]) -> Result<Vec<u8>, super::wire::WireError> {
    let r = Reader::new(proto);
    let mut resource_logs = Vec::new();
    let mut it = r;
    while let Some((n, w)) = it.field()? {
        if let (1, Wire::Len(a, b)) = (n, w) {
            resource_logs.push(resource_logs_json(it.nested(a, b))?);
        }
    }
    Ok(serde_json::json!({ "resourceLogs": resource_logs })
        .to_string()
        .into_bytes())
}

fn text(r: &Reader<'_>, a: usize, b: usize) -> Value {
    Value::String(String::from_utf8_lossy(r.bytes(a, b)).into_owned())
}

fn resource_logs_json(mut r: Reader<'_>) -> Result<Value, WireError> {
    let mut o = Map::new();
    let mut scopes = Vec::new();
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Len(a, b)) => {
                let mut res = r.nested(a, b);
                let mut m = Map::new();
                let mut attrs = Vec::new();
                while let Some((n, w)) = res.field()? {
                    match (n, w) {
                        (1, Wire::Len(x, y)) => attrs.push(key_value_json(res.nested(x, y), 0)?),
                        (2, Wire::Varint(v)) => {
                            m.insert("droppedAttributesCount".into(), v.into());
                        }
                        _ => {}
                    }
                }
                m.insert("attributes".into(), Value::Array(attrs));
                o.insert("resource".into(), Value::Object(m));
            }
            (2, Wire::Len(a, b)) => scopes.push(scope_logs_json(r.nested(a, b))?),
            (3, Wire::Len(a, b)) => {
                o.insert("schemaUrl".into(), text(&r, a, b));
            }
            _ => {}
        }
    }
    o.insert("scopeLogs".into(), Value::Array(scopes));
    Ok(Value::Object(o))
}

fn scope_logs_json(mut r: Reader<'_>) -> Result<Value, WireError> {
    let mut o = Map::new();
    let mut records = Vec::new();
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Len(a, b)) => {
                let mut s = r.nested(a, b);
                let mut m = Map::new();
                let mut attrs = Vec::new();
                while let Some((n, w)) = s.field()? {
                    match (n, w) {
                        (1, Wire::Len(x, y)) => {
                            m.insert("name".into(), text(&s, x, y));
                        }
                        (2, Wire::Len(x, y)) => {
                            m.insert("version".into(), text(&s, x, y));
                        }
                        (3, Wire::Len(x, y)) => attrs.push(key_value_json(s.nested(x, y), 0)?),
                        (4, Wire::Varint(v)) => {
                            m.insert("droppedAttributesCount".into(), v.into());
                        }
                        _ => {}
                    }
                }
                if !attrs.is_empty() {
                    m.insert("attributes".into(), Value::Array(attrs));
                }
                o.insert("scope".into(), Value::Object(m));
            }
            (2, Wire::Len(a, b)) => records.push(log_record_json(r.nested(a, b))?),
            (3, Wire::Len(a, b)) => {
                o.insert("schemaUrl".into(), text(&r, a, b));
            }
            _ => {}
        }
    }
    o.insert("logRecords".into(), Value::Array(records));
    Ok(Value::Object(o))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn log_record_json(mut r: Reader<'_>) -> Result<Value, WireError> {
    let mut o = Map::new();
    let mut attrs = Vec::new();
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Fixed64(v)) => {
                o.insert("timeUnixNano".into(), v.to_string().into());
            }
            (11, Wire::Fixed64(v)) => {
                o.insert("observedTimeUnixNano".into(), v.to_string().into());
            }
            (2, Wire::Varint(v)) => {
                o.insert("severityNumber".into(), (v as i32).into());
            }
            (3, Wire::Len(a, b)) => {
                o.insert("severityText".into(), text(&r, a, b));
            }
            (5, Wire::Len(a, b)) => {
                o.insert("body".into(), any_value_json(r.nested(a, b), 0)?);
            }
            (6, Wire::Len(a, b)) => attrs.push(key_value_json(r.nested(a, b), 0)?),
            (7, Wire::Varint(v)) => {
                o.insert("droppedAttributesCount".into(), v.into());
            }
            (8, Wire::Fixed32(v)) => {
                o.insert("flags".into(), v.into());
            }
            (9, Wire::Len(a, b)) => {
                o.insert("traceId".into(), hex_of(r.bytes(a, b)).into());
            }
            (10, Wire::Len(a, b)) => {
                o.insert("spanId".into(), hex_of(r.bytes(a, b)).into());
            }
            (12, Wire::Len(a, b)) => {
                o.insert("eventName".into(), text(&r, a, b));
            }
            _ => {}
        }
    }
    if !attrs.is_empty() {
        o.insert("attributes".into(), Value::Array(attrs));
    }
    Ok(Value::Object(o))
}

fn key_value_json(mut r: Reader<'_>, depth: usize) -> Result<Value, WireError> {
    let mut o = Map::new();
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Len(a, b)) => {
                o.insert("key".into(), text(&r, a, b));
            }
            (2, Wire::Len(a, b)) => {
                o.insert("value".into(), any_value_json(r.nested(a, b), depth)?);
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

fn any_value_json(mut r: Reader<'_>, depth: usize) -> Result<Value, WireError> {
    if depth > MAX_DEPTH {
        return Err(WireError {
            offset: r.offset(),
            what: "a value nests too deep",
        });
    }
    let mut o = Map::new();
    while let Some((n, w)) = r.field()? {
        o.clear();
        match (n, w) {
            (1, Wire::Len(a, b)) => {
                o.insert("stringValue".into(), text(&r, a, b));
            }
            (2, Wire::Varint(v)) => {
                o.insert("boolValue".into(), (v != 0).into());
            }
            (3, Wire::Varint(v)) => {
                o.insert("intValue".into(), (v as i64).to_string().into());
            }
            (4, Wire::Fixed64(v)) => {
                let f = f64::from_bits(v);
                let value = serde_json::Number::from_f64(f).map_or_else(
                    || {
                        Value::String(
                            if f.is_nan() {
                                "NaN"
                            } else if f > 0.0 {
                                "Infinity"
                            } else {
                                "-Infinity"
                            }
                            .into(),
                        )
                    },
                    Value::Number,
                );
                o.insert("doubleValue".into(), value);
            }
            (7, Wire::Len(a, b)) => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(r.bytes(a, b));
                o.insert("bytesValue".into(), encoded.into());
            }
            (5, Wire::Len(a, b)) => {
                let mut list = r.nested(a, b);
                let mut values = Vec::new();
                while let Some((m, w)) = list.field()? {
                    if let (1, Wire::Len(x, y)) = (m, w) {
                        values.push(any_value_json(list.nested(x, y), depth + 1)?);
                    }
                }
                o.insert("arrayValue".into(), serde_json::json!({ "values": values }));
            }
            (6, Wire::Len(a, b)) => {
                let mut list = r.nested(a, b);
                let mut values = Vec::new();
                while let Some((m, w)) = list.field()? {
                    if let (1, Wire::Len(x, y)) = (m, w) {
                        values.push(key_value_json(list.nested(x, y), depth + 1)?);
                    }
                }
                o.insert(
                    "kvlistValue".into(),
                    serde_json::json!({ "values": values }),
                );
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into fuzz/corpus/<target>/ from the repository's own test
inputs: the syslog vectors of crates/loghaul-codec, the multiline logs of tests/data, the embedded
default config, tests/broken/, the examples of docs/configuration.md, and a few forward-protocol
requests and HTTP bodies built here. Each target's header bytes (see its fuzz_targets/*.rs) come
first. Seeds are named by a hash of their content, as libFuzzer names what it adds.

Usage: python3 fuzz/seeds.py   (from anywhere; only adds files)
"""
import base64
import gzip
import hashlib
import json
import os
import re
import struct
import subprocess

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


# --- syslog: the codec's vectors ---------------------------------------------------------------
vectors = [json.loads(l) for l in read("crates/loghaul-codec/tests/data/syslog-vectors.jsonl").splitlines() if l.strip()]


def vector_bytes(v):
    return base64.b64decode(v["input_b64"]) if "input_b64" in v else v["input"].encode()


for v in vectors:
    data = vector_bytes(v)
    if v["framing"] == "none":
        put("rfc5424" if v["format"] == "rfc5424" else "rfc3164", data)
    else:
        # framing: max_length (u16 LE, taken % 512) then two chunk sizes (% 64 + 1).
        put("framing", struct.pack("<H", 480) + bytes([6, 12]) + data)

# Newline streams with long lines, cut at a small max_length.
for path in ("tests/data/multiline/java.log", "tests/data/multiline/python.log"):
    put("framing", struct.pack("<H", 120) + bytes([30, 1]) + read(path)[:2048])
put("framing", struct.pack("<H", 8) + bytes([2, 5]) + b"<13>short\nthis line is longer than eight\r\n\n12 <1>counted\n3 abc")

# --- forward protocol: requests in each mode, one gzip and one zstd -----------------------------


def mp(v):
    """A minimal msgpack encoder (enough for the seeds)."""
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack("b", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return b"\xd9" + bytes([len(b)]) + b if len(b) < 256 else b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, bytes):
        return b"\xc4" + bytes([len(v)]) + v if len(v) < 256 else b"\xc5" + struct.pack(">H", len(v)) + v
    if isinstance(v, EventTime):
        return b"\xd7\x00" + struct.pack(">II", v.secs, v.nanos)
    if isinstance(v, list):
        return (bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))) + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        return (bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))) + b"".join(
            mp(k) + mp(x) for k, x in v.items()
        )
    raise TypeError(v)


class EventTime:
    def __init__(self, secs, nanos):
        self.secs, self.nanos = secs, nanos


record = {"message": "hello", "host": "web-1", "n": 42, "f": 1.5, "ok": True, "nested": {"a": [1, None, "x"]}}
entries = [[1700000000, record], [EventTime(1700000001, 500), {"message": "second", "level": "warn"}]]
packed = b"".join(mp(e) for e in entries)
zstd_packed = subprocess.run(["zstd", "-q", "-c"], input=packed, stdout=subprocess.PIPE, check=True).stdout
requests = [
    mp(["app.message", 1700000000, record]),
    mp(["app.message", EventTime(1700000000, 123), record, {"chunk": "Y2h1bmsx"}]),
    mp(["app.forward", entries, {"chunk": "Y2h1bmsy", "size": 2}]),
    mp(["app.packed", packed, {"size": 2}]),
    mp(["app.gzip", gzip.compress(packed, mtime=0), {"compressed": "gzip", "size": 2}]),
    mp(["app.zstd", zstd_packed, {"compressed": "zstd", "size": 2}]),
]
# forward: the first byte picks the read size (% 97 + 1); several requests on one stream too.
for i, r in enumerate(requests):
    put("forward", bytes([i * 13 % 97]) + r)
put("forward", bytes([3]) + b"".join(requests[:4]))

# --- HTTP bodies ------------------------------------------------------------------------------
# First byte: bits 0-1 format (0 JSON, 1 NDJSON, 2 text), bits 2-3 compression (0 none, 1 and 2
# as sent, 3 compressed by the target), bit 4 zstd (else gzip), bit 5 tag, bit 6 extras.
JSON, NDJSON, TEXT = 0, 1, 2
GZIP, ZSTD_SENT, ROUND = 1 << 2, (2 << 2) | 0x10, 3 << 2
TAG, EXTRA = 0x20, 0x40
obj = json.dumps({"message": "user logged in", "user": {"id": 7, "roles": ["a", "b"]}, "ms": 12.5, "ok": True, "none": None}).encode()
arr = json.dumps([{"message": "one", "n": 1}, {"message": "two", "n": -2, "big": 18446744073709551615}, {"x": {"y": {"z": [1, 2, [3]]}}}]).encode()
nd = b'{"message":"a","level":"info"}\n\n{"message":"b","tags":["x","y"]}\r\n{"n":1e300}\n'
text = b"plain line one\r\nline two\n\nline three with \xff invalid utf-8\n"
put("http_body", bytes([JSON]) + obj)
put("http_body", bytes([JSON | TAG | EXTRA]) + arr)
put("http_body", bytes([JSON]) + b'{"message":"esc \\u00e9 \\ud83d\\ude00 \\n\\t\\"q\\"","message":"dup"}')
put("http_body", bytes([NDJSON | EXTRA]) + nd)
put("http_body", bytes([TEXT | TAG]) + text)
put("http_body", bytes([JSON | GZIP]) + gzip.compress(arr, mtime=0))
put("http_body", bytes([NDJSON | ZSTD_SENT]) + subprocess.run(["zstd", "-q", "-c"], input=nd, stdout=subprocess.PIPE, check=True).stdout)
put("http_body", bytes([TEXT | ROUND]) + text)
put("http_body", bytes([JSON]) + b"[" * 200 + b"]" * 200)

# --- configs ----------------------------------------------------------------------------------
# First byte % 3: '0' YAML, '1' TOML, '2' JSON.
put("config", b"0" + read("src/config/default.yaml"))
for name in ("cycle", "bad_template", "bad_timezone", "framing_on_udp", "port_collision", "unknown_key", "syntax_error", "unset_variable", "dangling_input", "wrong_type"):
    put("config", b"0" + read(f"tests/broken/{name}.yaml"))
doc = read("docs/configuration.md").decode()
for lang, body in re.findall(r"```(yaml|toml|json)\n(.*?)```", doc, re.S):
    put("config", {"yaml": b"0", "toml": b"1", "json": b"2"}[lang] + body.encode())
put("config", b"0sources:\n  in: {type: syslog, mode: tcp, address: \"${HOST}:${PORT}\", max_length: ${SIZE}}\n"
    b"transforms:\n  f: {type: filter, inputs: [in], min_severity: warn, facilities: [local0, 4]}\n"
    b"sinks:\n  out: {type: file, inputs: [f], path: \"${DIR:-./x}/%Y/{{ appname }}.jsonl\"}\n"
    b"  anchors: &a {type: console, inputs: [in]}\n  again: *a\n")
put("config", b"1[sources.in]\ntype = \"fluent\"\nshared_key = \"${file:/run/secrets/token}\"\n"
    b"tls = { cert = \"/etc/loghaul/server.crt\", key = \"${file:/nonexistent}\" }\n"
    b"[sinks.out]\ntype = \"http\"\ninputs = [\"in\"]\nuri = \"https://example.invalid/logs\"\n")
# The config target's fake file system holds /fuzz/cert.pem, /fuzz/key.pem and /fuzz/ca.pem
# (fuzz_targets/config.rs): TLS that validates, and the components the server has beyond syslog.
put("config", b"0sources:\n"
    b"  tls_in: {type: syslog, mode: tcp, address: \"127.0.0.1:6514\", tls: {cert: /fuzz/cert.pem, key: /fuzz/key.pem, ca: /fuzz/ca.pem, verify_client: true, min_version: \"1.3\"}}\n"
    b"  files: {type: file, include: [\"/var/log/*.log\"], exclude: [\"*.gz\"], multiline: {start_pattern: \"^\\\\S\", condition_pattern: \"^\\\\s\", mode: continue_through}}\n"
    b"  topics: {type: kafka, bootstrap_servers: \"k:9092\", group_id: g, topics: [logs, \"^app-.*\"]}\n"
    b"  web: {type: http_server, address: \"127.0.0.1:8080\", paths: [/logs], auth: {bearer: t}, tls: {cert: /fuzz/cert.pem, key: /fuzz/key.pem}}\n"
    b"sinks:\n"
    b"  up: {type: fluent, inputs: [tls_in, files], servers: [{address: \"agg:24224\"}], shared_key: k, tls: {ca: /fuzz/ca.pem}}\n"
    b"  k: {type: kafka, inputs: [topics], bootstrap_servers: \"k:9092\", topic: \"logs-{{ appname }}\", acks: all, headers: {X-Host: \"{{ hostname }}\"}}\n"
    b"  h: {type: http, inputs: [web], uri: \"https://c.example/{{ appname }}\", tls: {ca: /fuzz/ca.pem}, retry: {max_attempts: 3}, buffer: {type: memory, max_events: 1000}}\n")
put("config", b"2{\"sources\": {\"in\": {\"type\": \"fluent\", \"tls\": {\"cert\": \"/fuzz/cert.pem\", \"key\": \"/etc/missing.key\"}}},"
    b" \"sinks\": {\"out\": {\"type\": \"kafka\", \"inputs\": [\"in\"], \"bootstrap_servers\": \"k:9092\", \"topic\": \"t\", \"acks\": 1}}}")

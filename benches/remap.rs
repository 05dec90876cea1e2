//! The remap transform's cost per batch: the lab's `transform` program (parse key=value pairs,
//! rename, delete, add) on the fast path and on the VRL runtime, over the same batch of
//! RFC 3164 lines of the lab's shape (nine pairs, a long quoted note) decoded as the syslog
//! source decodes them; and the lab's route and the file sink's JSON encoding on the remap's
//! output.
//!
//! `cargo bench --bench remap`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loghaul::config::Config;
use loghaul::metrics::ComponentMetrics;
use loghaul::transforms::TransformConfig;
use loghaul::transforms::remap::{RemapConfig, remap_batch};
use loghaul::transforms::route::{RouteConfig, decide};
use loghaul::transforms::vrl::Runner;
use loghaul_codec::{DecodeOptions, DecodeStats, Decoder, Frame};
use loghaul_config::{ComponentKind, ConfigFormat};
use loghaul_core::{EventBatch, Timestamp};

/// The binary's allocator, so that what a batch's new tables cost is what the server pays.
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const PROGRAM: &str =
    ". |= parse_key_value!(.message)\n.user_name = del(.user)\ndel(.session)\n.pipeline = \"lab\"";
const EVENTS: usize = 1000;

fn transform(body: &str, read: &str) -> TransformConfig {
    let text = format!(
        "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:5514\" }}\n\
         transforms:\n  x:\n    inputs: [in]\n{}\
         sinks:\n  out: {{ type: blackhole, inputs: [{read}] }}\n",
        body.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    let config = Config::from_str_with_vars(&text, ConfigFormat::Yaml, "bench.yaml", &|_| None)
        .unwrap_or_else(|e| panic!("{e}"));
    config
        .transform("x")
        .map(|t| t.config.clone())
        .unwrap_or_else(|| panic!("no transform"))
}

fn remap(fast_path: bool) -> RemapConfig {
    let body = format!(
        "type: remap\nfast_path: {fast_path}\nsource: {}",
        serde_json::to_string(PROGRAM).unwrap_or_default()
    );
    match transform(&body, "x") {
        TransformConfig::Remap(r) => r,
        _ => panic!("a remap"),
    }
}

fn batch() -> EventBatch {
    let mut arena = Vec::new();
    let mut frames = Vec::new();
    for i in 0..EVENTS {
        let start = arena.len() as u32;
        let pri = if i % 5 == 0 { 11 } else { 14 };
        arena.extend_from_slice(
            format!(
                "<{pri}>May  6 07:08:09 host{} app[{}]: gen=1 seq={i:010} t=1795781700616562 user=u{i} action=login status=200 latency_ms={} session={:016x} note=\"ok 200 bytes 404 cache opened user miss worker cache served 503 GET cache disk\"",
                i % 16,
                i % 1000,
                i % 97,
                i * 7919
            )
            .as_bytes(),
        );
        frames.push(Frame {
            start,
            end: arena.len() as u32,
            truncated: false,
        });
    }
    let mut batch = EventBatch::new(Bytes::from(arena), "in".into(), "syslog");
    Decoder::new(DecodeOptions::default()).decode_batch(
        &mut batch,
        &frames,
        Timestamp::now(),
        Some(
            "127.0.0.1"
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
        ),
        &mut DecodeStats::default(),
    );
    batch
}

fn bench(c: &mut Criterion) {
    let batch = batch();
    let metrics = ComponentMetrics::detached("x", ComponentKind::Transform, "remap");
    let mut group = c.benchmark_group("remap");
    group.throughput(Throughput::Elements(EVENTS as u64));
    for (name, fast) in [("fast_path", true), ("vrl_runtime", false)] {
        let config = remap(fast);
        let mut runner = Runner::new(vrl::compiler::TimeZone::Local);
        group.bench_function(name, |b| {
            b.iter(|| black_box(remap_batch(&config, "x", &mut runner, &batch, &metrics)))
        });
    }
    group.finish();
    // The route as the lab runs it: on the remap's output (whose records carry the pairs), with
    // the lab's condition.
    let remapped = remap_batch(
        &remap(true),
        "x",
        &mut Runner::new(vrl::compiler::TimeZone::Local),
        &batch,
        &metrics,
    )
    .out;
    let route = match transform(
        "type: route\nroute:\n  errors: '.severity == \"emerg\" || .severity == \"alert\" || .severity == \"crit\" || .severity == \"err\"'",
        "x.errors, x._unmatched",
    ) {
        TransformConfig::Route(r) => r,
        _ => panic!("a route"),
    };
    let route: RouteConfig = route;
    // The file sink's JSON lines of the remap's output: records of the pairs, a new key and a
    // literal value among them.
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(EVENTS as u64));
    let mut out = Vec::with_capacity(EVENTS * 1024);
    group.bench_function("json_after_remap", |b| {
        b.iter(|| {
            out.clear();
            for e in &remapped.events {
                loghaul_codec::encode_json(&remapped, e, &mut out);
            }
            black_box(out.len())
        })
    });
    group.finish();
    let mut group = c.benchmark_group("route");
    group.throughput(Throughput::Elements(EVENTS as u64));
    let mut runner = Runner::new(vrl::compiler::TimeZone::Local);
    group.bench_function("severity_after_remap", |b| {
        b.iter(|| black_box(decide(&route, &mut runner, &remapped, &metrics)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

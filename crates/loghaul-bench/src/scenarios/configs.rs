//! The configs every scenario's subjects get, held byte for byte to `testdata/configs/`: what
//! the lab rendered before the peers' configs became templates under `bench/peers/`.

#![cfg(test)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use super::{self as scenarios, forward_deliver, forward_relay, kafka_pipeline, tail};
use crate::pki::ServerPki;
use crate::subjects::{
    ActionQueue, DiskBuffer, Input, RsyslogTls, Setup, TlsDriver, eventmachine, fluentd, loghaul,
    otelcol, rsyslog, syslog_ng,
};
use loghaul::Variant;

/// Every config the lab writes for a subject, rendered for fixed ports and paths.
fn rendered_configs() -> Vec<(String, String)> {
    let pki = ServerPki {
        ca: "/run/pki/ca.crt".into(),
        cert: "/run/pki/server.crt".into(),
        key: "/run/pki/server.key".into(),
    };
    let disk = DiskBuffer {
        sync: "50ms",
        data_dir: "/run/data".into(),
    };
    let setup = |name: &str| {
        let s = scenarios::by_name(name).unwrap();
        let role = match name {
            "forward_relay" => "; B, the receiver: A's requests in, a JSON-lines file out",
            "forward_deliver" => "; a receiver: the delivers' requests in, a JSON-lines file out",
            _ => "",
        };
        Setup {
            name: s.name(),
            input: s.input().unwrap_or(Input::Forward),
            role,
        }
    };
    let mut out = Vec::new();
    for n in [
        "basic",
        "syslog",
        "raw",
        "rfc5424",
        "forward",
        "forward_relay",
        "forward_deliver",
        "tls_handshake",
    ] {
        let st = setup(n);
        let c = |disk, tls| {
            let variant = Variant {
                disk,
                tls,
                ..Variant::default()
            };
            loghaul::subject_config(&st, 5514, 8686, "/run/out.log", &variant)
        };
        out.push((format!("loghaul-{n}.yaml"), c(None, None)));
        out.push((format!("loghaul-{n}-disk.yaml"), c(Some(&disk), None)));
        out.push((format!("loghaul-{n}-tls.yaml"), c(None, Some(&pki))));
    }
    for n in ["basic", "syslog", "raw", "rfc5424", "tls_handshake"] {
        let st = setup(n);
        let r = |q, t: Option<&RsyslogTls<'_>>| {
            rsyslog::config_with(&st, 5514, "/run/work", "/run/out.log", q, t)
        };
        out.push((format!("rsyslog-{n}.conf"), r(ActionQueue::Direct, None)));
        out.push((
            format!("rsyslog-da-{n}.conf"),
            r(ActionQueue::DiskAssisted, None),
        ));
        for driver in [TlsDriver::Gtls, TlsDriver::Ossl] {
            let tls = RsyslogTls { driver, pki: &pki };
            out.push((
                format!("rsyslog-tls-{}-{n}.conf", driver.name()),
                r(ActionQueue::Direct, Some(&tls)),
            ));
        }
        out.push((
            format!("syslog-ng-{n}.conf"),
            syslog_ng::config(&st, 5514, "/run/out.log"),
        ));
    }
    // transform: loghaul on its fast path and on the VRL runtime, rsyslog, syslog-ng.
    let st = setup("transform");
    for (name, vrl_runtime) in [("loghaul", false), ("loghaul-vrl", true)] {
        let variant = Variant {
            vrl_runtime,
            ..Variant::default()
        };
        out.push((
            format!("{name}-transform.yaml"),
            loghaul::subject_config(&st, 5514, 8686, "/run/out.log", &variant),
        ));
    }
    out.push((
        "rsyslog-transform.conf".into(),
        rsyslog::config(&st, 5514, "/run/work", "/run/out.log", ActionQueue::Direct),
    ));
    out.push((
        "syslog-ng-transform.conf".into(),
        syslog_ng::config(&st, 5514, "/run/out.log"),
    ));
    out.push((
        "loghaul-relay-a.yaml".into(),
        forward_relay::relay_config(5514, 8686, 5515),
    ));
    out.push((
        "loghaul-tail.yaml".into(),
        tail::tail_config("/run/in.log", "/run/state", 8686, "/run/out.log"),
    ));
    out.push((
        "loghaul-kafka-producer.yaml".into(),
        kafka_pipeline::kafka_producer_config(5514, 8686, "127.0.0.1:9092", "bench"),
    ));
    out.push((
        "loghaul-kafka-consumer.yaml".into(),
        kafka_pipeline::kafka_consumer_config(
            1,
            8686,
            "127.0.0.1:9092",
            "g",
            "bench",
            "/run/out.log",
        ),
    ));
    out.push((
        "loghaul-agent.yaml".into(),
        forward_deliver::agent_config(
            3,
            "/run/agent-3.log",
            "/run/state/agent-3",
            8686,
            &[5514, 5515],
        ),
    ));
    out.push((
        "loghaul-deliver.yaml".into(),
        forward_deliver::deliver_config(1, 5514, 8686, &[5515, 5516]),
    ));
    out.push((
        "fluentd.conf".into(),
        fluentd::receiver("scenario forward", 5514, "/run", fluentd::Flush::Interval),
    ));
    out.push((
        "fluentd-receiver.conf".into(),
        fluentd::receiver(
            "scenario forward_deliver; receiver 1",
            5514,
            "/run/receiver-1",
            fluentd::Flush::Immediate,
        ),
    ));
    out.push((
        "fluentd-agent.conf".into(),
        fluentd::agent(
            "forward_deliver",
            2,
            "/run/agent-2.log",
            "/run/state/agent-2.pos",
            crate::fluent::DEFAULT_TAG,
            8686,
            &[5514, 5515],
        ),
    ));
    out.push((
        "fluentd-deliver.conf".into(),
        fluentd::deliver("forward_deliver", 0, 5514, &[5515, 5516]),
    ));
    out.push(("basic.rb".into(), eventmachine::SCRIPT.to_string()));
    // otlp runs loghaul without its variants.
    out.push((
        "loghaul-otlp.yaml".into(),
        loghaul::config(&setup("otlp"), 5514, 8686, "/run/out.log"),
    ));
    // The OpenTelemetry Collector, where it runs.
    for n in ["syslog", "otlp", "forward"] {
        out.push((
            format!("otelcol-{n}.yaml"),
            otelcol::config(&setup(n), 5514, "/run/out.log").unwrap(),
        ));
    }
    out.push((
        "otelcol-tail.yaml".into(),
        otelcol::tail_config("tail", "/run/in.log", "/run/out.log"),
    ));
    out
}

/// The configs are byte for byte those in `testdata/configs/`, rendered by the lab before
/// the peers' configs became templates (rewritten with `LOGHAUL_BLESS=1` when a change to a
/// config is meant).
#[test]
fn configs_are_unchanged() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/configs");
    let bless = std::env::var_os("LOGHAUL_BLESS").is_some();
    let rendered = rendered_configs();
    for (name, text) in &rendered {
        let path = dir.join(name);
        if bless {
            std::fs::write(&path, text).unwrap();
        } else {
            let want = std::fs::read_to_string(&path).unwrap();
            assert!(&want == text, "{name} differs:\n{text}");
        }
    }
    // Every file there is still rendered.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), rendered.len());
}

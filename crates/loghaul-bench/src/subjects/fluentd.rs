//! Fluentd's configs, from the templates in `bench/peers/fluentd/`: a receiver (in_forward →
//! out_file with JSON lines), and the agent (in_tail → out_forward) and deliver (in_forward →
//! out_forward) of a tree of processes.

use crate::template::{fragment, render};

const RECEIVER: &str = include_str!("../../../../bench/peers/fluentd/receiver.conf");
const FLUSH_INTERVAL: &str = include_str!("../../../../bench/peers/fluentd/flush-interval.conf");
const FLUSH_IMMEDIATE: &str = include_str!("../../../../bench/peers/fluentd/flush-immediate.conf");
const AGENT: &str = include_str!("../../../../bench/peers/fluentd/agent.conf");
const DELIVER: &str = include_str!("../../../../bench/peers/fluentd/deliver.conf");
const FORWARD_OUT: &str = include_str!("../../../../bench/peers/fluentd/forward-out.conf");
const SERVER: &str = include_str!("../../../../bench/peers/fluentd/server.conf");

/// When a receiver's buffer writes its chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Every second, as fluentd's docs suggest for throughput.
    Interval,
    /// At once: a line waits for no timer.
    Immediate,
}

/// A receiver: in_forward → out_file with JSON lines, into `DIR/out.TAG.log`. The buffer is in
/// memory (as loghaul's queues are) and blocks the input when full instead of dropping
/// (`overflow_action block`). Time and tag are injected and the client address kept as
/// `source_ip`, so a line carries what loghaul's does (but `source_type`). `what` goes into the
/// first line's comment.
pub fn receiver(what: &str, port: u16, dir: &str, flush: Flush) -> String {
    let flush = match flush {
        Flush::Interval => FLUSH_INTERVAL,
        Flush::Immediate => FLUSH_IMMEDIATE,
    };
    render(
        RECEIVER,
        &[
            ("what", what),
            ("port", &port.to_string()),
            ("dir", dir),
            ("flush", fragment(flush)),
        ],
    )
}

/// out_forward to `ports` with acks, buffered as the published peer-deliver run's agents and
/// delivers were (`flush_interval 0`, 1MB chunks, 64 queued, 32 flush threads), blocking when
/// full.
fn forward_out(ports: &[u16]) -> String {
    let servers: Vec<String> = ports
        .iter()
        .map(|p| render(fragment(SERVER), &[("port", &p.to_string())]))
        .collect();
    render(fragment(FORWARD_OUT), &[("servers", &servers.join("\n"))])
}

/// Agent `i` of a tree: in_tail (`format none`: the line as `message`, as in the published
/// peer-deliver run) of `file`, its position in `pos`, tagged `tag`, → out_forward to every
/// deliver; a monitor_agent on `monitor` tells it is up. Fluentd follows a file renamed away by
/// itself, so the path names the live file only.
pub fn agent(
    scenario: &str,
    i: usize,
    file: &str,
    pos: &str,
    tag: &str,
    monitor: u16,
    delivers: &[u16],
) -> String {
    render(
        AGENT,
        &[
            ("scenario", scenario),
            ("i", &i.to_string()),
            ("file", file),
            ("pos", pos),
            ("tag", tag),
            ("monitor", &monitor.to_string()),
            ("forward", &forward_out(delivers)),
        ],
    )
}

/// Deliver `d` of a tree: in_forward on `port` → out_forward to every receiver.
pub fn deliver(scenario: &str, d: usize, port: u16, receivers: &[u16]) -> String {
    render(
        DELIVER,
        &[
            ("scenario", scenario),
            ("d", &d.to_string()),
            ("port", &port.to_string()),
            ("forward", &forward_out(receivers)),
        ],
    )
}

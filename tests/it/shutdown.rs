//! Acceptance 4: clean shutdown loses nothing. 200,000 events over 4 TCP connections, SIGTERM
//! right after the last write returns (the bytes may still sit unread in the kernel's socket
//! buffers), then the file must hold all 200,000, each once.
//!
//! Two variants: the senders keep their connections open across the SIGTERM (loghaul must drain
//! them without waiting for the client to close), or close them before it.

use std::io::Write;
use std::net::TcpStream;

use crate::harness::*;

const CONNECTIONS: u64 = 4;
const PER_CONNECTION: u64 = 50_000;

fn shutdown_keeps_every_event(close_before_sigterm: bool) {
    let mut server = Server::start(&syslog_config(""));
    let port = server.ports.tcp;

    // Payloads first, so the writes are as fast as the server lets them be.
    let payloads: Vec<Vec<u8>> = (0..CONNECTIONS)
        .map(|c| {
            let mut p = Vec::with_capacity(PER_CONNECTION as usize * 48);
            for i in 0..PER_CONNECTION {
                let seq = c * PER_CONNECTION + i;
                p.extend_from_slice(line3164(&format!("conn {c} seq {seq}")).as_bytes());
            }
            p
        })
        .collect();
    let streams: Vec<TcpStream> = (0..CONNECTIONS).map(|_| connect(port)).collect();
    let writers: Vec<_> = streams
        .into_iter()
        .zip(payloads)
        .map(|(mut s, p)| {
            std::thread::spawn(move || {
                for chunk in p.chunks(1 << 20) {
                    s.write_all(chunk).expect("write events");
                }
                if close_before_sigterm {
                    drop(s);
                    None
                } else {
                    Some(s)
                }
            })
        })
        .collect();
    let open: Vec<Option<TcpStream>> = writers
        .into_iter()
        .map(|w| w.join().expect("writer thread"))
        .collect();

    // Right after the last write returned.
    server.stop();
    drop(open);

    let total = CONNECTIONS * PER_CONNECTION;
    let mut numbers = Vec::with_capacity(total as usize);
    let lines = for_each_line(&server.out(), |e| {
        assert!(flags(&e).is_empty(), "no flags expected: {e}");
        numbers.push(trailing_number(message(&e)));
    });
    assert_eq!(
        lines as u64, total,
        "lines in out.jsonl after a clean shutdown"
    );
    assert_each_once(&numbers, total, "events after SIGTERM");
}

#[test]
fn shutdown_after_sigterm_keeps_all_200k_events_connections_open() {
    shutdown_keeps_every_event(false);
}

#[test]
fn shutdown_after_sigterm_keeps_all_200k_events_connections_closed() {
    shutdown_keeps_every_event(true);
}

//! Sockets shared by every component that listens: the one TCP listener ([`listener`]), the
//! sockets a reload hands over ([`sockets`]), TLS on both ends of a connection ([`tls`]) and UDP
//! socket set-up ([`udp`]); and what HTTP components share ([`http`]); how Kafka clients report
//! their errors ([`kafka`]).

pub mod http;
pub mod listener;
pub mod sockets;
pub mod tls;
pub mod udp;

/// The machine's host name (what the forward handshake calls `self_hostname` by default).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "loghaul".to_owned())
}

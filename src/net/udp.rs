//! UDP sockets: bound before anything starts, with a receive buffer large enough to ride out
//! short stalls (UDP cannot push back on its senders).

use std::net::SocketAddr;

use tokio::net::UdpSocket;

/// SO_RCVBUF requested when `receive_buffer` is not configured.
pub const DEFAULT_RECEIVE_BUFFER: usize = 4 * 1024 * 1024;

/// Binds the socket, with SO_RCVBUF set when configured.
///
/// # Errors
///
/// The address is in use or not available.
pub fn bind(addr: SocketAddr, receive_buffer: Option<usize>) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // No SO_REUSEADDR: on Linux it lets a second UDP socket bind the same port, and the newest
    // socket then silently takes the datagrams. A port in use must fail the start instead.
    // The OS default (208KiB on Linux) holds about 500 short loopback datagrams, a few
    // milliseconds of a busy sender, so a short stall sheds a burst. Ask for more unless
    // configured; the kernel caps the request at net.core.rmem_max, so this never fails where
    // the default would have worked.
    let wanted = receive_buffer.unwrap_or(DEFAULT_RECEIVE_BUFFER);
    if let Some(granted) = set_receive_buffer(&socket, wanted)? {
        tracing::warn!(
            %addr,
            wanted,
            granted,
            "The kernel capped the UDP receive buffer (net.core.rmem_max): bursts larger than \
             it are dropped by the kernel before loghaul sees them. Raise it with \
             `sysctl -w net.core.rmem_max={wanted}`."
        );
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// Sets SO_RCVBUF; returns what the kernel granted when that is less than `wanted`.
pub(crate) fn set_receive_buffer(
    socket: &socket2::Socket,
    wanted: usize,
) -> std::io::Result<Option<usize>> {
    socket.set_recv_buffer_size(wanted)?;
    // Linux reports twice what it granted (the doubling covers its bookkeeping).
    let granted = socket.recv_buffer_size()? / 2;
    Ok((granted < wanted).then_some(granted))
}

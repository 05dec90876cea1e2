//! Telling systemd where the service stands (`sd_notify`): `READY=1` once every component
//! runs, `RELOADING=1` while a reload is under way, `STOPPING=1` at the stop, for a unit with
//! `Type=notify` (or `notify-reload`). Without `NOTIFY_SOCKET` in the environment nothing is sent.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (lines of `KEY=VALUE`) to systemd, if it runs us. A failure is logged and
/// otherwise ignored: the service works the same without its manager knowing.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(error) = notify_to(&socket, state) {
        tracing::warn!(%error, ?socket, "Could not notify systemd.");
    }
}

/// Sends `state` to the datagram socket `socket` (a path, or `@name` for an abstract one).
///
/// # Errors
///
/// The socket does not exist or refuses the datagram.
pub fn notify_to(socket: &OsStr, state: &str) -> std::io::Result<()> {
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(socket);
    let addr = match bytes.strip_prefix(b"@") {
        // An abstract socket: `@` stands for the leading NUL.
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(socket))?,
    };
    UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

/// `RELOADING=1` with the monotonic time systemd asks of a `notify-reload` service.
pub fn reloading() {
    let usec = monotonic().map_or(0, |(secs, nanos)| secs * 1_000_000 + nanos / 1_000);
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

/// CLOCK_MONOTONIC as (seconds, nanoseconds).
#[allow(unsafe_code)]
fn monotonic() -> Option<(u64, u64)> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    (rc == 0).then(|| {
        (
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u64::try_from(ts.tv_nsec).unwrap_or(0),
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_notification_reaches_the_named_socket() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("notify");
        let listener = std::os::unix::net::UnixDatagram::bind(&path)?;
        super::notify_to(path.as_os_str(), "READY=1")?;
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf)?;
        assert_eq!(&buf[..n], b"READY=1");
        Ok(())
    }
}

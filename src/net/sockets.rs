//! The listening sockets of the running sources, kept so a reload can hand one over: a changed
//! source that keeps its address gets a duplicate of its predecessor's socket (`dup(2)`), not a
//! new bind, so no client is refused while the two overlap and none sees "address in use".
//!
//! A build asks the pool for its sockets ([`SocketPool::tcp`], [`SocketPool::udp`]); what it
//! got is pending until the topology commits the reload ([`SocketPool::commit`]), which also
//! forgets the sockets nobody uses any more, or abandons it ([`SocketPool::abort`]), which
//! closes what was newly bound.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Mutex;

use tokio::net::{TcpListener, UdpSocket};

/// Which socket: its protocol and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Tcp(SocketAddr),
    Udp(SocketAddr),
}

/// A kept socket (a duplicate of the one its source uses).
enum Held {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

impl Held {
    fn duplicate(&self) -> std::io::Result<Held> {
        Ok(match self {
            Held::Tcp(l) => Held::Tcp(l.try_clone()?),
            Held::Udp(s) => Held::Udp(s.try_clone()?),
        })
    }
}

struct Entry {
    /// The source that uses it.
    owner: String,
    socket: Held,
}

#[derive(Default)]
struct Pool {
    committed: HashMap<Key, Entry>,
    /// What the build under way asked for: the key, its new owner, and the socket when it was
    /// bound anew (not handed over).
    pending: Vec<(Key, String, Option<Held>)>,
}

/// The listening sockets of the running sources (see the module's documentation).
#[derive(Default)]
pub struct SocketPool(Mutex<Pool>);

impl std::fmt::Debug for SocketPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SocketPool")
    }
}

impl SocketPool {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        match self.0.lock() {
            Ok(pool) => pool,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A listener on `addr` for source `owner`: the running one's socket when a source listens
    /// there already, otherwise a new bind (see [`super::listener::bind`]).
    ///
    /// # Errors
    ///
    /// The address is in use by another program or not available; retrying will not help
    /// until it is freed.
    pub async fn tcp(
        &self,
        owner: &str,
        addr: SocketAddr,
        receive_buffer: Option<usize>,
    ) -> std::io::Result<TcpListener> {
        if let Some(Held::Tcp(listener)) = self.handover(Key::Tcp(addr), owner)? {
            listener.set_nonblocking(true)?;
            return TcpListener::from_std(listener);
        }
        let listener = super::listener::bind(addr, receive_buffer)
            .await?
            .into_std()?;
        let key = Key::Tcp(listener.local_addr()?);
        let kept = listener.try_clone()?;
        self.pool()
            .pending
            .push((key, owner.to_owned(), Some(Held::Tcp(kept))));
        TcpListener::from_std(listener)
    }

    /// A UDP socket on `addr` for source `owner`, handed over as [`SocketPool::tcp`] does.
    ///
    /// # Errors
    ///
    /// As [`SocketPool::tcp`].
    pub fn udp(
        &self,
        owner: &str,
        addr: SocketAddr,
        receive_buffer: Option<usize>,
    ) -> std::io::Result<UdpSocket> {
        if let Some(Held::Udp(socket)) = self.handover(Key::Udp(addr), owner)? {
            socket.set_nonblocking(true)?;
            return UdpSocket::from_std(socket);
        }
        let socket = super::udp::bind(addr, receive_buffer)?.into_std()?;
        let key = Key::Udp(socket.local_addr()?);
        let kept = socket.try_clone()?;
        self.pool()
            .pending
            .push((key, owner.to_owned(), Some(Held::Udp(kept))));
        UdpSocket::from_std(socket)
    }

    /// A duplicate of the committed socket under `key`, noted as pending for `owner`. An
    /// address with port 0 asks for a new port: it is never handed over.
    fn handover(&self, key: Key, owner: &str) -> std::io::Result<Option<Held>> {
        let (Key::Tcp(addr) | Key::Udp(addr)) = key;
        if addr.port() == 0 {
            return Ok(None);
        }
        let mut pool = self.pool();
        let Some(entry) = pool.committed.get(&key) else {
            return Ok(None);
        };
        let socket = entry.socket.duplicate()?;
        pool.pending.push((key, owner.to_owned(), None));
        Ok(Some(socket))
    }

    /// Makes the pending sockets the running ones: each now belongs to the source that asked
    /// for it. A socket is then forgotten (closed here; its port is freed once the source
    /// using it has stopped) when its owner is not in `running`, or is in `rebuilt` and its
    /// new instance did not ask for it.
    pub fn commit(&self, running: &HashSet<String>, rebuilt: &HashSet<String>) {
        let mut pool = self.pool();
        let pending = std::mem::take(&mut pool.pending);
        let mut claimed = HashSet::new();
        for (key, owner, bound) in pending {
            claimed.insert(key);
            match bound {
                Some(socket) => {
                    pool.committed.insert(key, Entry { owner, socket });
                }
                None => {
                    if let Some(entry) = pool.committed.get_mut(&key) {
                        entry.owner = owner;
                    }
                }
            }
        }
        pool.committed.retain(|key, entry| {
            running.contains(&entry.owner)
                && (claimed.contains(key) || !rebuilt.contains(&entry.owner))
        });
    }

    /// Forgets what the build under way asked for (closing what it bound).
    pub fn abort(&self) {
        self.pool().pending.clear();
    }

    /// Closes every kept socket (at the stop: the sources keep their own until they end).
    pub fn clear(&self) {
        let mut pool = self.pool();
        pool.pending.clear();
        pool.committed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[tokio::test]
    async fn a_socket_is_handed_over_not_bound_again_and_freed_when_its_owner_goes()
    -> anyhow::Result<()> {
        let pool = SocketPool::default();
        let first = pool.tcp("a", "127.0.0.1:0".parse()?, None).await?;
        let addr = first.local_addr()?;
        pool.commit(&set(&["a"]), &set(&["a"]));
        // A second bind of the same address would fail (no SO_REUSEPORT): this one is a dup.
        let second = pool.tcp("a", addr, None).await?;
        assert_eq!(second.local_addr()?, addr);
        pool.commit(&set(&["a"]), &set(&["a"]));
        // Both accept on the one socket.
        let _client = std::net::TcpStream::connect(addr)?;
        let (_conn, _) = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            tokio::select! {
                r = first.accept() => r,
                r = second.accept() => r,
            }
        })
        .await??;
        // Removed: the pool lets go; once the sources' own copies close, the port is free.
        pool.commit(&set(&[]), &set(&[]));
        drop((first, second));
        assert!(std::net::TcpListener::bind(addr).is_ok());
        Ok(())
    }

    #[tokio::test]
    async fn an_aborted_build_closes_what_it_bound() -> anyhow::Result<()> {
        let pool = SocketPool::default();
        let listener = pool.tcp("a", "127.0.0.1:0".parse()?, None).await?;
        let addr = listener.local_addr()?;
        pool.abort();
        drop(listener);
        assert!(std::net::TcpListener::bind(addr).is_ok());
        Ok(())
    }

    #[tokio::test]
    async fn a_rebuilt_source_that_moved_frees_its_old_address() -> anyhow::Result<()> {
        let pool = SocketPool::default();
        let old = pool.udp("a", "127.0.0.1:0".parse()?, None)?;
        let old_addr = old.local_addr()?;
        pool.commit(&set(&["a"]), &set(&["a"]));
        let new = pool.udp("a", "127.0.0.1:0".parse()?, None)?;
        pool.commit(&set(&["a"]), &set(&["a"]));
        drop(old);
        assert!(std::net::UdpSocket::bind(old_addr).is_ok());
        assert!(std::net::UdpSocket::bind(new.local_addr()?).is_err());
        Ok(())
    }
}

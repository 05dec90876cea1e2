//! Reused I/O buffers handed out as `Bytes`: the reader's windows are a megabyte each, and a
//! fresh allocation of that size per window came from pages the allocator had just given back,
//! so every one was faulted in (and zeroed) again.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

/// At most this many idle buffers are kept.
const IDLE: usize = 2;
/// Buffers larger than this are not kept (a rare oversized record).
const MAX_KEPT: usize = 16 << 20;

/// A shared set of idle buffers.
#[derive(Clone, Default)]
pub(crate) struct Pool(Arc<Mutex<Vec<Vec<u8>>>>);

impl Pool {
    /// A buffer of `len` bytes to read into, of any content: what a reused buffer held is
    /// not zeroed again (only bytes it never had are), as the read overwrites it all.
    pub fn take_len(&self, len: usize) -> Vec<u8> {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut buf = idle.pop().unwrap_or_default();
        drop(idle);
        buf.resize(len, 0);
        buf
    }

    /// `buf` as `Bytes` that give it back to the pool once the last slice of it is dropped.
    pub fn share(&self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled {
            buf,
            pool: self.clone(),
        })
    }
}

struct Pooled {
    buf: Vec<u8>,
    pool: Pool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.capacity() == 0 || buf.capacity() > MAX_KEPT {
            return;
        }
        let mut idle = self.pool.0.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE {
            idle.push(buf);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_once_its_last_slice_is_gone() {
        let pool = Pool::default();
        let mut buf = pool.take_len(11);
        buf.copy_from_slice(b"hello world");
        let ptr = buf.as_ptr();
        let bytes = pool.share(buf);
        let slice = bytes.slice(6..);
        drop(bytes);
        assert!(pool.0.lock().unwrap().is_empty(), "a slice still holds it");
        assert_eq!(&slice[..], b"world");
        drop(slice);
        let again = pool.take_len(5);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again.len(), 5);
    }
}

//! What the `file` source remembers across restarts: each file's identity and how far its lines
//! were committed, in one JSON document replaced atomically.
//!
//! ```text
//! <data_dir>/checkpoints.json
//! {"version":1,"files":[
//!   {"path":"/var/log/app.log","dev":2049,"ino":1234567,
//!    "fingerprint_len":1024,"fingerprint":"9f0c3e51a2b4d687","offset":104857}]}
//! ```
//!
//! A file is the same file when its device, inode *and* fingerprint agree. The fingerprint is
//! a 64-bit FNV-1a hash of the file's first `fingerprint_len` bytes (up to [`FINGERPRINT_MAX`];
//! fewer while the file is shorter, extended as it grows), so an inode handed to a new file is
//! not taken for the old one, and a file whose first bytes were replaced is read from the start.
//!
//! Writing: the document goes to `checkpoints.json.tmp`, is fsync'd, renamed over
//! `checkpoints.json`, and the directory is fsync'd, so a crash at any moment leaves either the
//! old document or the new one, never a torn one. Those two fsyncs can take a hundred
//! milliseconds on a busy disk, so [`Writer`] does them on a thread of its own: the tailing loop
//! hands it the latest snapshot and goes on (a file rotated away and replaced while the loop
//! stood still would never be opened).

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The most leading bytes a fingerprint covers.
pub const FINGERPRINT_MAX: usize = 1024;

const VERSION: u32 = 1;
const FILE_NAME: &str = "checkpoints.json";

/// Device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub fn of(meta: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt as _;
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// A hash of a file's first `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub len: u32,
    pub hash: u64,
}

/// How a file's first bytes compare with a fingerprint taken before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The same bytes; the fingerprint taken again now (longer if the file grew).
    Same(Fingerprint),
    /// Different bytes: another file, or rewritten from the start.
    Different,
    /// The file now holds fewer bytes than the fingerprint covered (truncated).
    Shorter,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Fingerprint {
    pub fn of(bytes: &[u8]) -> Fingerprint {
        let bytes = &bytes[..bytes.len().min(FINGERPRINT_MAX)];
        Fingerprint {
            len: bytes.len() as u32,
            hash: fnv1a(bytes),
        }
    }

    /// Reads the first bytes of `file` (one `pread`).
    pub fn read(file: &File) -> io::Result<Fingerprint> {
        let mut buf = [0u8; FINGERPRINT_MAX];
        let n = read_prefix(file, &mut buf)?;
        Ok(Fingerprint::of(&buf[..n]))
    }

    /// Compares with the first bytes of `file` now.
    pub fn check(&self, file: &File) -> io::Result<Check> {
        let mut buf = [0u8; FINGERPRINT_MAX];
        let n = read_prefix(file, &mut buf)?;
        let len = self.len as usize;
        if n < len {
            return Ok(Check::Shorter);
        }
        if fnv1a(&buf[..len]) != self.hash {
            return Ok(Check::Different);
        }
        Ok(Check::Same(Fingerprint::of(&buf[..n])))
    }
}

fn read_prefix(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One file as remembered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub id: FileId,
    pub fingerprint: Fingerprint,
    /// Just past the last byte whose line was committed.
    pub offset: u64,
}

#[derive(Serialize, Deserialize)]
struct Doc {
    version: u32,
    files: Vec<DocEntry>,
}

#[derive(Serialize, Deserialize)]
struct DocEntry {
    path: String,
    dev: u64,
    ino: u64,
    fingerprint_len: u32,
    /// Hex, so the document reads the same in every JSON tool (64-bit numbers do not).
    fingerprint: String,
    offset: u64,
}

/// What was found in `data_dir` at start.
#[derive(Debug)]
pub enum Loaded {
    /// No checkpoints: the source's first start.
    Missing,
    /// A document that cannot be read; the reason says why (the caller warns and starts over).
    Corrupt(String),
    Entries(Vec<Entry>),
}

/// The checkpoint document of one source.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(dir: PathBuf) -> Store {
        Store { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    pub fn load(&self) -> Loaded {
        let path = self.path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Loaded::Missing,
            Err(e) => return Loaded::Corrupt(format!("cannot read {}: {e}", path.display())),
        };
        let doc: Doc = match serde_json::from_slice(&bytes) {
            Ok(d) => d,
            Err(e) => return Loaded::Corrupt(format!("{}: {e}", path.display())),
        };
        if doc.version != VERSION {
            return Loaded::Corrupt(format!(
                "{}: version {} (this loghaul writes {VERSION})",
                path.display(),
                doc.version
            ));
        }
        let mut entries = Vec::with_capacity(doc.files.len());
        for f in doc.files {
            let Ok(hash) = u64::from_str_radix(&f.fingerprint, 16) else {
                return Loaded::Corrupt(format!(
                    "{}: fingerprint `{}` is not hex",
                    path.display(),
                    f.fingerprint
                ));
            };
            entries.push(Entry {
                path: PathBuf::from(f.path),
                id: FileId {
                    dev: f.dev,
                    ino: f.ino,
                },
                fingerprint: Fingerprint {
                    len: f.fingerprint_len.min(FINGERPRINT_MAX as u32),
                    hash,
                },
                offset: f.offset,
            });
        }
        Loaded::Entries(entries)
    }

    /// Replaces the document with `entries`, durably.
    ///
    /// # Errors
    ///
    /// The directory cannot be created or written (full, read-only): the old document stands,
    /// and a later call may succeed.
    pub fn save(&self, entries: &[Entry]) -> io::Result<()> {
        let doc = Doc {
            version: VERSION,
            files: entries
                .iter()
                .map(|e| DocEntry {
                    path: e.path.to_string_lossy().into_owned(),
                    dev: e.id.dev,
                    ino: e.id.ino,
                    fingerprint_len: e.fingerprint.len,
                    fingerprint: format!("{:016x}", e.fingerprint.hash),
                    offset: e.offset,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec(&doc).map_err(io::Error::other)?;
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        let result = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, self.path())?;
            sync_dir(&self.dir)
        })();
        if result.is_err() {
            // A half-written temporary file must not take the space a retry needs.
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// Saves snapshots handed to it on a thread of its own, the latest one winning: a snapshot
/// that arrives while another is written replaces any still waiting. A failed save is tried
/// again after `retry`, unless a newer snapshot came meanwhile. Every save's result goes to
/// the `report` callback (health, counters, logs), on the writer's thread.
pub struct Writer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    slot: Mutex<Slot>,
    wake: Condvar,
}

#[derive(Default)]
struct Slot {
    next: Option<Vec<Entry>>,
    closing: bool,
}

impl Writer {
    /// Starts the writer thread.
    ///
    /// # Errors
    ///
    /// The thread cannot be spawned (out of threads or memory): the source cannot start.
    pub fn spawn(
        store: Store,
        retry: Duration,
        mut report: impl FnMut(&Store, io::Result<()>) + Send + 'static,
    ) -> io::Result<Writer> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
        });
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("loghaul-checkpoints".into())
            .spawn(move || {
                loop {
                    let (entries, closing) = {
                        let mut slot = theirs.slot.lock().unwrap_or_else(PoisonError::into_inner);
                        while slot.next.is_none() && !slot.closing {
                            slot = theirs
                                .wake
                                .wait(slot)
                                .unwrap_or_else(PoisonError::into_inner);
                        }
                        (slot.next.take(), slot.closing)
                    };
                    let Some(entries) = entries else {
                        return;
                    };
                    let result = store.save(&entries);
                    let failed = result.is_err();
                    report(&store, result);
                    if failed && !closing {
                        // Kept for a retry unless a newer snapshot arrived; the wait ends
                        // early at a close, which tries once more.
                        let mut slot = theirs.slot.lock().unwrap_or_else(PoisonError::into_inner);
                        if slot.next.is_none() {
                            slot.next = Some(entries);
                        }
                        if !slot.closing {
                            let _ = theirs.wake.wait_timeout(slot, retry);
                        }
                    } else if closing {
                        // The last snapshot was written (or tried once more): done, unless one
                        // came after it.
                        let slot = theirs.slot.lock().unwrap_or_else(PoisonError::into_inner);
                        if slot.next.is_none() {
                            return;
                        }
                    }
                }
            })?;
        Ok(Writer {
            shared,
            thread: Some(thread),
        })
    }

    /// Hands over the latest snapshot; one still waiting is replaced.
    pub fn submit(&self, entries: Vec<Entry>) {
        let mut slot = self
            .shared
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        slot.next = Some(entries);
        self.shared.wake.notify_one();
    }

    /// Writes what is waiting (one attempt) and stops the thread; returns once it is done.
    pub fn close(&mut self) {
        {
            let mut slot = self
                .shared
                .slot
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            slot.closing = true;
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn saved_entries_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("src"));
        assert!(matches!(store.load(), Loaded::Missing));
        let entries = vec![Entry {
            path: PathBuf::from("/var/log/a.log"),
            id: FileId {
                dev: 1,
                ino: u64::MAX,
            },
            fingerprint: Fingerprint {
                len: 12,
                hash: u64::MAX - 3,
            },
            offset: 99,
        }];
        store.save(&entries).unwrap();
        let Loaded::Entries(back) = store.load() else {
            panic!("entries expected");
        };
        assert_eq!(back, entries);
    }

    fn entry(offset: u64) -> Entry {
        Entry {
            path: PathBuf::from("/var/log/a.log"),
            id: FileId { dev: 1, ino: 2 },
            fingerprint: Fingerprint { len: 3, hash: 4 },
            offset,
        }
    }

    #[test]
    fn the_writer_saves_the_latest_snapshot_and_the_last_one_at_close() {
        let dir = tempfile::tempdir().unwrap();
        let results = Arc::new(Mutex::new(Vec::new()));
        let seen = results.clone();
        let mut writer = Writer::spawn(
            Store::new(dir.path().to_path_buf()),
            Duration::from_millis(10),
            move |_, r| seen.lock().unwrap().push(r.is_ok()),
        )
        .unwrap();
        for offset in 0..50 {
            writer.submit(vec![entry(offset)]);
        }
        writer.close();
        let Loaded::Entries(back) = Store::new(dir.path().to_path_buf()).load() else {
            panic!("entries expected");
        };
        assert_eq!(back, vec![entry(49)]);
        let results = results.lock().unwrap();
        assert!(!results.is_empty() && results.iter().all(|ok| *ok));
    }

    #[test]
    fn a_failed_save_is_retried_until_it_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        // The store's directory is a file for now: every save fails.
        let blocked = dir.path().join("data");
        std::fs::write(&blocked, b"not a directory").unwrap();
        let results = Arc::new(Mutex::new(Vec::new()));
        let seen = results.clone();
        let mut writer = Writer::spawn(
            Store::new(blocked.clone()),
            Duration::from_millis(5),
            move |_, r| seen.lock().unwrap().push(r.is_ok()),
        )
        .unwrap();
        writer.submit(vec![entry(7)]);
        let failed = |n: usize| results.lock().unwrap().iter().filter(|ok| !**ok).count() >= n;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !failed(2) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(failed(2), "the failed save was tried again");
        std::fs::remove_file(&blocked).unwrap();
        let saved = || matches!(Store::new(blocked.clone()).load(), Loaded::Entries(e) if e == vec![entry(7)]);
        while !saved() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            saved(),
            "the retry wrote the snapshot once the directory could be made"
        );
        writer.close();
    }

    #[test]
    fn a_torn_or_foreign_document_is_reported_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        for bad in [
            &b"{\"version\":1,\"files\":[{\"pa"[..],
            b"\x00\x01",
            b"{\"version\":7,\"files\":[]}",
        ] {
            std::fs::write(store.path(), bad).unwrap();
            assert!(matches!(store.load(), Loaded::Corrupt(_)), "{bad:?}");
        }
    }

    #[test]
    fn fingerprints_grow_with_the_file_and_see_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let fp = Fingerprint::read(&File::open(&path).unwrap()).unwrap();
        assert_eq!(fp.len, 3);
        std::fs::write(&path, b"abcdef").unwrap();
        let Check::Same(longer) = fp.check(&File::open(&path).unwrap()).unwrap() else {
            panic!("same prefix");
        };
        assert_eq!(longer.len, 6);
        std::fs::write(&path, b"xbcdef").unwrap();
        assert_eq!(
            longer.check(&File::open(&path).unwrap()).unwrap(),
            Check::Different
        );
        std::fs::write(&path, b"ab").unwrap();
        assert_eq!(
            fp.check(&File::open(&path).unwrap()).unwrap(),
            Check::Shorter
        );
    }
}

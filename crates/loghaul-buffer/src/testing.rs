//! [`MemFs`]: an in-memory [`FileSystem`] for tests, with fault injection and simulated power
//! loss. It is compiled always (it is small) so that the server's tests can use it too.
//!
//! What a crash ([`MemFs::crash`]) models, and what it does not:
//!
//! - File data: each file keeps the prefix that the last successful `sync_data` covered, plus,
//!   depending on the [`CrashMode`], none, all, or a random prefix of the bytes written since (a
//!   torn write); in random mode the kept unsynced part may also end in zeros, as on a file
//!   system that extended the file before the data reached it.
//! - `fsync` failure: after [`MemFs::fail_next_sync`] fires on a file, later `sync_data` calls on
//!   that file report success but make nothing durable (the kernel dropped the dirty pages and
//!   cleared the error, as Linux does). Truncating the file to zero by `create` clears this.
//! - Names: creates, renames and removals go into one ordered journal; `sync_dir` (of any
//!   directory) makes every entry so far durable, as a journaling file system that commits in
//!   order does. A crash keeps none, all, or a random prefix of the entries not yet durable.
//! - Not modelled: directories are durable as soon as they are created; truncation (`set_len`
//!   and `create` of an existing file) is durable at once; a write that replaces synced bytes
//!   makes them unsynced from its offset on (pessimistic: the old bytes are not kept).
//!
//! After a crash every handle opened before it fails with an error: the process that held it
//! is gone. One-shot faults armed before a crash are disarmed; a capacity limit stays.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::fs::{FileSystem, FsFile};

/// ENOSPC on Linux.
const ENOSPC: i32 = 28;
/// EIO on Linux.
const EIO: i32 = 5;

/// What survives of unsynced state in [`MemFs::crash`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Only what was synced survives (the worst case of a power loss).
    LoseUnsynced,
    /// Everything written survives (a killed process on a healthy kernel).
    KeepAll,
    /// A random part of the unsynced state survives, drawn from this seed.
    Random(u64),
}

/// An in-memory file system with fault injection; clones share the same state.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    journal: Vec<NameOp>,
    dirs: BTreeSet<PathBuf>,
    next_inode: u64,
    generation: u64,
    faults: Faults,
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    synced: usize,
    /// A sync failed on this file: later syncs report success but make nothing durable.
    sync_poisoned: bool,
}

enum NameOp {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    Rename(PathBuf, PathBuf),
}

#[derive(Default)]
struct Faults {
    write: Option<io::Error>,
    short_write: Option<usize>,
    sync: bool,
    rename: bool,
    set_len: bool,
    /// Total bytes all files may hold; writes past it fail with ENOSPC.
    capacity: Option<u64>,
}

impl State {
    /// Bytes of the files that have a name: an unlinked file's space comes back at once (a real
    /// file system waits for its last open handle; the buffer drops its handles before
    /// deleting).
    fn used(&self) -> u64 {
        let named: std::collections::BTreeSet<u64> = self.names.values().copied().collect();
        named
            .iter()
            .filter_map(|id| self.inodes.get(id))
            .map(|i| i.data.len() as u64)
            .sum()
    }

    fn parent_exists(&self, path: &Path) -> bool {
        path.parent()
            .is_some_and(|p| p.as_os_str().is_empty() || self.dirs.contains(p))
    }

    fn inode(&mut self, path: &Path) -> io::Result<u64> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }
}

fn apply(names: &mut BTreeMap<PathBuf, u64>, op: &NameOp) {
    match op {
        NameOp::Link(path, inode) => {
            names.insert(path.clone(), *inode);
        }
        NameOp::Unlink(path) => {
            names.remove(path);
        }
        NameOp::Rename(from, to) => {
            if let Some(inode) = names.remove(from) {
                names.insert(to.clone(), inode);
            }
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: not found", path.display()),
    )
}

fn stale() -> io::Error {
    io::Error::other("stale file handle: the file system crashed since it was opened")
}

/// A small deterministic generator (xorshift64*), so crashes replay from their seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..=max`.
    fn upto(&mut self, max: usize) -> usize {
        (self.next() % (max as u64 + 1)) as usize
    }
}

impl MemFs {
    /// A handle on the existing file at `path`.
    fn open_existing(&self, path: &Path, writable: bool) -> io::Result<MemFile> {
        let mut state = self.lock();
        let id = state.inode(path)?;
        Ok(MemFile {
            fs: self.clone(),
            inode: id,
            generation: state.generation,
            writable,
        })
    }

    /// An empty file system with a root directory `/`.
    pub fn new() -> Self {
        let fs = MemFs::default();
        fs.lock().dirs.insert(PathBuf::from("/"));
        fs
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock leaves consistent state behind: every
        // operation finishes its changes before it can fail.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next write (on any file) fails with `error` and writes nothing.
    pub fn fail_next_write(&self, error: io::Error) {
        self.lock().faults.write = Some(error);
    }

    /// The next write (on any file) fails with EIO.
    pub fn fail_next_write_eio(&self) {
        self.fail_next_write(io::Error::from_raw_os_error(EIO));
    }

    /// The next `bytes` bytes by which the files grow succeed; writes past them fail with
    /// ENOSPC (a write that straddles the limit writes short first, as on a real disk).
    /// Removing files makes room again.
    pub fn enospc_after(&self, bytes: u64) {
        let mut state = self.lock();
        let used = state.used();
        state.faults.capacity = Some(used + bytes);
    }

    /// Lifts the limit set by [`MemFs::enospc_after`].
    pub fn clear_capacity(&self) {
        self.lock().faults.capacity = None;
    }

    /// The next write (on any file) writes at most `n` bytes and reports how many it wrote.
    pub fn short_write_next(&self, n: usize) {
        self.lock().faults.short_write = Some(n);
    }

    /// The next `sync_data` (on any file) fails with EIO, and poisons that file (see the
    /// module's documentation).
    pub fn fail_next_sync(&self) {
        self.lock().faults.sync = true;
    }

    /// The next rename fails with EIO and changes nothing.
    pub fn fail_next_rename(&self) {
        self.lock().faults.rename = true;
    }

    /// The next `set_len` fails with EIO and changes nothing.
    pub fn fail_next_set_len(&self) {
        self.lock().faults.set_len = true;
    }

    /// Disarms every fault, including the capacity limit.
    pub fn clear_faults(&self) {
        self.lock().faults = Faults::default();
    }

    /// Simulates a power loss (see the module's documentation for what survives).
    pub fn crash(&self, mode: CrashMode) {
        let mut state = self.lock();
        let mut rng = Rng::new(match mode {
            CrashMode::Random(seed) => seed,
            _ => 0,
        });
        let kept_ops = match mode {
            CrashMode::LoseUnsynced => 0,
            CrashMode::KeepAll => state.journal.len(),
            CrashMode::Random(_) => rng.upto(state.journal.len()),
        };
        let mut names = std::mem::take(&mut state.durable_names);
        for op in state.journal.iter().take(kept_ops) {
            apply(&mut names, op);
        }
        state.journal.clear();
        let live: BTreeSet<u64> = names.values().copied().collect();
        state.inodes.retain(|inode, _| live.contains(inode));
        // Visit the files in a fixed order so a seed always gives the same result.
        let mut order: Vec<u64> = state.inodes.keys().copied().collect();
        order.sort_unstable();
        for id in order {
            let Some(inode) = state.inodes.get_mut(&id) else {
                continue;
            };
            let unsynced = inode.data.len() - inode.synced;
            let keep = match mode {
                CrashMode::LoseUnsynced => 0,
                CrashMode::KeepAll => unsynced,
                CrashMode::Random(_) => rng.upto(unsynced),
            };
            inode.data.truncate(inode.synced + keep);
            if matches!(mode, CrashMode::Random(_)) && keep > 0 && rng.upto(3) == 0 {
                let zeros = rng.upto(keep.min(512));
                let len = inode.data.len();
                inode
                    .data
                    .get_mut(len - zeros..)
                    .unwrap_or_default()
                    .fill(0);
            }
            inode.synced = inode.data.len();
            inode.sync_poisoned = false;
        }
        state.names = names.clone();
        state.durable_names = names;
        state.generation += 1;
        let capacity = state.faults.capacity;
        state.faults = Faults {
            capacity,
            ..Faults::default()
        };
    }

    /// XORs the bytes of `path` from `offset` with `mask` (disk corruption: durable at once,
    /// and seen through open handles).
    ///
    /// # Errors
    /// `NotFound`, or `InvalidInput` when the range is past the end of the file.
    pub fn corrupt(&self, path: &Path, offset: u64, mask: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        let id = state.inode(path)?;
        let inode = state.inodes.get_mut(&id).ok_or_else(|| not_found(path))?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let bytes = inode
            .data
            .get_mut(start..start + mask.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "corruption past the end of the file",
                )
            })?;
        for (byte, m) in bytes.iter_mut().zip(mask) {
            *byte ^= m;
        }
        Ok(())
    }

    /// The current contents of `path`, if it exists.
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.lock();
        let id = state.names.get(path)?;
        state.inodes.get(id).map(|i| i.data.clone())
    }

    /// Creates `path` with `data`, durable at once (data and name): a way to plant files.
    ///
    /// # Errors
    /// `NotFound` when the parent directory does not exist.
    pub fn write_file(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        if !state.parent_exists(path) {
            return Err(not_found(path));
        }
        let id = state.next_inode;
        state.next_inode += 1;
        state.inodes.insert(
            id,
            Inode {
                data: data.to_vec(),
                synced: data.len(),
                sync_poisoned: false,
            },
        );
        state.names.insert(path.to_path_buf(), id);
        state.durable_names.insert(path.to_path_buf(), id);
        Ok(())
    }

    /// Every file and its contents: compare two of these to prove that nothing changed.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let state = self.lock();
        state
            .names
            .iter()
            .filter_map(|(path, id)| Some((path.clone(), state.inodes.get(id)?.data.clone())))
            .collect()
    }

    /// The names of the files directly in `dir`, sorted.
    pub fn list(&self, dir: &Path) -> Vec<String> {
        let state = self.lock();
        state
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
            .collect()
    }
}

impl FileSystem for MemFs {
    type File = MemFile;

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        for dir in path.ancestors() {
            if !dir.as_os_str().is_empty() {
                state.dirs.insert(dir.to_path_buf());
            }
        }
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let state = self.lock();
        if !state.dirs.contains(path) {
            return Err(not_found(path));
        }
        let files = state.names.keys().filter(|p| p.parent() == Some(path));
        let dirs = state.dirs.iter().filter(|p| p.parent() == Some(path));
        Ok(files.chain(dirs).cloned().collect())
    }

    fn create(&self, path: &Path) -> io::Result<MemFile> {
        let mut state = self.lock();
        if !state.parent_exists(path) {
            return Err(not_found(path));
        }
        let id = match state.names.get(path).copied() {
            Some(id) => {
                if let Some(inode) = state.inodes.get_mut(&id) {
                    *inode = Inode::default();
                }
                id
            }
            None => {
                let id = state.next_inode;
                state.next_inode += 1;
                state.inodes.insert(id, Inode::default());
                state.names.insert(path.to_path_buf(), id);
                state.journal.push(NameOp::Link(path.to_path_buf(), id));
                id
            }
        };
        Ok(MemFile {
            fs: self.clone(),
            inode: id,
            generation: state.generation,
            writable: true,
        })
    }

    fn open(&self, path: &Path) -> io::Result<MemFile> {
        self.open_existing(path, true)
    }

    fn open_read(&self, path: &Path) -> io::Result<MemFile> {
        self.open_existing(path, false)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        if std::mem::take(&mut state.faults.rename) {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        if !state.parent_exists(to) {
            return Err(not_found(to));
        }
        let id = state.names.remove(from).ok_or_else(|| not_found(from))?;
        state.names.insert(to.to_path_buf(), id);
        state
            .journal
            .push(NameOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.names.remove(path).ok_or_else(|| not_found(path))?;
        state.journal.push(NameOp::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        if !state.dirs.contains(path) {
            return Err(not_found(path));
        }
        state.durable_names = state.names.clone();
        state.journal.clear();
        Ok(())
    }
}

/// A handle on a [`MemFs`] file.
pub struct MemFile {
    fs: MemFs,
    inode: u64,
    generation: u64,
    writable: bool,
}

impl MemFile {
    /// Runs `f` on this file's inode, failing when a crash made the handle stale.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Faults, &mut Inode, u64) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut state = self.fs.lock();
        if state.generation != self.generation {
            return Err(stale());
        }
        let used = state.used();
        let State { inodes, faults, .. } = &mut *state;
        // A removed file stays reachable through its handle until the next crash.
        let inode = inodes.get_mut(&self.inode).ok_or_else(stale)?;
        f(faults, inode, used)
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ))
        }
    }
}

impl FsFile for MemFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.check_writable()?;
        self.with(|faults, inode, used| {
            if let Some(error) = faults.write.take() {
                return Err(error);
            }
            let mut n = buf.len();
            if let Some(short) = faults.short_write.take() {
                n = n.min(short);
            }
            let offset = usize::try_from(offset).map_err(io::Error::other)?;
            if let Some(capacity) = faults.capacity {
                // The file may grow by what is left of the capacity, and no further.
                let room = usize::try_from(capacity.saturating_sub(used)).unwrap_or(usize::MAX);
                let max_end = inode.data.len().saturating_add(room);
                if offset + n > max_end {
                    n = max_end.saturating_sub(offset);
                    if n == 0 && !buf.is_empty() {
                        return Err(io::Error::from_raw_os_error(ENOSPC));
                    }
                }
            }
            let end = offset + n;
            if inode.data.len() < end {
                inode.data.resize(end, 0);
            }
            if let (Some(dst), Some(src)) = (inode.data.get_mut(offset..end), buf.get(..n)) {
                dst.copy_from_slice(src);
            }
            inode.synced = inode.synced.min(offset);
            Ok(n)
        })
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with(|_, inode, _| {
            let offset = usize::try_from(offset).map_err(io::Error::other)?;
            let Some(src) = inode.data.get(offset..) else {
                return Ok(0);
            };
            let n = src.len().min(buf.len());
            if let (Some(dst), Some(src)) = (buf.get_mut(..n), src.get(..n)) {
                dst.copy_from_slice(src);
            }
            Ok(n)
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|faults, inode, _| {
            if std::mem::take(&mut faults.sync) {
                inode.sync_poisoned = true;
                return Err(io::Error::from_raw_os_error(EIO));
            }
            if !inode.sync_poisoned {
                inode.synced = inode.data.len();
            }
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        self.with(|faults, inode, _| {
            if std::mem::take(&mut faults.set_len) {
                return Err(io::Error::from_raw_os_error(EIO));
            }
            let len = usize::try_from(len).map_err(io::Error::other)?;
            inode.data.resize(len, 0);
            inode.synced = inode.synced.min(len);
            Ok(())
        })
    }

    fn len(&self) -> io::Result<u64> {
        self.with(|_, inode, _| Ok(inode.data.len() as u64))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn setup() -> (MemFs, PathBuf) {
        let fs = MemFs::new();
        let dir = PathBuf::from("/d");
        fs.create_dir_all(&dir).unwrap();
        (fs, dir)
    }

    #[test]
    fn crash_keeps_synced_prefix() {
        let (fs, dir) = setup();
        let path = dir.join("f");
        let f = fs.create(&path).unwrap();
        f.write_at(b"durable", 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(&dir).unwrap();
        f.write_at(b"-volatile", 7).unwrap();
        fs.crash(CrashMode::LoseUnsynced);
        assert_eq!(fs.read(&path).unwrap(), b"durable");
        assert!(f.len().is_err(), "handles from before the crash are stale");
    }

    #[test]
    fn unsynced_names_may_be_lost() {
        let (fs, dir) = setup();
        let path = dir.join("f");
        let f = fs.create(&path).unwrap();
        f.write_at(b"x", 0).unwrap();
        f.sync_data().unwrap();
        fs.crash(CrashMode::LoseUnsynced);
        assert!(fs.read(&path).is_none());

        let f = fs.create(&path).unwrap();
        f.write_at(b"x", 0).unwrap();
        fs.crash(CrashMode::KeepAll);
        assert_eq!(fs.read(&path).unwrap(), b"x");
    }

    #[test]
    fn random_crash_keeps_a_prefix() {
        for seed in 0..50 {
            let (fs, dir) = setup();
            let path = dir.join("f");
            let f = fs.create(&path).unwrap();
            f.write_at(b"0123", 0).unwrap();
            f.sync_data().unwrap();
            fs.sync_dir(&dir).unwrap();
            f.write_at(b"456789", 4).unwrap();
            fs.crash(CrashMode::Random(seed));
            let data = fs.read(&path).unwrap();
            assert!(data.len() >= 4 && data.len() <= 10);
            assert_eq!(&data[..4], b"0123");
            for (i, b) in data.iter().enumerate().skip(4) {
                assert!(*b == 0 || *b == b"0123456789"[i]);
            }
        }
    }

    #[test]
    fn failed_sync_poisons_the_file() {
        let (fs, dir) = setup();
        let path = dir.join("f");
        let f = fs.create(&path).unwrap();
        fs.sync_dir(&dir).unwrap();
        f.write_at(b"lost", 0).unwrap();
        fs.fail_next_sync();
        assert!(f.sync_data().is_err());
        f.sync_data().unwrap();
        fs.crash(CrashMode::LoseUnsynced);
        assert_eq!(fs.read(&path).unwrap(), b"");
    }

    #[test]
    fn enospc_writes_short_then_fails() {
        let (fs, dir) = setup();
        let f = fs.create(&dir.join("f")).unwrap();
        fs.enospc_after(3);
        assert_eq!(f.write_at(b"hello", 0).unwrap(), 3);
        let err = f.write_at(b"lo", 3).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(ENOSPC));
        // Overwriting within the file needs no room.
        assert_eq!(f.write_at(b"J", 0).unwrap(), 1);
        fs.clear_capacity();
        assert_eq!(f.write_at(b"lo", 3).unwrap(), 2);
    }

    #[test]
    fn injected_faults_fire_once() {
        let (fs, dir) = setup();
        let f = fs.create(&dir.join("f")).unwrap();
        fs.fail_next_write_eio();
        assert!(f.write_at(b"a", 0).is_err());
        assert_eq!(f.write_at(b"a", 0).unwrap(), 1);
        fs.short_write_next(2);
        assert_eq!(f.write_at(b"abcd", 0).unwrap(), 2);
        fs.fail_next_set_len();
        assert!(f.set_len(0).is_err());
        fs.fail_next_rename();
        assert!(fs.rename(&dir.join("f"), &dir.join("g")).is_err());
        fs.rename(&dir.join("f"), &dir.join("g")).unwrap();
        assert_eq!(fs.list(&dir), ["g"]);
    }
}

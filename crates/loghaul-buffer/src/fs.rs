//! The file system seam: every byte the buffer reads or writes goes through [`FileSystem`] and
//! [`FsFile`], so tests can swap the real disk ([`RealFs`]) for an in-memory one that injects
//! faults and simulates power loss ([`crate::testing::MemFs`]).
//!
//! The contract is positional I/O on files plus a handful of directory operations; nothing is
//! buffered above it, so what a call returns is what the buffer acts on.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A file system the buffer can live on.
///
/// Implementations must behave like POSIX: a rename replaces its target atomically, a removed
/// file stays readable through handles opened before, and names (creates, renames, removals)
/// are only durable after [`FileSystem::sync_dir`] on their directory.
pub trait FileSystem: Clone + Send + Sync + 'static {
    /// An open file.
    type File: FsFile;

    /// Creates `path` and its missing parents.
    ///
    /// # Errors
    /// Any I/O error.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;

    /// The entries of directory `path` (files and directories), as full paths, in any order.
    ///
    /// # Errors
    /// `NotFound` when `path` does not exist; any I/O error.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;

    /// Creates `path`, or truncates it when it exists, open for reading and writing.
    ///
    /// # Errors
    /// Any I/O error.
    fn create(&self, path: &Path) -> io::Result<Self::File>;

    /// Opens an existing file for reading and writing.
    ///
    /// # Errors
    /// `NotFound` when it does not exist; any I/O error.
    fn open(&self, path: &Path) -> io::Result<Self::File>;

    /// Opens an existing file for reading only (readers and `inspect`, which never write).
    ///
    /// # Errors
    /// `NotFound` when it does not exist; any I/O error.
    fn open_read(&self, path: &Path) -> io::Result<Self::File>;

    /// Renames `from` to `to`, replacing `to`.
    ///
    /// # Errors
    /// Any I/O error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes a file.
    ///
    /// # Errors
    /// Any I/O error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Makes the creates, renames and removals in directory `path` durable.
    ///
    /// # Errors
    /// Any I/O error.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
}

/// An open file: positional reads and writes, so one handle can serve several callers.
pub trait FsFile: Send + Sync + 'static {
    /// Writes `buf` at `offset`; may write fewer bytes than asked (the caller continues).
    ///
    /// # Errors
    /// Any I/O error (ENOSPC, EIO, ...).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;

    /// Writes `bufs` one after the other at `offset`; may write fewer bytes than asked (the
    /// caller continues). The default writes the first non-empty one with
    /// [`FsFile::write_at`].
    ///
    /// # Errors
    /// Any I/O error (ENOSPC, EIO, ...).
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(buf) => self.write_at(buf, offset),
            None => Ok(0),
        }
    }

    /// Reads into `buf` from `offset`; returns 0 at the end of the file.
    ///
    /// # Errors
    /// Any I/O error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Makes the file's data durable (`fdatasync`).
    ///
    /// # Errors
    /// Any I/O error. After an error the data written before it must be taken as lost: a later
    /// successful call on the same file does not prove it reached the disk.
    fn sync_data(&self) -> io::Result<()>;

    /// Truncates or extends the file to `len` bytes.
    ///
    /// # Errors
    /// Any I/O error.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// The file's current length in bytes.
    ///
    /// # Errors
    /// Any I/O error.
    fn len(&self) -> io::Result<u64>;

    /// Whether the file is empty.
    ///
    /// # Errors
    /// Any I/O error.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// Writes all of `buf` at `offset`, continuing after short writes.
///
/// # Errors
/// The first I/O error; `WriteZero` when a write makes no progress. The bytes before the error
/// may have been written.
pub(crate) fn write_all_at<F: FsFile + ?Sized>(
    file: &F,
    buf: &[u8],
    offset: u64,
) -> io::Result<()> {
    write_all_vectored_at(file, &mut [IoSlice::new(buf)], offset)
}

/// Writes all of `bufs`, one after the other, at `offset`, continuing after short writes (a
/// write takes at most `IOV_MAX` slices, 1,024 on Linux; the rest follows as after a short one).
///
/// # Errors
/// As [`write_all_at`].
pub(crate) fn write_all_vectored_at<F: FsFile + ?Sized>(
    file: &F,
    mut bufs: &mut [IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match file.write_vectored_at(bufs, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short write: no progress",
                ));
            }
            Ok(n) => {
                IoSlice::advance_slices(&mut bufs, n);
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf` from `offset`.
///
/// # Errors
/// `UnexpectedEof` when the file ends first; any I/O error.
pub(crate) fn read_exact_at<F: FsFile + ?Sized>(
    file: &F,
    buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = buf.get_mut(done..).unwrap_or_default();
        match file.read_at(rest, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ended early",
                ));
            }
            Ok(n) => {
                done += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads a whole file (recovery and `inspect` scan one segment at a time in memory).
///
/// # Errors
/// Any I/O error.
pub(crate) fn read_all<F: FsFile + ?Sized>(file: &F) -> io::Result<Vec<u8>> {
    let len = usize::try_from(file.len()?).map_err(io::Error::other)?;
    let mut data = vec![0; len];
    let mut done = 0;
    while done < len {
        let rest = data.get_mut(done..).unwrap_or_default();
        match file.read_at(rest, done as u64) {
            // Shrunk since len(): keep what is there.
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(done);
    Ok(data)
}

/// The real disk, through `std::fs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl FileSystem for RealFs {
    type File = File;

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.path()))
            .collect()
    }

    fn create(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    fn open(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(path)
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
}

impl FsFile for File {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        FileExt::write_at(self, buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        Ok(rustix::io::pwritev(self, bufs, offset)?)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

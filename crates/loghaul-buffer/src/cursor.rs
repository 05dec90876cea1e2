//! The ack cursor file: the highest sequence number through which every record is acknowledged.
//!
//! It is written whole, to `cursor.tmp` and renamed over `cursor`, so a crash leaves either the
//! old value or the new one, never a mix. A cursor that is missing or fails its check reads as 0:
//! everything in the buffer is delivered again, which is the safe side of at-least-once.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::fs::{FileSystem, FsFile, read_all, write_all_at};

/// The magic and version that start the cursor file.
const CURSOR_MAGIC: [u8; 8] = *b"LHCUR\0\x01\0";
/// magic, acked, crc.
const CURSOR_LEN: usize = 8 + 8 + 4;
/// The cursor's file name.
pub(crate) const CURSOR_NAME: &str = "cursor";
/// The name the cursor is written under before the rename.
pub(crate) const CURSOR_TMP_NAME: &str = "cursor.tmp";

/// What was found in the cursor file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CursorFile {
    /// A valid cursor: every sequence number up to and including this one is acknowledged.
    Valid(u64),
    /// No cursor file.
    #[default]
    Missing,
    /// A cursor file that fails its check (or could not be read): taken as 0.
    Damaged,
}

impl CursorFile {
    /// The acknowledged sequence number this file stands for (0 unless valid).
    pub fn acked(self) -> u64 {
        match self {
            CursorFile::Valid(acked) => acked,
            CursorFile::Missing | CursorFile::Damaged => 0,
        }
    }
}

impl fmt::Display for CursorFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CursorFile::Valid(acked) => write!(f, "{acked}"),
            CursorFile::Missing => f.write_str("missing"),
            CursorFile::Damaged => f.write_str("damaged"),
        }
    }
}

pub(crate) fn cursor_path(dir: &Path) -> PathBuf {
    dir.join(CURSOR_NAME)
}

fn encode(acked: u64) -> [u8; CURSOR_LEN] {
    let mut out = [0; CURSOR_LEN];
    let bytes = acked.to_le_bytes();
    let crc = crc32c::crc32c(&bytes).to_le_bytes();
    for (dst, src) in out
        .iter_mut()
        .zip(CURSOR_MAGIC.iter().chain(&bytes).chain(&crc))
    {
        *dst = *src;
    }
    out
}

fn decode(data: &[u8]) -> Option<u64> {
    if data.len() != CURSOR_LEN || data.get(..8)? != CURSOR_MAGIC {
        return None;
    }
    let acked: [u8; 8] = data.get(8..16)?.try_into().ok()?;
    let crc: [u8; 4] = data.get(16..20)?.try_into().ok()?;
    (crc32c::crc32c(&acked) == u32::from_le_bytes(crc)).then_some(u64::from_le_bytes(acked))
}

/// Reads the cursor of `dir`; never fails (an unreadable cursor is [`CursorFile::Damaged`]).
pub(crate) fn read<F: FileSystem>(fs: &F, dir: &Path) -> CursorFile {
    let path = cursor_path(dir);
    let file = match fs.open_read(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return CursorFile::Missing,
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "Failed to open the buffer's ack cursor.");
            return CursorFile::Damaged;
        }
    };
    match read_all(&file) {
        Ok(data) => decode(&data).map_or(CursorFile::Damaged, CursorFile::Valid),
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "Failed to read the buffer's ack cursor.");
            CursorFile::Damaged
        }
    }
}

/// Writes `acked` as the cursor of `dir`. With `durable`, the temporary file is synced before
/// the rename and the directory after it, so that the new cursor survives a power loss.
///
/// # Errors
/// Any I/O error; the old cursor is then still in place.
pub(crate) fn write<F: FileSystem>(
    fs: &F,
    dir: &Path,
    acked: u64,
    durable: bool,
) -> io::Result<()> {
    match write_new(fs, dir, acked, durable) {
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            ) =>
        {
            // A full file system has no block for a new file, and space comes back only when
            // segments are deleted, which waits for this cursor: overwrite the old cursor in
            // place instead (its block is already there). 20 bytes at offset 0 sit in one
            // sector; a torn write would still be caught by the checksum (read as damaged:
            // everything is delivered again, nothing lost).
            let _ = fs.remove_file(&dir.join(CURSOR_TMP_NAME));
            let file = fs.open(&cursor_path(dir)).map_err(|_| error)?;
            write_all_at(&file, &encode(acked), 0)?;
            if durable {
                file.sync_data()?;
            }
            Ok(())
        }
        other => other,
    }
}

/// The cursor written to a new file and renamed over the old one (atomic).
fn write_new<F: FileSystem>(fs: &F, dir: &Path, acked: u64, durable: bool) -> io::Result<()> {
    let tmp = dir.join(CURSOR_TMP_NAME);
    let file = fs.create(&tmp)?;
    write_all_at(&file, &encode(acked), 0)?;
    if durable {
        file.sync_data()?;
    }
    drop(file);
    fs.rename(&tmp, &cursor_path(dir))?;
    if durable {
        fs.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::testing::MemFs;

    #[test]
    fn round_trip() {
        let fs = MemFs::new();
        let dir = Path::new("/buf");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(read(&fs, dir), CursorFile::Missing);
        write(&fs, dir, 42, true).unwrap();
        assert_eq!(read(&fs, dir), CursorFile::Valid(42));
        write(&fs, dir, 7, false).unwrap();
        assert_eq!(read(&fs, dir), CursorFile::Valid(7));
        assert!(fs.read(&dir.join(CURSOR_TMP_NAME)).is_none());
    }

    #[test]
    fn damage_is_detected() {
        let fs = MemFs::new();
        let dir = Path::new("/buf");
        fs.create_dir_all(dir).unwrap();
        write(&fs, dir, 42, true).unwrap();
        fs.corrupt(&cursor_path(dir), 9, &[0x01]).unwrap();
        assert_eq!(read(&fs, dir), CursorFile::Damaged);
        fs.write_file(&cursor_path(dir), b"LHCUR").unwrap();
        assert_eq!(read(&fs, dir), CursorFile::Damaged);
    }
}

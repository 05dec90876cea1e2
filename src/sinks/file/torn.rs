//! Torn tails: the end of an output file that stops inside a line.
//!
//! ```text
//! {"message":"a",...}\n{"message":"b",...}\n{"messa       <- torn tail: no '\n' after it
//!                                           ^ cut here (ftruncate), to just after the last '\n'
//! ```
//!
//! A file sink's lines end in `\n`, and it appends with `O_APPEND`, so anything after a file's
//! last `\n` is a line some write did not finish: a process killed in the middle of a `writev`
//! (a fatal signal ends a large write early), or a write the disk had no room for. Appending to
//! such a file would glue the next line onto the torn one and make both unreadable, so the sink
//! cuts the torn tail first. Nothing acknowledged is lost by it: an event is acknowledged only
//! once its whole line is written, so a source that waits for acknowledgements sends the torn
//! one again.
//!
//! A cut reads the tail and then truncates, which is only safe if no one appends in between:
//! writers that may cut hold [`lock`] across the write and the cut.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// An exclusive `flock` on a file, released when dropped.
pub(super) struct Lock<'a>(&'a File);

/// Takes an exclusive `flock` on `file`, waiting for other loghaul writers of the same file to
/// finish their write (they hold it only that long). `None` where the file system refuses
/// locks, or when someone holds the file locked for longer than [`LOCK_WAIT`] (no loghaul
/// writer does; another program might, and must not stop the sink for good): the write then
/// goes ahead unguarded, as it would for a writer that takes no lock.
pub(super) fn lock(file: &File) -> Option<Lock<'_>> {
    use rustix::fs::{FlockOperation, flock};
    use rustix::io::Errno;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Some(Lock(file)),
            Err(Errno::INTR) => {}
            Err(Errno::WOULDBLOCK) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(_) => return None,
        }
    }
}

/// How long [`lock`] waits for a file someone else holds locked.
const LOCK_WAIT: Duration = Duration::from_secs(2);

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, rustix::fs::FlockOperation::Unlock);
    }
}

/// How much of the file is read per step when looking back for the last `\n`.
const STEP: u64 = 64 * 1024;

/// Cuts `file` back to just after its last `\n` (to 0 bytes if it holds none), and returns how
/// many bytes were cut: 0 when the file is empty or already ends with `\n`.
///
/// Reads backwards from the end, so the cost is the torn line's length, not the file's.
///
/// # Errors
///
/// The file cannot be read (it was opened without read access) or truncated.
pub(super) fn cut_torn_tail(file: &File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    let mut end = len;
    let mut block = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(STEP);
        // Both bounds are at most STEP apart, so the length fits in usize.
        block.resize((end - start) as usize, 0);
        file.read_exact_at(&mut block, start)?;
        if let Some(i) = memchr::memrchr(b'\n', &block) {
            let keep = start + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(len - keep);
        }
        end = start;
    }
    if len > 0 {
        file.set_len(0)?;
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::io::Write;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// Writes `content` to a fresh file, cuts its torn tail, and returns (bytes cut, what is left).
    fn cut(content: &[u8]) -> Result<(u64, Vec<u8>), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, content)?;
        let file = OpenOptions::new().read(true).append(true).open(&path)?;
        let n = cut_torn_tail(&file)?;
        Ok((n, std::fs::read(&path)?))
    }

    #[test]
    fn a_whole_or_empty_file_is_left_alone() -> TestResult {
        assert_eq!(cut(b"")?, (0, Vec::new()));
        assert_eq!(cut(b"a\nb\n")?, (0, b"a\nb\n".to_vec()));
        Ok(())
    }

    #[test]
    fn the_torn_line_is_cut_to_just_after_the_last_newline() -> TestResult {
        assert_eq!(cut(b"a\nbb\n{\"mess")?, (6, b"a\nbb\n".to_vec()));
        assert_eq!(cut(b"\nx")?, (1, b"\n".to_vec()));
        Ok(())
    }

    #[test]
    fn a_file_without_any_newline_is_emptied() -> TestResult {
        assert_eq!(cut(b"no newline at all")?, (17, Vec::new()));
        Ok(())
    }

    #[test]
    fn a_torn_line_longer_than_one_read_step_is_cut_whole() -> TestResult {
        // The last '\n' lies two steps back from the end, and the file has none before it.
        let mut content = vec![b'x'; 10];
        content.push(b'\n');
        let whole = content.len();
        content.extend(std::iter::repeat_n(b'y', 2 * STEP as usize + 17));
        let (n, left) = cut(&content)?;
        assert_eq!(n as usize, content.len() - whole);
        assert_eq!(left, content[..whole]);
        let (n, left) = cut(&vec![b'z'; STEP as usize * 3])?;
        assert_eq!((n, left.len()), (STEP * 3, 0));
        Ok(())
    }

    #[test]
    fn appends_after_a_cut_start_a_line() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"one\ntw")?;
        let mut file = OpenOptions::new().read(true).append(true).open(&path)?;
        assert_eq!(cut_torn_tail(&file)?, 2);
        // O_APPEND writes go to the new end, not to where the file ended before the cut.
        file.write_all(b"two\n")?;
        assert_eq!(std::fs::read(&path)?, b"one\ntwo\n");
        Ok(())
    }

    #[test]
    fn a_file_opened_without_read_access_reports_an_error() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"one\ntw")?;
        let file = OpenOptions::new().append(true).open(&path)?;
        assert!(cut_torn_tail(&file).is_err());
        assert_eq!(std::fs::read(&path)?, b"one\ntw", "nothing cut blind");
        Ok(())
    }

    #[test]
    fn the_lock_keeps_other_writers_of_the_file_out_until_dropped() -> TestResult {
        use rustix::fs::{FlockOperation, flock};
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.jsonl");
        let ours = OpenOptions::new().create(true).append(true).open(&path)?;
        let theirs = OpenOptions::new().append(true).open(&path)?;
        let held = lock(&ours).ok_or("no flock on the temp dir's file system")?;
        assert!(
            flock(&theirs, FlockOperation::NonBlockingLockExclusive).is_err(),
            "another open of the file got the lock while it was held"
        );
        drop(held);
        flock(&theirs, FlockOperation::NonBlockingLockExclusive)?;
        Ok(())
    }
}

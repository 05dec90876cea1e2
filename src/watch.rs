//! `--watch-config`: notices when the configuration file or a file it names changes, by
//! polling each file's identity (inode, size, modification time) twice a second. Polling, not
//! inotify: editors and deployment tools replace files by renaming over them, which ends an
//! inotify watch on the old inode; a poll of a handful of files costs nothing.

use std::path::PathBuf;
use std::time::Duration;

/// How often the files are looked at.
const POLL: Duration = Duration::from_millis(500);
/// A change is reported once the files have stayed the same this long (a tool writing several
/// files, or one file in several writes, is one reload).
const SETTLE: Duration = Duration::from_millis(300);

/// What identifies a file's version: `None` while it does not exist.
type Stamp = Option<(u64, u64, i64, i64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// Watches a set of files.
pub struct Watcher {
    files: Vec<(PathBuf, Stamp)>,
}

impl Watcher {
    pub fn new(files: Vec<PathBuf>) -> Watcher {
        let mut w = Watcher { files: Vec::new() };
        w.set_files(files);
        w
    }

    /// Watches `files` from now on (the set after a reload); a file already watched keeps the
    /// version it was last seen at.
    pub fn set_files(&mut self, files: Vec<PathBuf>) {
        let old = std::mem::take(&mut self.files);
        for path in files {
            let seen = old
                .iter()
                .find(|(p, _)| *p == path)
                .map_or_else(|| stamp(&path), |(_, s)| *s);
            if !self.files.iter().any(|(p, _)| *p == path) {
                self.files.push((path, seen));
            }
        }
    }

    /// Resolves once a watched file has changed (and then stayed the same for a moment).
    /// Cancel-safe: a change seen by a cancelled call is reported by the next.
    pub async fn changed(&mut self) {
        loop {
            tokio::time::sleep(POLL).await;
            if self.files.iter().any(|(p, s)| stamp(p) != *s) {
                break;
            }
        }
        let mut last: Vec<Stamp> = self.files.iter().map(|(p, _)| stamp(p)).collect();
        loop {
            tokio::time::sleep(SETTLE).await;
            let now: Vec<Stamp> = self.files.iter().map(|(p, _)| stamp(p)).collect();
            if now == last {
                break;
            }
            last = now;
        }
        for ((_, seen), now) in self.files.iter_mut().zip(last) {
            *seen = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_replaced_by_rename_is_a_change() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("loghaul.yaml");
        std::fs::write(&path, "a: 1\n")?;
        let mut w = Watcher::new(vec![path.clone()]);
        let quiet = tokio::time::timeout(Duration::from_millis(1200), w.changed()).await;
        assert!(quiet.is_err(), "nothing changed");
        let tmp = dir.path().join("new.yaml");
        std::fs::write(&tmp, "a: 2\n")?;
        std::fs::rename(&tmp, &path)?;
        tokio::time::timeout(Duration::from_secs(10), w.changed()).await?;
        let quiet = tokio::time::timeout(Duration::from_millis(1200), w.changed()).await;
        assert!(quiet.is_err(), "one change is reported once");
        Ok(())
    }
}

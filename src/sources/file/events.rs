//! File system events for the tailer: a write wakes it at once, and a file created, renamed or
//! removed in a watched directory asks for a rescan now rather than at the next `glob_interval`
//! (a file rotated away and replaced faster than a scan would otherwise go unseen).
//!
//! inotify watches directories, not globs: the tailer hands over the directories its files live
//! in and the fixed part of each `include` pattern. Polling stays as it was, so a file system
//! without inotify (NFS, some FUSE mounts) or a full `max_user_watches` only costs latency.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use notify::event::{EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

/// The directory watches of one tailer, and what they have seen since it last looked.
pub struct Events {
    watcher: Option<RecommendedWatcher>,
    rescan: Arc<AtomicBool>,
    watched: HashSet<PathBuf>,
}

impl Events {
    /// Watches nothing yet; events wake `thread` (the tailer's).
    pub fn new(thread: std::thread::Thread) -> (Events, Option<notify::Error>) {
        let rescan = Arc::new(AtomicBool::new(false));
        let flag = rescan.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else {
                // An overflowed queue or a watch gone bad: a scan finds what was missed.
                flag.store(true, Ordering::Release);
                thread.unpark();
                return;
            };
            match event.kind {
                EventKind::Create(_)
                | EventKind::Remove(_)
                | EventKind::Modify(ModifyKind::Name(_)) => {
                    flag.store(true, Ordering::Release);
                    thread.unpark();
                }
                // The tailer's own opens: nothing to do.
                EventKind::Access(_) => {}
                _ => thread.unpark(),
            }
        });
        match watcher {
            Ok(w) => (
                Events {
                    watcher: Some(w),
                    rescan,
                    watched: HashSet::new(),
                },
                None,
            ),
            Err(e) => (
                Events {
                    watcher: None,
                    rescan,
                    watched: HashSet::new(),
                },
                Some(e),
            ),
        }
    }

    /// Whether a file was created, renamed or removed since the last call.
    pub fn take_rescan(&self) -> bool {
        self.rescan.swap(false, Ordering::AcqRel)
    }

    /// Watches `dir` too, if it is not watched yet. A directory that cannot be watched (gone,
    /// out of watches) is left to polling.
    pub fn watch(&mut self, dir: &Path) {
        let Some(watcher) = &mut self.watcher else {
            return;
        };
        if self.watched.contains(dir) {
            return;
        }
        if watcher.watch(dir, RecursiveMode::NonRecursive).is_ok() {
            self.watched.insert(dir.to_path_buf());
        }
    }
}

/// The directory part of a glob before its first wildcard (`/var/log/*/app.log` → `/var/log`),
/// where new matches can appear.
pub fn fixed_dir(pattern: &str) -> PathBuf {
    let mut dir = PathBuf::new();
    let path = Path::new(pattern);
    let mut components = path.components().peekable();
    while let Some(c) = components.next() {
        if components.peek().is_none() {
            // The last component names files, not a directory.
            break;
        }
        let text = c.as_os_str().to_string_lossy();
        if text.contains(['*', '?', '[']) {
            break;
        }
        dir.push(c);
    }
    if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_dir_stops_at_the_first_wildcard() {
        assert_eq!(fixed_dir("/var/log/app/*.log"), Path::new("/var/log/app"));
        assert_eq!(fixed_dir("/var/log/*/app.log"), Path::new("/var/log"));
        assert_eq!(fixed_dir("/var/log/**/x.log"), Path::new("/var/log"));
        assert_eq!(fixed_dir("app.log"), Path::new("."));
        assert_eq!(fixed_dir("logs/a.log"), Path::new("logs"));
    }
}

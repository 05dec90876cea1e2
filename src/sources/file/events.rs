//! Directory events for the tailer: a file created, renamed or removed in a watched directory
//! asks for a rescan at the next pass rather than at the next `glob_interval`, so a file rotated
//! away and replaced faster than a scan is still found.
//!
//! Only directory-entry changes are watched (create, move, delete), never writes: an event per
//! write would cost the writing application and loghaul alike at high rates, and the tailer's
//! own polling already reads new bytes within milliseconds. The inotify descriptor is
//! non-blocking and read once per pass. The tailer hands over the directories its files live in
//! and the fixed part of each `include` pattern. A file system without inotify (NFS, some FUSE
//! mounts) or a full `max_user_watches` only costs latency: the globs are still matched every
//! `glob_interval`.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchMask};

/// The directory watches of one tailer.
pub struct Events {
    inotify: Option<Inotify>,
    watched: HashSet<PathBuf>,
    buf: Vec<u8>,
}

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF);

impl Events {
    /// Watches nothing yet. The error says why there are no events (the tailer polls then).
    pub fn new() -> (Events, Option<io::Error>) {
        let (inotify, error) = match Inotify::init() {
            Ok(i) => (Some(i), None),
            Err(e) => (None, Some(e)),
        };
        (
            Events {
                inotify,
                watched: HashSet::new(),
                buf: vec![0; 16 * 1024],
            },
            error,
        )
    }

    /// Whether a file was created, renamed or removed in a watched directory since the last
    /// call (or events were lost: the kernel's queue overflowed).
    pub fn take_rescan(&mut self) -> bool {
        let Some(inotify) = &mut self.inotify else {
            return false;
        };
        let mut any = false;
        let mut lost_watch = false;
        // Bounded: the queue holds at most max_queued_events, and every read drains some.
        for _ in 0..64 {
            match inotify.read_events(&mut self.buf) {
                Ok(events) => {
                    for event in events {
                        // A directory that went away takes its watch with it: all are added
                        // again at the next scan (adding an existing watch is harmless).
                        lost_watch |= event.mask.contains(EventMask::IGNORED);
                        any = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    any = true;
                    break;
                }
            }
        }
        if lost_watch {
            self.watched.clear();
        }
        any
    }

    /// Watches `dir` too, if it is not watched yet. A directory that cannot be watched (gone,
    /// out of watches) is left to the glob interval.
    pub fn watch(&mut self, dir: &Path) {
        let Some(inotify) = &mut self.inotify else {
            return;
        };
        if self.watched.contains(dir) {
            return;
        }
        if inotify.watches().add(dir, MASK).is_ok() {
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

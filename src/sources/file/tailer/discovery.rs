//! Finding files and following them: the glob scans, rotation (renamed, deleted, truncated,
//! rewritten files), the open-file limit, and releasing files that are gone.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::sources::file::checkpoint::{Check, Entry, FileId, Fingerprint};
use crate::sources::file::config::ReadFrom;
use crate::sources::file::events::{Events, fixed_dir};
use crate::sources::file::lines::Lines;

use super::{Tailer, Watched};

impl Tailer {
    pub(super) fn scan(&mut self, now: Instant) {
        let mut seen: HashSet<FileId> = HashSet::new();
        for pi in 0..self.config.include.len() {
            let pattern = self.config.include[pi].as_str().to_owned();
            let Ok(paths) = glob::glob(&pattern) else {
                continue;
            };
            for entry in paths {
                let path = match entry {
                    Ok(p) => p,
                    Err(e) => {
                        // A directory on the way that cannot be listed.
                        let path = e.path().to_path_buf();
                        self.report_unreadable(pi, &path, e.error());
                        continue;
                    }
                };
                if self.config.exclude.iter().any(|x| x.matches_path(&path)) {
                    continue;
                }
                let Ok(meta) = std::fs::metadata(&path) else {
                    // Gone between listing and stat.
                    continue;
                };
                if !meta.is_file() {
                    continue;
                }
                let id = FileId::of(&meta);
                if !seen.insert(id) {
                    // Another path (a hard link, a symlink, a second pattern) to a file already
                    // followed.
                    continue;
                }
                if let Some(w) = self.files.get_mut(&id) {
                    if w.path != path {
                        w.path = path;
                        self.dirty = true;
                    }
                    w.size_seen = meta.len();
                    w.gone_since = None;
                    continue;
                }
                self.discover(pi, path, id, meta.len(), now);
            }
        }
        for w in self.files.values_mut() {
            if !seen.contains(&w.id) && w.gone_since.is_none() {
                w.gone_since = Some(now);
            }
        }
        self.check_fingerprints();
        self.first_scan = false;
    }

    /// Watches the directories new matches may appear in, and those of the files followed.
    pub(super) fn watch_dirs(&self, events: &mut Events) {
        for pattern in &self.config.include {
            events.watch(&fixed_dir(pattern.as_str()));
        }
        for w in self.files.values() {
            if let Some(dir) = w.path.parent() {
                events.watch(if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                });
            }
        }
    }

    /// Start-up: a checkpointed file that no glob matches any more was most likely rotated by
    /// rename while loghaul was stopped. Look for it in its old directory by identity, and read
    /// it to its end before letting it go.
    pub(super) fn adopt_rotated_while_stopped(&mut self, now: Instant) {
        if self.saved.is_empty() {
            return;
        }
        let saved: Vec<Entry> = std::mem::take(&mut self.saved).into_values().collect();
        for entry in saved {
            if self.files.contains_key(&entry.id) {
                continue;
            }
            let found = entry
                .path
                .parent()
                .and_then(|dir| find_by_identity(dir, entry.id));
            let Some(path) = found else {
                tracing::debug!(component = %self.id, path = %entry.path.display(), "A checkpointed file is gone; forgetting it.");
                self.dirty = true;
                continue;
            };
            let pattern = self.pattern_of(&entry.path);
            match open_checked(&path, entry.id, &entry.fingerprint) {
                Ok(Some((file, fingerprint, size))) => {
                    // Shorter than the checkpoint says: the first turn sees it and starts over.
                    let mut w =
                        self.watched(entry.id, path, pattern, fingerprint, entry.offset, now);
                    w.size_seen = size;
                    w.gone_since = Some(now);
                    self.insert(w, Some(file));
                }
                Ok(None) => self.dirty = true,
                Err(e) => {
                    // Kept, and tried again at the next scan: its checkpoint must not be lost.
                    self.report_unreadable(pattern, &path, &e);
                    self.saved.insert(entry.id, entry);
                }
            }
        }
    }

    /// The include pattern a path belongs to (for counters), the first one when none matches.
    pub(super) fn pattern_of(&self, path: &Path) -> usize {
        self.config
            .include
            .iter()
            .position(|p| p.matches_path(path))
            .unwrap_or(0)
    }

    pub(super) fn discover(
        &mut self,
        pattern: usize,
        path: PathBuf,
        id: FileId,
        size: u64,
        now: Instant,
    ) {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                self.report_unreadable(pattern, &path, &e);
                return;
            }
        };
        self.unreadable.remove(&path);
        let fingerprint = match Fingerprint::read(&file) {
            Ok(fp) => fp,
            Err(e) => {
                self.report_unreadable(pattern, &path, &e);
                return;
            }
        };
        let mut truncated = false;
        let offset = match self.saved.remove(&id) {
            Some(entry) => match entry.fingerprint.check(&file) {
                Ok(Check::Same(_)) if entry.offset <= size => entry.offset,
                Ok(Check::Same(_)) => {
                    truncated = true;
                    0
                }
                // Another file on a reused inode, or rewritten from the start: new to us.
                _ => 0,
            },
            None if self.first_scan && self.fresh && self.config.read_from == ReadFrom::End => size,
            None => 0,
        };
        let mut w = self.watched(id, path, pattern, fingerprint, offset, now);
        w.size_seen = size;
        if truncated {
            self.count_truncation(&mut w);
        }
        self.insert(w, Some(file));
    }

    pub(super) fn watched(
        &self,
        id: FileId,
        path: PathBuf,
        pattern: usize,
        fingerprint: Fingerprint,
        offset: u64,
        now: Instant,
    ) -> Watched {
        Watched {
            id,
            path,
            pattern,
            fingerprint,
            file: None,
            read_pos: offset,
            carry: Vec::new(),
            carry_start: offset,
            committed: offset,
            lines: Lines::default(),
            generation: 0,
            last_growth: now,
            last_active: now,
            at_eof: false,
            size_seen: 0,
            gone_since: None,
            paused_until: None,
        }
    }

    /// Starts following `w`, holding `file` open if the limit allows.
    pub(super) fn insert(&mut self, mut w: Watched, file: Option<File>) {
        self.patterns[w.pattern]
            .opened
            .fetch_add(1, Ordering::Relaxed);
        if let Some(file) = file {
            if self.open < self.config.max_open_files || self.evict_one(None) {
                w.file = Some(file);
                self.open += 1;
            } else {
                self.patterns[w.pattern]
                    .closed
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        self.order.push(w.id);
        self.files.insert(w.id, w);
        self.dirty = true;
    }

    pub(super) fn report_unreadable(&mut self, pattern: usize, path: &Path, error: &io::Error) {
        if let Some(p) = self.patterns.get(pattern) {
            p.unreadable.fetch_add(1, Ordering::Relaxed);
        }
        if self.unreadable.insert(path.to_path_buf()) {
            tracing::warn!(component = %self.id, path = %path.display(), %error, "Cannot read a matched file; it is tried again at every scan (glob_interval).");
        }
    }

    /// Open files whose first bytes changed were rewritten (copytruncate, then written past our
    /// offset before we noticed it shrink): read them again from the start. Files that grew get
    /// a longer fingerprint.
    pub(super) fn check_fingerprints(&mut self) {
        let ids: Vec<FileId> = self
            .files
            .values()
            .filter(|w| w.file.is_some() && w.gone_since.is_none())
            .map(|w| w.id)
            .collect();
        for id in ids {
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            self.recheck(&mut w);
            self.files.insert(id, w);
        }
    }

    /// Compares an open file's first bytes with its fingerprint: the same content (the
    /// fingerprint grows with the file) or rewritten, then read again from 0. Returns whether
    /// it was rewritten. An unreadable prefix changes nothing (the next check tries again).
    pub(super) fn recheck(&mut self, w: &mut Watched) -> bool {
        let Some(file) = &w.file else {
            return false;
        };
        match w.fingerprint.check(file) {
            Ok(Check::Same(fp)) => {
                if fp != w.fingerprint {
                    w.fingerprint = fp;
                    self.dirty = true;
                }
                false
            }
            Ok(Check::Different | Check::Shorter) => {
                self.restart_truncated(w);
                true
            }
            Err(_) => false,
        }
    }

    pub(super) fn count_truncation(&self, w: &mut Watched) {
        self.patterns[w.pattern]
            .truncations
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(component = %self.id, path = %w.path.display(), "File truncated or rewritten; reading it from the start.");
    }

    /// The file was truncated or rewritten: everything is read again from offset 0.
    pub(super) fn restart_truncated(&mut self, w: &mut Watched) {
        self.count_truncation(w);
        // Offsets already read once that hold bytes again (a rewrite; after a plain truncation
        // to 0 there are none yet).
        let size = w
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        self.patterns[w.pattern]
            .reread_truncated
            .fetch_add(size.min(w.read_pos) as i64, Ordering::Relaxed);
        if let Some(file) = &w.file
            && let Ok(fp) = Fingerprint::read(file)
        {
            w.fingerprint = fp;
        }
        w.read_pos = 0;
        w.carry.clear();
        w.carry_start = 0;
        w.committed = 0;
        w.lines.reset();
        w.generation = w.generation.wrapping_add(1);
        w.at_eof = false;
        self.dirty = true;
    }

    /// Closes the least recently active open file that is idle (at its end, nothing held), to
    /// make room; never one renamed away or deleted (it could not be reopened). `except` is the
    /// file the room is for.
    pub(super) fn evict_one(&mut self, except: Option<FileId>) -> bool {
        let victim = self
            .files
            .values()
            .filter(|w| {
                w.file.is_some()
                    && w.gone_since.is_none()
                    && w.at_eof
                    && w.carry.is_empty()
                    && Some(w.id) != except
            })
            .min_by_key(|w| w.last_active)
            .map(|w| w.id);
        let Some(id) = victim else {
            return false;
        };
        if let Some(w) = self.files.get_mut(&id) {
            w.file = None;
            self.open -= 1;
            self.patterns[w.pattern]
                .closed
                .fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Reopens closed files that grew (by the last scan), least recently active first, as long
    /// as room can be made.
    pub(super) fn reopen(&mut self, now: Instant) {
        let mut wanting: Vec<(Instant, FileId)> = self
            .files
            .values()
            .filter(|w| w.file.is_none() && (w.size_seen != w.read_pos || w.gone_since.is_some()))
            .map(|w| (w.last_active, w.id))
            .collect();
        if wanting.is_empty() {
            return;
        }
        wanting.sort();
        for (_, id) in wanting {
            if self.open >= self.config.max_open_files && !self.evict_one(Some(id)) {
                return;
            }
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            // A file renamed away while closed is looked for in its directory.
            let path = if w.gone_since.is_some() {
                w.path.parent().and_then(|d| find_by_identity(d, w.id))
            } else {
                Some(w.path.clone())
            };
            let reopened = match path.map(|p| (open_checked(&p, w.id, &w.fingerprint), p)) {
                Some((Ok(Some((file, fp, size))), p)) => Some((p, file, fp, size)),
                Some((Err(e), p)) => {
                    // Unreadable for now (permissions): tried again on the next pass.
                    self.report_unreadable(w.pattern, &p, &e);
                    self.files.insert(id, w);
                    continue;
                }
                _ => None,
            };
            match reopened {
                Some((path, file, fingerprint, size)) => {
                    w.path = path;
                    w.fingerprint = fingerprint;
                    w.size_seen = size;
                    w.file = Some(file);
                    w.last_active = now;
                    w.at_eof = false;
                    self.open += 1;
                    self.patterns[w.pattern]
                        .opened
                        .fetch_add(1, Ordering::Relaxed);
                    self.files.insert(id, w);
                }
                None => {
                    // Deleted (or replaced: a new file, perhaps on the same inode) while closed:
                    // what was not read is lost, and said so. A new file at the path is found
                    // by the next scan.
                    let lost = w.size_seen.saturating_sub(w.read_pos);
                    self.patterns[w.pattern]
                        .skipped_deleted
                        .fetch_add(lost as i64, Ordering::Relaxed);
                    if lost > 0 {
                        crate::warn_limited!(self.metrics, path = %w.path.display(), bytes = lost, "A file was deleted while closed (max_open_files) before it was read to its end.");
                    }
                    self.forget(w.id);
                }
            }
        }
    }

    /// Lets go of files renamed away or deleted once they are read to their end, all their
    /// lines are committed and `rotate_wait` has passed without growth.
    pub(super) fn release_gone(&mut self, now: Instant) {
        let wait = self.config.rotate_wait;
        let done: Vec<FileId> = self
            .files
            .values()
            .filter(|w| {
                w.gone_since.is_some_and(|t| now >= t + wait)
                    && now >= w.last_growth + wait
                    && w.file.is_some()
                    && w.at_eof
            })
            .map(|w| w.id)
            .collect();
        if done.is_empty() {
            return;
        }
        let mut builder = self.new_builder();
        let mut release = Vec::new();
        for id in done {
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            // Its last line will get no newline now.
            self.flush_file(&mut w, &mut builder, true, now);
            self.files.insert(id, w);
            release.push(id);
        }
        // Without acknowledgements the flushed lines count as committed once sent; with them,
        // the file waits for a later pass.
        self.send(builder);
        for id in release {
            let Some(w) = self.files.get(&id) else {
                continue;
            };
            if w.committed < w.carry_start || !w.carry.is_empty() {
                continue;
            }
            if w.file.is_some() {
                self.open -= 1;
            }
            self.patterns[w.pattern]
                .released
                .fetch_add(1, Ordering::Relaxed);
            self.forget(id);
        }
    }

    pub(super) fn forget(&mut self, id: FileId) {
        if let Some(file) = self.files.remove(&id).and_then(|w| w.file) {
            self.closer.close(file);
        }
        self.order.retain(|o| *o != id);
        self.dirty = true;
    }
}

/// Opens `path` if it is still the file `id` with these first bytes: `Ok(None)` when it is
/// another file now.
fn open_checked(
    path: &Path,
    id: FileId,
    fingerprint: &Fingerprint,
) -> io::Result<Option<(File, Fingerprint, u64)>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if FileId::of(&meta) != id {
        return Ok(None);
    }
    match fingerprint.check(&file)? {
        Check::Same(fp) => Ok(Some((file, fp, meta.len()))),
        Check::Different | Check::Shorter => Ok(None),
    }
}

/// The entry of `dir` that is the file `id` (a file renamed within its directory).
fn find_by_identity(dir: &Path, id: FileId) -> Option<PathBuf> {
    let entries = std::fs::read_dir(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .ok()?;
    use std::os::unix::fs::DirEntryExt as _;
    for entry in entries.flatten() {
        if entry.ino() != id.ino {
            continue;
        }
        if let Ok(meta) = entry.metadata()
            && meta.is_file()
            && FileId::of(&meta) == id
        {
            return Some(entry.path());
        }
    }
    None
}

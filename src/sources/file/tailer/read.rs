//! Reading: one turn per open file, cutting lines into the pass's batch, emitting due partial
//! lines and multiline groups, and handing batches to the fan-out.

use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use loghaul_core::{
    BatchNotifier, Event, EventBatch, Field, Flags, OptSpan, Span, Timestamp, Value,
};

use crate::metrics::ErrorKind;
use crate::sources::file::checkpoint::FileId;

use super::{Builder, MAX_PENDING, Pending, SHUTDOWN_SEND, Tailer, Watched};

impl Tailer {
    /// One turn for every open file, batches sent as they fill. Returns how many bytes were
    /// read.
    pub(super) fn read_pass(&mut self, now: Instant) -> u64 {
        if self.pending.len() >= MAX_PENDING {
            // Acks lag far behind: wait a little for the oldest, and read nothing more until it
            // comes (what may need rewinding stays bounded).
            self.poll_acks(true);
            if self.pending.len() >= MAX_PENDING {
                return 0;
            }
        }
        let mut builder = self.new_builder();
        let mut progress = 0;
        let n = self.order.len();
        let start = self.next_turn % n.max(1);
        self.next_turn = self.next_turn.wrapping_add(1);
        for k in 0..n {
            let id = self.order[(start + k) % n];
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            progress += self.turn(&mut w, &mut builder, now);
            self.files.insert(id, w);
            if builder.arena.len() >= self.config.max_read_size {
                let full = std::mem::replace(&mut builder, self.new_builder());
                self.send(full);
                if self.shutdown.is_triggered() {
                    break;
                }
            }
        }
        self.send(builder);
        progress
    }

    /// Reads one file's next bytes into the batch. Returns how many were read (at least 1 when
    /// the file was found truncated: that is progress too).
    pub(super) fn turn(&mut self, w: &mut Watched, b: &mut Builder, now: Instant) -> u64 {
        let Some(file) = &w.file else {
            return 0;
        };
        if w.paused_until.is_some_and(|t| t > now) {
            return 0;
        }
        w.paused_until = None;
        // The size first: an idle file costs one fstat, and a read is sized to what is there
        // (the buffer is zeroed before reading, which should not happen for bytes not read).
        let size = match file.metadata() {
            Ok(meta) => meta.len(),
            Err(e) => {
                self.metrics.error(ErrorKind::Io, 1);
                crate::warn_limited!(self.metrics, path = %w.path.display(), error = %e, "Failed to stat a tailed file; trying again.");
                return 0;
            }
        };
        if size < w.read_pos {
            // Shorter than what was read: truncated (copytruncate, `> file`).
            self.restart_truncated(w);
            return 1;
        }
        let available = size - w.read_pos;
        if available == 0 {
            w.at_eof = true;
            return 0;
        }
        // A file that was at its end grew: make sure it is still the same content before
        // reading on at the old offset (copytruncate, then more written than was read: the size
        // alone cannot tell).
        if w.at_eof && self.recheck(w) {
            return 1;
        }
        let want = (self.config.max_read_size as u64).min(available) as usize;
        let base = b.arena.len();
        let from = w.carry.len();
        b.arena.reserve(from + want + w.path.as_os_str().len() + 64);
        b.arena.extend_from_slice(&w.carry);
        b.arena.resize(base + from + want, 0);
        let Some(file) = &w.file else {
            b.arena.truncate(base);
            return 0;
        };
        let read = pread_full(file, &mut b.arena[base + from..], w.read_pos);
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                b.arena.truncate(base);
                self.metrics.error(ErrorKind::Io, 1);
                crate::warn_limited!(self.metrics, path = %w.path.display(), error = %e, "Failed to read a tailed file; trying again.");
                return 0;
            }
        };
        b.arena.truncate(base + from + n);
        if n == 0 {
            // Shrank between the fstat and the read: the next turn sees it.
            b.arena.truncate(base);
            return 0;
        }
        w.at_eof = n as u64 == available;
        w.read_pos += n as u64;
        w.last_growth = now;
        w.last_active = now;
        let pm = &self.patterns[w.pattern];
        pm.read.fetch_add(n as i64, Ordering::Relaxed);
        self.pieces.clear();
        let progress = w.lines.split(
            &b.arena[base..],
            from,
            &self.config.rules,
            now,
            &mut self.pieces,
        );
        pm.skipped_long
            .fetch_add(progress.skipped as i64, Ordering::Relaxed);
        if progress.skipped > 0 {
            self.metrics.error(ErrorKind::Oversized, 1);
        }
        // Nearly every read is ASCII (one vectorised pass); only the others are checked line
        // by line.
        let check_utf8 = !loghaul_codec::is_ascii(&b.arena[base..]);
        self.emit(w, b, base, progress.keep_from, check_utf8);
        n as u64
    }

    /// Emits what is due in every file's carried bytes: partial lines whose writer paused for
    /// `partial_line_timeout` (all of them when `all`), multiline groups past their timeout.
    pub(super) fn flush_due(&mut self, now: Instant, all: bool) -> bool {
        let mut builder = self.new_builder();
        let mut any = false;
        let ids: Vec<FileId> = self
            .files
            .values()
            .filter(|w| {
                let partial = w.lines.holds(w.carry.len())
                    && (all || now >= w.last_growth + self.config.partial_line_timeout)
                    && read_to_the_end(w);
                let group = w
                    .lines
                    .group_deadline(&self.config.rules)
                    .is_some_and(|d| d <= now);
                partial || group
            })
            .map(|w| w.id)
            .collect();
        for id in ids {
            let Some(mut w) = self.files.remove(&id) else {
                continue;
            };
            let partial_due = (all || now >= w.last_growth + self.config.partial_line_timeout)
                && read_to_the_end(&w);
            any |= self.flush_file(&mut w, &mut builder, partial_due, now);
            self.files.insert(id, w);
        }
        self.send(builder);
        any
    }

    pub(super) fn flush_file(
        &mut self,
        w: &mut Watched,
        b: &mut Builder,
        partial_due: bool,
        now: Instant,
    ) -> bool {
        let base = b.arena.len();
        b.arena.extend_from_slice(&w.carry);
        let from_len = w.carry.len();
        self.pieces.clear();
        let progress = w.lines.flush(
            &b.arena[base..],
            partial_due,
            &self.config.rules,
            now,
            &mut self.pieces,
        );
        let emitted = !self.pieces.is_empty();
        if progress.keep_from == 0 && !emitted {
            b.arena.truncate(base);
            return false;
        }
        debug_assert!(progress.keep_from <= from_len);
        self.emit(w, b, base, progress.keep_from, true);
        emitted
    }

    /// Turns `self.pieces` (spans of the region at `b.arena[base..]`) into events, carries the
    /// region's bytes from `keep_from` on, and records where this file's events end.
    pub(super) fn emit(
        &mut self,
        w: &mut Watched,
        b: &mut Builder,
        base: usize,
        keep_from: usize,
        check_utf8: bool,
    ) {
        let region_offset = w.carry_start;
        w.carry.clear();
        w.carry.extend_from_slice(&b.arena[base + keep_from..]);
        b.arena.truncate(base + keep_from);
        w.carry_start = region_offset + keep_from as u64;
        if self.pieces.is_empty() && keep_from == 0 {
            return;
        }
        b.ends.push((w.id, w.generation, w.carry_start));
        if self.pieces.is_empty() {
            return;
        }
        let keys = b.keys;
        let path = keys.file.map(|_| {
            let start = b.arena.len();
            b.arena.extend_from_slice(w.path.as_os_str().as_bytes());
            Span::new(start, b.arena.len())
        });
        let shared = |fields: &mut Vec<Field>| {
            if let (Some(name), Some(value)) = (keys.file, path) {
                fields.push(Field {
                    name,
                    value: Value::Str(value),
                });
            }
            if let Some((name, value)) = keys.host {
                fields.push(Field {
                    name,
                    value: Value::Str(value),
                });
            }
        };
        // Without an offset field, every event of this file's turn shares one record range.
        let shared_range = if keys.offset.is_none() {
            let start = b.fields.len() as u32;
            shared(&mut b.fields);
            Some((start, b.fields.len() as u32))
        } else {
            None
        };
        // Sized once for the turn's lines: pushed one by one, the table grew by doubling,
        // copying itself each time and ending up to twice the size it needed.
        b.events.reserve(self.pieces.len());
        let mut invalid_utf8 = 0u64;
        for i in 0..self.pieces.len() {
            let piece = self.pieces[i];
            let (mut start, mut end) = (base + piece.start, base + piece.end);
            if piece.inner_cr {
                // A multiline group written with CRLF: its inner `\r`s go, which needs a copy.
                let text = b.arena[start..end].to_vec();
                start = b.arena.len();
                let mut rest = &text[..];
                while let Some(i) = memchr::memchr(b'\n', rest) {
                    let line = &rest[..i];
                    b.arena
                        .extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
                    b.arena.push(b'\n');
                    rest = &rest[i + 1..];
                }
                b.arena.extend_from_slice(rest);
                end = b.arena.len();
            }
            let fields = match shared_range {
                Some(range) => range,
                None => {
                    let first = b.fields.len() as u32;
                    shared(&mut b.fields);
                    if let Some(name) = keys.offset {
                        let offset = region_offset + piece.start as u64;
                        b.fields.push(Field {
                            name,
                            value: Value::Int(offset.min(i64::MAX as u64) as i64),
                        });
                    }
                    (first, b.fields.len() as u32)
                }
            };
            let mut flags = Flags::default();
            if piece.truncated {
                flags.insert(Flags::TRUNCATED);
            }
            if check_utf8 && std::str::from_utf8(&b.arena[start..end]).is_err() {
                // Kept as read; encoders replace the bad bytes on output.
                flags.insert(Flags::INVALID_UTF8);
                invalid_utf8 += 1;
            }
            b.events.push(Event {
                message: OptSpan::some(Span::new(start, end)),
                fields,
                flags,
                ..Event::default()
            });
        }
        if invalid_utf8 > 0 {
            self.metrics.error(ErrorKind::InvalidUtf8, invalid_utf8);
        }
    }

    pub(super) fn send(&mut self, b: Builder) {
        if b.ends.is_empty() {
            return;
        }
        if b.events.is_empty() {
            // Only skipped bytes: nothing to deliver, but with acknowledgements the checkpoint
            // must still not pass batches sent before and not yet acknowledged, so the ends
            // queue behind them (a receiver resolved at once).
            if self.acknowledgements && !self.pending.is_empty() {
                let (finalizer, status) = BatchNotifier::new_with_receiver();
                drop(finalizer);
                self.pending.push_back(Pending {
                    status,
                    ends: b.ends,
                });
            } else {
                self.apply_ends(&b.ends);
            }
            return;
        }
        let bytes = b.arena.len();
        let mut batch = EventBatch::new(Bytes::from(b.arena), self.id.clone(), "file");
        batch.events = b.events;
        batch.fields = b.fields;
        batch.received = Timestamp::now();
        self.metrics.received(batch.len(), bytes);
        let status = if self.acknowledgements {
            let (finalizer, status) = BatchNotifier::new_with_receiver();
            batch.finalizer = finalizer;
            Some(status)
        } else {
            None
        };
        let fanout = &self.fanout;
        let mut shutdown = self.shutdown.clone();
        // Waits as long as the sinks push back, except once the server stops: then a sink that
        // takes nothing more for SHUTDOWN_SEND does not hold the stop up (the batch is dropped,
        // its lines stay past the checkpoint and are read again at the next start).
        let sent = self.handle.block_on(async move {
            let send = fanout.send(batch);
            tokio::pin!(send);
            tokio::select! {
                () = &mut send => true,
                () = shutdown.wait() => tokio::time::timeout(SHUTDOWN_SEND, &mut send).await.is_ok(),
            }
        });
        match status {
            Some(status) => self.pending.push_back(Pending {
                status,
                ends: b.ends,
            }),
            None if sent => self.apply_ends(&b.ends),
            // Not queued: the checkpoint stays before these lines, so a restart reads them.
            None => {}
        }
    }
}

/// Whether everything the file holds was read: only then is a line without its newline complete
/// as far as anyone can know. A read that stopped short (a turn's `max_read_size`, back-pressure)
/// leaves the rest of that line in the file; emitting its first part (at a stop, or after
/// `partial_line_timeout`) cut it in two, and the checkpoint past it lost the line whole.
fn read_to_the_end(w: &Watched) -> bool {
    w.at_eof
        && w.file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .is_none_or(|m| m.len() <= w.read_pos)
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the file.
fn pread_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                // A short read of a regular file is its end: save the call that returns 0.
                if n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

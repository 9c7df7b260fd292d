//! The on-disk log of a disk buffer: numbered records in segment files, a cursor saying
//! which were delivered, recovery after a crash.
//!
//! A directory holds segment files named by the number of their first record
//! (`00000000000000000042.seg`), a `cursor` file (every record numbered below it was
//! delivered) and a `lock` file that keeps a second process out. A segment starts with
//! [`MAGIC`]; each record is a [`HEADER`] (payload length, CRC-32 of the rest of the header
//! and the payload, record number, time written in ms since the epoch) and the payload. Records
//! are appended by one writer, which syncs the file after each group of them; only synced
//! records are visible to the reader. On open, the last segment is scanned and a torn or
//! corrupt tail is cut off (and reported); a corrupt record in an older segment is found by
//! the reader, which reports it and goes on with the next segment.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The first bytes of every segment file.
pub const MAGIC: &[u8; 8] = b"PSTKBUF1";
/// Bytes of a record's header.
pub const HEADER: usize = 24;
/// The largest payload a record may have.
pub const MAX_PAYLOAD: usize = 1 << 30;

/// A record read back.
#[derive(Debug)]
pub struct Record {
    /// Its number.
    pub seq: u64,
    /// When it was written, in ms since the epoch.
    pub written_ms: u64,
    /// What was written.
    pub payload: Vec<u8>,
}

/// A tail cut off on open, or a corrupt record the reader skipped past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub segment: PathBuf,
    /// Where in it the damage starts.
    pub offset: u64,
    /// Bytes not read from there to the segment's end.
    pub bytes: u64,
    /// What was wrong.
    pub reason: String,
}

/// What opening a log found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Records written and not delivered (to be replayed).
    pub pending: u64,
    /// Bytes of the segments kept.
    pub bytes: u64,
    /// A torn or corrupt tail cut off the last segment.
    pub cut: Option<Damage>,
    /// The cursor file was unreadable: every record kept is replayed.
    pub cursor_lost: bool,
}

#[derive(Debug)]
struct Segment {
    first: u64,
    bytes: u64,
}

#[derive(Debug)]
struct LogState {
    segments: VecDeque<Segment>,
    next_seq: u64,
    bytes: u64,
    delivered: u64,
    writer_done: bool,
}

/// A disk buffer's log, shared by its writer and its reader.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    segment_bytes: u64,
    state: Mutex<LogState>,
    space: Condvar,
    saved: Mutex<u64>,
    /// Signalled after each append (and when the writer is done).
    pub appended: tokio::sync::Notify,
    _lock: File,
}

/// The append end of a log (one per log).
#[derive(Debug)]
pub struct Writer {
    file: File,
    len: u64,
}

/// The read end of a log (one per log): reads synced records in order.
#[derive(Debug)]
pub struct Reader {
    next_seq: u64,
    /// The segment being read (its first record), the file, and the offset of the next
    /// record in it.
    open: Option<(u64, File, u64)>,
}

/// What the reader found next.
#[derive(Debug)]
pub enum Next {
    /// A record.
    Record(Record),
    /// Nothing more is synced yet.
    Empty,
    /// A corrupt record: the rest of its segment was skipped.
    Corrupt(Damage),
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

fn checksum(header_tail: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header_tail);
    hasher.update(payload);
    hasher.finalize()
}

/// Appends one record to `out`.
fn frame(out: &mut Vec<u8>, seq: u64, written_ms: u64, payload: &[u8]) {
    let mut tail = [0u8; 16];
    tail[..8].copy_from_slice(&seq.to_le_bytes());
    tail[8..].copy_from_slice(&written_ms.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(&tail, payload).to_le_bytes());
    out.extend_from_slice(&tail);
    out.extend_from_slice(payload);
}

/// Reads the record at the reader's position, `remaining` bytes before the file's end:
/// `Ok(None)` at a clean end of file, `Err` with the reason for a torn or corrupt one.
fn read_record(
    input: &mut impl Read,
    remaining: u64,
) -> io::Result<Result<Option<Record>, String>> {
    let mut header = [0u8; HEADER];
    let mut filled = 0;
    while filled < HEADER {
        match input.read(&mut header[filled..])? {
            0 if filled == 0 => return Ok(Ok(None)),
            0 => return Ok(Err(format!("a header torn after {filled} bytes"))),
            n => filled += n,
        }
    }
    let len = u32::from_le_bytes(header[..4].try_into().unwrap_or_default()) as usize;
    if len as u64 > remaining.saturating_sub(HEADER as u64) {
        return Ok(Err(format!(
            "a record torn: its {len} bytes go past the end of the segment"
        )));
    }
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload)?;
    Ok(parse(&header, payload).map(Some))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering what a crash left; segments roll over
    /// past `segment_bytes`. Fails when another process holds the directory.
    pub fn open(dir: &Path, segment_bytes: u64) -> io::Result<(Log, Writer, Recovery)> {
        std::fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        lock.try_lock().map_err(|_| {
            io::Error::new(
                io::ErrorKind::WouldBlock,
                "another process uses this buffer directory",
            )
        })?;
        let mut recovery = Recovery::default();
        let (delivered, cursor_lost) = read_cursor(dir);
        recovery.cursor_lost = cursor_lost;
        let mut firsts = list_segments(dir)?;
        // Segments every record of which was delivered (the next one starts at or below the
        // cursor) are gone already as far as the reader is concerned.
        while firsts.len() > 1 && firsts[1] <= delivered {
            std::fs::remove_file(segment_path(dir, firsts.remove(0)))?;
        }
        let mut segments = VecDeque::new();
        for &first in firsts.iter().take(firsts.len().saturating_sub(1)) {
            let bytes = std::fs::metadata(segment_path(dir, first))?.len();
            segments.push_back(Segment { first, bytes });
        }
        let mut last_first = firsts.last().copied().unwrap_or(delivered);
        let (mut file, mut len, mut next_seq, mut cut) = recover_last(dir, last_first)?;
        // An empty last segment (a roll cut short) says nothing of the numbering: the one
        // before it does.
        while next_seq == last_first && len == MAGIC.len() as u64 && cut.is_none() {
            let Some(previous) = segments.pop_back() else {
                break;
            };
            drop(file);
            std::fs::remove_file(segment_path(dir, last_first))?;
            last_first = previous.first;
            (file, len, next_seq, cut) = recover_last(dir, last_first)?;
        }
        recovery.cut = cut;
        segments.push_back(Segment {
            first: last_first,
            bytes: len,
        });
        let bytes = segments.iter().map(|s| s.bytes).sum();
        if delivered > next_seq {
            // The cursor ran ahead of a log whose tail was cut: numbers from `next_seq` on
            // are new records.
            write_cursor(dir, next_seq)?;
        }
        let delivered = delivered.min(next_seq);
        let oldest = segments.front().map_or(delivered, |s| s.first);
        recovery.pending = next_seq.saturating_sub(delivered.max(oldest));
        recovery.bytes = bytes;
        let log = Log {
            dir: dir.to_path_buf(),
            segment_bytes,
            state: Mutex::new(LogState {
                segments,
                next_seq,
                bytes,
                delivered,
                writer_done: false,
            }),
            space: Condvar::new(),
            saved: Mutex::new(delivered),
            appended: tokio::sync::Notify::new(),
            _lock: lock,
        };
        let writer = Writer { file, len };
        Ok((log, writer, recovery))
    }

    fn state(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of the segments on disk.
    pub fn bytes(&self) -> u64 {
        self.state().bytes
    }

    /// Records written and not yet delivered.
    pub fn pending(&self) -> u64 {
        let state = self.state();
        state.next_seq.saturating_sub(state.delivered)
    }

    /// Whether `more` bytes fit under `max` now.
    pub fn fits(&self, more: u64, max: u64) -> bool {
        self.state().bytes + more <= max
    }

    /// Waits until `more` bytes fit under `max` (true) or `patience` passed (false).
    pub fn wait_for_room(&self, more: u64, max: u64, patience: Duration) -> bool {
        let state = self.state();
        let (state, _) = self
            .space
            .wait_timeout_while(state, patience, |s| s.bytes + more > max)
            .unwrap_or_else(|e| e.into_inner());
        state.bytes + more <= max
    }

    /// Appends `payloads` as consecutive records and syncs them to disk; they are then
    /// visible to the reader. On failure nothing of them stays in the log.
    pub fn append(&self, writer: &mut Writer, payloads: &[Vec<u8>]) -> io::Result<()> {
        let written_ms = now_ms();
        let first_seq = self.state().next_seq;
        let mut frames = Vec::with_capacity(payloads.iter().map(|p| p.len() + HEADER).sum());
        for (i, payload) in payloads.iter().enumerate() {
            frame(&mut frames, first_seq + i as u64, written_ms, payload);
        }
        if writer.len > MAGIC.len() as u64 && writer.len + frames.len() as u64 > self.segment_bytes
        {
            self.roll(writer, first_seq)?;
        }
        let result = writer
            .file
            .write_all(&frames)
            .and_then(|()| writer.file.sync_data());
        if let Err(e) = result {
            // Leave no partial record behind for the next append to follow.
            let _ = writer.file.set_len(writer.len);
            let _ = writer.file.seek(SeekFrom::Start(writer.len));
            return Err(e);
        }
        writer.len += frames.len() as u64;
        let mut state = self.state();
        state.next_seq = first_seq + payloads.len() as u64;
        state.bytes += frames.len() as u64;
        if let Some(last) = state.segments.back_mut() {
            last.bytes = writer.len;
        }
        drop(state);
        self.appended.notify_one();
        Ok(())
    }

    /// Starts a new segment at record `first`.
    fn roll(&self, writer: &mut Writer, first: u64) -> io::Result<()> {
        let (file, len) = create_segment(&self.dir, first)?;
        *writer = Writer { file, len };
        let mut state = self.state();
        state.segments.push_back(Segment { first, bytes: len });
        state.bytes += len;
        Ok(())
    }

    /// Notes that the writer appends no more.
    pub fn writer_done(&self) {
        self.state().writer_done = true;
        self.appended.notify_one();
    }

    /// Whether the writer appends no more.
    pub fn is_writer_done(&self) -> bool {
        self.state().writer_done
    }

    /// Notes that every record numbered below `upto` was delivered: segments holding only
    /// such records are deleted (never the one being appended to). The cursor is saved when
    /// a segment goes, else by [`Log::save_cursor`].
    pub fn release(&self, upto: u64) -> io::Result<()> {
        {
            let mut state = self.state();
            if upto <= state.delivered {
                return Ok(());
            }
            state.delivered = upto;
        }
        self.prune()
    }

    /// Deletes the segments every record of which was delivered.
    fn prune(&self) -> io::Result<()> {
        let mut state = self.state();
        let upto = state.delivered;
        let mut removed = Vec::new();
        while state.segments.len() > 1 && state.segments[1].first <= upto {
            if let Some(segment) = state.segments.pop_front() {
                state.bytes -= segment.bytes;
                removed.push(segment.first);
            }
        }
        drop(state);
        if removed.is_empty() {
            return Ok(());
        }
        self.space.notify_all();
        self.save_cursor()?;
        for first in removed {
            std::fs::remove_file(segment_path(&self.dir, first))?;
        }
        Ok(())
    }

    /// Makes room when the buffer is full: if records of the segment being appended to were
    /// delivered already, a new segment starts, so that one can go once the rest of it is
    /// delivered (else a buffer of about one segment would stay full for good).
    pub fn make_room(&self, writer: &mut Writer) -> io::Result<()> {
        let (next_seq, delivered, active) = {
            let state = self.state();
            let active = state.segments.back().map_or(0, |s| s.first);
            (state.next_seq, state.delivered, active)
        };
        if writer.len > MAGIC.len() as u64 && delivered > active {
            self.roll(writer, next_seq)?;
            self.prune()?;
        }
        Ok(())
    }

    /// Saves the cursor if it moved since it was last saved (a cursor lost in a crash only
    /// means records delivered since are sent again).
    pub fn save_cursor(&self) -> io::Result<()> {
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let delivered = self.state().delivered;
        if *saved == delivered {
            return Ok(());
        }
        write_cursor(&self.dir, delivered)?;
        *saved = delivered;
        Ok(())
    }

    /// The number the next record appended gets: every record below it is synced.
    pub fn committed(&self) -> u64 {
        self.state().next_seq
    }

    /// A reader starting at the first record not delivered.
    pub fn reader(&self) -> Reader {
        Reader {
            next_seq: self.state().delivered,
            open: None,
        }
    }

    /// The segment holding record `seq` (or the first after it), and whether it is the last.
    fn segment_for(&self, seq: u64) -> Option<(u64, bool)> {
        let state = self.state();
        let index = state
            .segments
            .iter()
            .rposition(|s| s.first <= seq)
            .unwrap_or(0);
        let segment = state.segments.get(index)?;
        Some((segment.first, index + 1 == state.segments.len()))
    }

    /// The synced length of segment `first` (0 when it is gone).
    fn synced_len(&self, first: u64) -> u64 {
        let state = self.state();
        state
            .segments
            .iter()
            .find(|s| s.first == first)
            .map_or(0, |s| s.bytes)
    }

    /// The first record of the segment after the one starting at `first`.
    fn next_segment(&self, first: u64) -> Option<u64> {
        let state = self.state();
        state.segments.iter().map(|s| s.first).find(|f| *f > first)
    }
}

impl Reader {
    /// The number of the next record to read.
    pub fn position(&self) -> u64 {
        self.next_seq
    }

    /// Reads the next synced record. Only synced bytes are read (each segment up to the
    /// length its last sync left), with positioned reads: nothing a failed append leaves in
    /// the file for a moment is ever seen.
    pub fn next(&mut self, log: &Log) -> io::Result<Next> {
        use std::os::unix::fs::FileExt;
        loop {
            let committed = log.state().next_seq;
            if self.next_seq >= committed {
                return Ok(Next::Empty);
            }
            let (first, file, offset) = match self.open.take() {
                Some(open) => open,
                None => {
                    let Some((first, _)) = log.segment_for(self.next_seq) else {
                        return Ok(Next::Empty);
                    };
                    let file = File::open(segment_path(&log.dir, first))?;
                    self.next_seq = self.next_seq.max(first);
                    (first, file, MAGIC.len() as u64)
                }
            };
            let synced = log.synced_len(first);
            if offset >= synced {
                match log.next_segment(first) {
                    Some(next) if offset == synced => {
                        self.next_seq = self.next_seq.max(next);
                        continue;
                    }
                    _ => {
                        self.open = Some((first, file, offset));
                        return Ok(Next::Empty);
                    }
                }
            }
            let mut header = [0u8; HEADER];
            let damage = |reason: String| Damage {
                segment: segment_path(&log.dir, first),
                offset,
                bytes: synced - offset,
                reason,
            };
            let record = if synced - offset < HEADER as u64 {
                Err(damage(format!(
                    "a header torn after {} bytes",
                    synced - offset
                )))
            } else {
                file.read_exact_at(&mut header, offset)?;
                let len = u32::from_le_bytes(header[..4].try_into().unwrap_or_default()) as u64;
                if len > synced - offset - HEADER as u64 {
                    Err(damage(format!(
                        "a record torn: its {len} bytes go past the end of the segment"
                    )))
                } else {
                    let mut payload = vec![0u8; len as usize];
                    file.read_exact_at(&mut payload, offset + HEADER as u64)?;
                    parse(&header, payload).map_err(damage)
                }
            };
            match record {
                Ok(record) => {
                    let end = offset + (HEADER + record.payload.len()) as u64;
                    self.open = Some((first, file, end));
                    if record.seq < self.next_seq {
                        continue;
                    }
                    self.next_seq = record.seq + 1;
                    return Ok(Next::Record(record));
                }
                Err(damage) => {
                    // Go on after the damage: in the next segment, or (in the one being
                    // appended to) after what is synced now.
                    match log.next_segment(first) {
                        Some(next) => self.next_seq = self.next_seq.max(next),
                        None => {
                            self.next_seq = committed;
                            self.open = Some((first, file, synced));
                        }
                    }
                    return Ok(Next::Corrupt(damage));
                }
            }
        }
    }
}

/// A record from its header and payload; the reason when its checksum does not match.
fn parse(header: &[u8; HEADER], payload: Vec<u8>) -> Result<Record, String> {
    let crc = u32::from_le_bytes(header[4..8].try_into().unwrap_or_default());
    if checksum(&header[8..], &payload) != crc {
        return Err("a record whose checksum does not match".to_string());
    }
    Ok(Record {
        seq: u64::from_le_bytes(header[8..16].try_into().unwrap_or_default()),
        written_ms: u64::from_le_bytes(header[16..24].try_into().unwrap_or_default()),
        payload,
    })
}

/// Creates segment `first` with its magic, synced along with the directory.
fn create_segment(dir: &Path, first: u64) -> io::Result<(File, u64)> {
    let path = segment_path(dir, first);
    let created = (|| {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        file.write_all(MAGIC)?;
        file.sync_all()?;
        File::open(dir)?.sync_all()?;
        Ok((file, MAGIC.len() as u64))
    })();
    if created.is_err() {
        // A segment left half made would be taken for the last one at the next start.
        let _ = std::fs::remove_file(&path);
    }
    created
}

/// Opens the last segment for appending after its last whole record, cutting off a torn or
/// corrupt tail: the file, its length, the next record number and the damage cut.
fn recover_last(dir: &Path, first: u64) -> io::Result<(File, u64, u64, Option<Damage>)> {
    let path = segment_path(dir, first);
    let Ok(mut file) = OpenOptions::new().read(true).write(true).open(&path) else {
        let (file, len) = create_segment(dir, first)?;
        return Ok((file, len, first, None));
    };
    let size = file.metadata()?.len();
    let mut magic = [0u8; 8];
    if size < MAGIC.len() as u64 || file.read_exact(&mut magic).is_err() || &magic != MAGIC {
        drop(file);
        let (file, len) = create_segment(dir, first)?;
        let cut = (size > 0).then(|| Damage {
            segment: path,
            offset: 0,
            bytes: size,
            reason: "a segment without its header".to_string(),
        });
        return Ok((file, len, first, cut));
    }
    let mut input = BufReader::with_capacity(1 << 20, &mut file);
    let mut len = MAGIC.len() as u64;
    let mut next_seq = first;
    let mut cut = None;
    loop {
        match read_record(&mut input, size - len)? {
            Ok(Some(record)) => {
                len += (HEADER + record.payload.len()) as u64;
                next_seq = record.seq + 1;
            }
            Ok(None) => break,
            Err(reason) => {
                cut = Some(Damage {
                    segment: path.clone(),
                    offset: len,
                    bytes: size - len,
                    reason,
                });
                break;
            }
        }
    }
    drop(input);
    if cut.is_some() {
        file.set_len(len)?;
        file.sync_all()?;
    }
    file.seek(SeekFrom::Start(len))?;
    Ok((file, len, next_seq, cut))
}

/// The segments in `dir`, by first record.
fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut firsts = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(first) = name.strip_suffix(".seg").and_then(|n| n.parse().ok()) {
            firsts.push(first);
        }
    }
    firsts.sort_unstable();
    Ok(firsts)
}

/// The saved cursor (0 when there is none), and whether a cursor file was unreadable.
fn read_cursor(dir: &Path) -> (u64, bool) {
    let Ok(bytes) = std::fs::read(dir.join("cursor")) else {
        return (0, false);
    };
    let valid = bytes.len() == 12 && crc32fast::hash(&bytes[..8]).to_le_bytes() == bytes[8..12];
    match valid {
        true => (
            u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default()),
            false,
        ),
        false => (0, true),
    }
}

/// Saves the cursor (write and rename; not synced: a lost cursor only replays records).
fn write_cursor(dir: &Path, upto: u64) -> io::Result<()> {
    let mut bytes = upto.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&bytes).to_le_bytes());
    let temporary = dir.join("cursor.new");
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(temporary, dir.join("cursor"))
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;

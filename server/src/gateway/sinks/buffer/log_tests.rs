//! The log on disk: order, replay after reopening, torn tails, corrupt records, segments.

use super::{Log, Next, Reader};
use std::path::PathBuf;

/// A directory of its own for one test, removed when the test ends (passed or failed).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("penstock-log-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Scratch(dir)
}

fn payload(n: u64) -> Vec<u8> {
    format!("batch {n} ").repeat(10).into_bytes()
}

/// Reads until the reader has nothing more: record numbers, and damage found.
fn read_all(log: &Log, reader: &mut Reader) -> (Vec<u64>, usize) {
    let (mut seqs, mut damaged) = (Vec::new(), 0);
    loop {
        match reader.next(log).expect("reads") {
            Next::Record(record) => {
                assert_eq!(record.payload, payload(record.seq));
                seqs.push(record.seq);
            }
            Next::Corrupt(_) => damaged += 1,
            Next::Empty => return (seqs, damaged),
        }
    }
}

fn segments(dir: &PathBuf) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
}

#[test]
fn records_come_back_in_order_and_undelivered_ones_after_reopening() {
    let dir = scratch("order");
    let (log, mut writer, recovery) = Log::open(&dir, 1 << 20).unwrap();
    assert_eq!(recovery.pending, 0);
    log.append(&mut writer, &[payload(0), payload(1)]).unwrap();
    log.append(&mut writer, &[payload(2)]).unwrap();
    let mut reader = log.reader();
    assert_eq!(read_all(&log, &mut reader), (vec![0, 1, 2], 0));
    log.release(2).unwrap();
    log.save_cursor().unwrap();
    assert!(
        Log::open(&dir, 1 << 20).is_err(),
        "a second opener is kept out"
    );
    drop((log, writer));
    let (log, mut writer, recovery) = Log::open(&dir, 1 << 20).unwrap();
    assert_eq!(recovery.pending, 1);
    assert!(recovery.cut.is_none());
    log.append(&mut writer, &[payload(3)]).unwrap();
    assert_eq!(read_all(&log, &mut log.reader()), (vec![2, 3], 0));
}

#[test]
fn a_torn_tail_is_cut_off_and_reported_and_numbering_goes_on() {
    let dir = scratch("torn");
    let (log, mut writer, _) = Log::open(&dir, 1 << 20).unwrap();
    for n in 0..4 {
        log.append(&mut writer, &[payload(n)]).unwrap();
    }
    drop((log, writer));
    let segment = segments(&dir).pop().unwrap();
    let size = std::fs::metadata(&segment).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(size - 7).unwrap();
    let (log, mut writer, recovery) = Log::open(&dir, 1 << 20).unwrap();
    let cut = recovery.cut.expect("the torn record is reported");
    assert!(cut.reason.contains("torn"), "{}", cut.reason);
    assert_eq!(recovery.pending, 3);
    log.append(&mut writer, &[payload(3)]).unwrap();
    assert_eq!(read_all(&log, &mut log.reader()), (vec![0, 1, 2, 3], 0));
}

#[test]
fn a_corrupt_record_is_skipped_with_the_rest_of_its_segment_and_reading_goes_on() {
    let dir = scratch("corrupt");
    // Segments of about two records each.
    let (log, mut writer, _) = Log::open(&dir, 300).unwrap();
    for n in 0..6 {
        log.append(&mut writer, &[payload(n)]).unwrap();
    }
    drop((log, writer));
    let files = segments(&dir);
    assert!(files.len() >= 3, "{files:?}");
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0xff;
    std::fs::write(&files[0], bytes).unwrap();
    let (log, _writer, recovery) = Log::open(&dir, 300).unwrap();
    assert!(
        recovery.cut.is_none(),
        "only the last segment is scanned on open"
    );
    let (seqs, damaged) = read_all(&log, &mut log.reader());
    assert_eq!(damaged, 1);
    assert_eq!(seqs.first(), Some(&0));
    assert_eq!(seqs.last(), Some(&5));
    assert_eq!(seqs.len(), 5, "one record lost: {seqs:?}");
}

#[test]
fn delivered_segments_are_deleted_and_free_room() {
    let dir = scratch("release");
    let (log, mut writer, _) = Log::open(&dir, 300).unwrap();
    for n in 0..6 {
        log.append(&mut writer, &[payload(n)]).unwrap();
    }
    let before = log.bytes();
    let files = segments(&dir).len();
    assert!(!log.fits(1, before));
    log.release(6).unwrap();
    assert_eq!(
        segments(&dir).len(),
        1,
        "all but the segment being appended to go"
    );
    assert!(files > 1 && log.bytes() < before);
    assert!(log.fits(1, before));
    assert_eq!(log.pending(), 0);
    drop((log, writer));
    let (log, _writer, recovery) = Log::open(&dir, 300).unwrap();
    assert_eq!(recovery.pending, 0);
    assert_eq!(log.committed(), 6);
}

#[test]
fn a_buffer_of_about_one_segment_makes_room_once_it_is_delivered() {
    let dir = scratch("room");
    let (log, mut writer, _) = Log::open(&dir, 1 << 20).unwrap();
    for n in 0..5 {
        log.append(&mut writer, &[payload(n)]).unwrap();
    }
    let full = log.bytes();
    assert!(!log.fits(200, full));
    log.release(5).unwrap();
    assert!(!log.fits(200, full), "the segment being appended to stays");
    log.make_room(&mut writer).unwrap();
    assert!(
        log.fits(200, full),
        "a new segment started and the delivered one went"
    );
    log.append(&mut writer, &[payload(5)]).unwrap();
    assert_eq!(read_all(&log, &mut log.reader()), (vec![5], 0));
}

#[test]
fn an_empty_last_segment_left_by_a_failed_roll_does_not_reuse_numbers() {
    let dir = scratch("orphan");
    let (log, mut writer, _) = Log::open(&dir, 1 << 20).unwrap();
    log.append(&mut writer, &[payload(0), payload(1), payload(2)])
        .unwrap();
    drop((log, writer));
    // A segment created for record 1 whose roll failed; records 1 and 2 went on in the first.
    std::fs::write(dir.join(format!("{:020}.seg", 1)), super::MAGIC).unwrap();
    let (log, mut writer, recovery) = Log::open(&dir, 1 << 20).unwrap();
    assert_eq!(recovery.pending, 3);
    log.append(&mut writer, &[payload(3)]).unwrap();
    assert_eq!(read_all(&log, &mut log.reader()), (vec![0, 1, 2, 3], 0));
}

#[test]
fn a_cursor_ahead_of_a_cut_log_is_brought_back_so_new_records_are_replayed() {
    let dir = scratch("cursor-ahead");
    let (log, mut writer, _) = Log::open(&dir, 1 << 20).unwrap();
    for n in 0..5 {
        log.append(&mut writer, &[payload(n)]).unwrap();
    }
    log.release(5).unwrap();
    log.save_cursor().unwrap();
    drop((log, writer));
    let segment = segments(&dir).pop().unwrap();
    let size = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(size - 5)
        .unwrap();
    let (log, mut writer, recovery) = Log::open(&dir, 1 << 20).unwrap();
    assert!(recovery.cut.is_some());
    log.append(&mut writer, &[payload(4)]).unwrap();
    drop((log, writer));
    let (log, _writer, recovery) = Log::open(&dir, 1 << 20).unwrap();
    assert_eq!(
        recovery.pending, 1,
        "record 4 (written after the cut) is not delivered"
    );
    assert_eq!(read_all(&log, &mut log.reader()), (vec![4], 0));
}

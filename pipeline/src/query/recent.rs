//! The last batches that went through the gateway, kept in a ring bounded by bytes, so that
//! `recent.*` tables answer at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use penstock_engine::OtapBatch;

/// Where a kept batch was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Entering through this source.
    Source(String),
    /// Sent to this sink.
    Sink(String),
}

struct Kept {
    seen: Seen,
    batch: Arc<OtapBatch>,
    bytes: usize,
}

/// A ring of recent batches holding at most a given number of bytes of Arrow memory.
pub struct Recent {
    capacity: usize,
    ring: Mutex<(VecDeque<Kept>, usize)>,
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("capacity", &self.capacity)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Recent {
    /// An empty ring of `capacity` bytes.
    pub fn new(capacity: usize) -> Recent {
        Recent {
            capacity,
            ring: Mutex::new((VecDeque::new(), 0)),
        }
    }

    /// Keeps `batch`, seen at `seen`, dropping the oldest batches to make room (a batch larger
    /// than the whole ring is not kept).
    pub fn keep(&self, seen: Seen, batch: Arc<OtapBatch>) {
        let bytes = batch.memory_size();
        if bytes > self.capacity {
            return;
        }
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        let (kept, held) = &mut *ring;
        while *held + bytes > self.capacity {
            match kept.pop_front() {
                Some(old) => *held -= old.bytes,
                None => break,
            }
        }
        *held += bytes;
        kept.push_back(Kept { seen, batch, bytes });
    }

    /// The kept batches, oldest first: those seen at `stream` (a source or sink name), or
    /// those that entered through any source (None).
    pub fn batches(&self, stream: Option<&str>) -> Vec<Arc<OtapBatch>> {
        let Ok(ring) = self.ring.lock() else {
            return Vec::new();
        };
        ring.0
            .iter()
            .filter(|k| match (&k.seen, stream) {
                (Seen::Source(_), None) => true,
                (Seen::Source(name) | Seen::Sink(name), Some(s)) => name == s,
                (Seen::Sink(_), None) => false,
            })
            .map(|k| Arc::clone(&k.batch))
            .collect()
    }

    /// The most bytes it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.ring.lock().map_or(0, |r| r.1)
    }
}

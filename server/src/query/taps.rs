//! Taps on the data path for queries: every batch entering through a source and every batch
//! sent to a sink is kept in the ring of recent batches and offered to the live queries that
//! read it. Offering never waits: a live query whose queue is full skips the batch (counted),
//! so a slow query never slows the gateway.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use futures::channel::mpsc;
use penstock_engine::{OtapBatch, Signal};
use penstock_pipeline::query::{LiveReceiver, Recent, Seen};

/// Batches a live query may have waiting before it skips new ones.
pub const LIVE_QUEUE: usize = 16;

/// One live query's feed.
pub struct Subscription {
    id: u64,
    signal: Signal,
    /// A source or sink name; None: every source.
    stream: Option<String>,
    sender: Mutex<Option<mpsc::Sender<Arc<OtapBatch>>>>,
    /// Batches skipped because the query fell behind.
    pub skipped: AtomicU64,
    /// Batches offered to it.
    pub offered: AtomicU64,
}

impl Subscription {
    fn wants(&self, seen: &Seen, signal: Signal) -> bool {
        signal == self.signal
            && match (seen, &self.stream) {
                (Seen::Source(_), None) => true,
                (Seen::Source(name) | Seen::Sink(name), Some(s)) => name == s,
                (Seen::Sink(_), None) => false,
            }
    }

    /// Offers `batch`; false once the query let go of its feed.
    fn offer(&self, batch: &Arc<OtapBatch>) -> bool {
        let Ok(mut sender) = self.sender.lock() else {
            return false;
        };
        let Some(tx) = sender.as_mut() else {
            return false;
        };
        self.offered.fetch_add(1, Relaxed);
        match tx.try_send(Arc::clone(batch)) {
            Ok(()) => true,
            Err(e) if e.is_full() => {
                self.skipped.fetch_add(1, Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Ends the feed: the query sees no more batches and finishes.
    pub fn close(&self) {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
    }
}

/// The taps of one gateway.
pub struct Taps {
    /// Source names, by index in the program.
    sources: Vec<String>,
    recent: Recent,
    live: RwLock<Vec<Arc<Subscription>>>,
    /// Live queries attached (read without the lock on the data path).
    live_count: AtomicUsize,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Taps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taps")
            .field("recent", &self.recent)
            .field("live", &self.live_count.load(Relaxed))
            .finish()
    }
}

impl Taps {
    /// Taps for sources named `sources` (by index), keeping `recent_bytes` of recent batches
    /// (0: none).
    pub fn new(sources: Vec<String>, recent_bytes: usize) -> Taps {
        Taps {
            sources,
            recent: Recent::new(recent_bytes),
            live: RwLock::new(Vec::new()),
            live_count: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        }
    }

    /// Whether anything is kept or offered at all.
    fn active(&self, recent: bool) -> bool {
        recent || self.live_count.load(Relaxed) > 0
    }

    /// Whether batches entering through sources are kept or offered to a query (then they
    /// must be decoded, not forwarded as received).
    pub fn watching(&self) -> bool {
        self.active(self.recent.capacity() > 0)
    }

    /// Whether recent batches are kept (for `recent.*`): then every batch is watched.
    pub fn keeps_recent(&self) -> bool {
        self.recent.capacity() > 0
    }

    /// `batch` entered through source number `index`.
    pub fn source(&self, index: usize, batch: &OtapBatch) {
        if let Some(name) = self.sources.get(index) {
            self.publish(|| Seen::Source(name.clone()), batch);
        }
    }

    /// `batch` is sent to sink `name`.
    pub fn sink(&self, name: &str, batch: &OtapBatch) {
        self.publish(|| Seen::Sink(name.to_string()), batch);
    }

    /// Keeps and offers `batch`; `seen` (which allocates) is only made when a query or the
    /// ring wants the batch.
    fn publish(&self, seen: impl FnOnce() -> Seen, batch: &OtapBatch) {
        let recent = self.recent.capacity() > 0;
        if !self.active(recent) {
            return;
        }
        let seen = seen();
        let shared = Arc::new(batch.clone());
        if self.live_count.load(Relaxed) > 0 {
            let mut gone = Vec::new();
            if let Ok(live) = self.live.read() {
                for s in live.iter().filter(|s| s.wants(&seen, batch.signal())) {
                    if !s.offer(&shared) {
                        gone.push(s.id);
                    }
                }
            }
            for id in gone {
                self.unsubscribe(id);
            }
        }
        if recent {
            self.recent.keep(seen, shared);
        }
    }

    /// The recent batches seen at `stream` (a source or sink), or entering through any source.
    pub fn recent(&self, stream: Option<&str>) -> Vec<Arc<OtapBatch>> {
        self.recent.batches(stream)
    }

    /// Attaches a live query reading batches of `signal` seen at `stream` (None: every
    /// source).
    pub fn subscribe(
        &self,
        signal: Signal,
        stream: Option<String>,
    ) -> (Arc<Subscription>, LiveReceiver) {
        let (sender, receiver) = mpsc::channel(LIVE_QUEUE);
        let subscription = Arc::new(Subscription {
            id: self.next_id.fetch_add(1, Relaxed),
            signal,
            stream,
            sender: Mutex::new(Some(sender)),
            skipped: AtomicU64::new(0),
            offered: AtomicU64::new(0),
        });
        if let Ok(mut live) = self.live.write() {
            live.push(Arc::clone(&subscription));
            self.live_count.store(live.len(), Relaxed);
        }
        (subscription, receiver)
    }

    /// Detaches live query `id` (its feed ends).
    pub fn unsubscribe(&self, id: u64) {
        if let Ok(mut live) = self.live.write() {
            live.retain(|s| {
                if s.id == id {
                    s.close();
                }
                s.id != id
            });
            self.live_count.store(live.len(), Relaxed);
        }
    }

    /// Whether a source or sink is called `name`.
    pub fn knows(&self, name: &str, sinks: &[String]) -> bool {
        self.sources.iter().any(|s| s == name) || sinks.iter().any(|s| s == name)
    }
}

impl Subscription {
    /// Its id, to detach it.
    pub fn id(&self) -> u64 {
        self.id
    }
}

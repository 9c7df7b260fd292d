//! The OTAP stream slots of one listening source on one worker, shared fairly: a connection
//! holds at most `max_streams_per_connection` of them and a peer address at most
//! `max_streams_per_peer`, so one client that takes all it may leaves room for the others'
//! streams. When every slot is taken, a new stream takes the slot of a stream that has been
//! idle (no message, no batch in flight) for at least [`MIN_IDLE`], from the peer holding the
//! most; that stream ends with UNAVAILABLE, which its sender retries. So streams opened and
//! abandoned (left open without a message) hold their slots only until someone needs them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long a stream must have been idle before its slot may be given to another, unless
/// told otherwise.
pub const MIN_IDLE: Duration = Duration::from_secs(1);

/// Who opens a stream: its peer's address and its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opener {
    /// The peer's IP address.
    pub peer: IpAddr,
    /// The connection, numbered in the process.
    pub connection: u64,
}

/// How many slots there are, and each client's share.
#[derive(Debug, Clone, Copy)]
pub struct SlotLimits {
    /// Slots in all.
    pub total: usize,
    /// Slots one peer address may hold.
    pub per_peer: usize,
    /// Slots one connection may hold.
    pub per_connection: usize,
    /// How long a stream must have been idle before its slot may be given to another.
    pub min_idle: Duration,
}

/// Why a stream got no slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotRefusal {
    /// Its connection holds its share.
    #[error(
        "this connection has {0} OTAP streams open, the most one connection may \
         (max_streams_per_connection)"
    )]
    Connection(usize),
    /// Its peer holds its share.
    #[error(
        "{peer} has {open} OTAP streams open, the most one peer address may \
         (max_streams_per_peer)"
    )]
    Peer {
        /// The peer.
        peer: IpAddr,
        /// Its streams.
        open: usize,
    },
    /// Every slot is taken by streams that are not idle.
    #[error("too many OTAP streams: all {0} are busy (max_streams)")]
    Full(usize),
}

/// What a stream's slot knows of it: when it was last active and whether it was asked to end.
#[derive(Debug)]
pub struct Activity {
    opener: Opener,
    born: Instant,
    /// Milliseconds from `born` to its last message.
    last: AtomicU64,
    /// Its batches in flight.
    busy: AtomicUsize,
    evicted: AtomicBool,
    notify: Notify,
}

impl Activity {
    /// A message arrived.
    pub fn touch(&self) {
        let now = self.born.elapsed().as_millis() as u64;
        self.last.store(now, Relaxed);
    }

    /// Marks one more batch in flight until the guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Relaxed);
        Busy(Arc::clone(self))
    }

    fn idle_for(&self) -> Option<Duration> {
        if self.busy.load(Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.last.load(Relaxed));
        Some(self.born.elapsed().saturating_sub(since))
    }

    /// Who opened the stream.
    pub fn opener(&self) -> Opener {
        self.opener
    }

    /// Whether its slot was given to another stream.
    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Relaxed)
    }

    /// Resolves once its slot was given to another stream.
    pub async fn evicted(&self) {
        let notified = self.notify.notified();
        if self.evicted.load(Relaxed) {
            return;
        }
        notified.await;
    }
}

/// A batch of a stream in flight: the stream is not idle while it lives.
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Relaxed);
        self.0.touch();
    }
}

#[derive(Debug, Default)]
struct State {
    open: usize,
    next_id: u64,
    by_peer: HashMap<IpAddr, usize>,
    by_connection: HashMap<u64, usize>,
    streams: HashMap<u64, Arc<Activity>>,
}

impl State {
    fn add(&mut self, opener: Opener) {
        self.open += 1;
        *self.by_peer.entry(opener.peer).or_default() += 1;
        *self.by_connection.entry(opener.connection).or_default() += 1;
    }

    fn remove(&mut self, opener: Opener) {
        self.open -= 1;
        decrement(&mut self.by_peer, opener.peer);
        decrement(&mut self.by_connection, opener.connection);
    }
}

fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: K) {
    if let Some(count) = counts.get_mut(&key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(&key);
        }
    }
}

/// The stream slots of a source on a worker.
#[derive(Debug)]
pub struct StreamSlots {
    limits: SlotLimits,
    state: Mutex<State>,
}

/// A stream's slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<StreamSlots>,
    id: u64,
    /// What the slots know of the stream.
    pub activity: Arc<Activity>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self
            .slots
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // An evicted stream's place was given away when it was evicted.
        if state.streams.remove(&self.id).is_some() {
            state.remove(self.activity.opener);
        }
    }
}

impl StreamSlots {
    /// Slots within `limits`.
    pub fn new(limits: SlotLimits) -> StreamSlots {
        StreamSlots {
            limits,
            state: Mutex::default(),
        }
    }

    /// A slot for a stream of `opener`, or why there is none.
    pub fn open(self: &Arc<Self>, opener: Opener) -> Result<Slot, SlotRefusal> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let on_connection = state.by_connection.get(&opener.connection).copied();
        if on_connection.unwrap_or(0) >= self.limits.per_connection {
            return Err(SlotRefusal::Connection(self.limits.per_connection));
        }
        let of_peer = state.by_peer.get(&opener.peer).copied().unwrap_or(0);
        if of_peer >= self.limits.per_peer {
            return Err(SlotRefusal::Peer {
                peer: opener.peer,
                open: of_peer,
            });
        }
        if state.open >= self.limits.total {
            let Some(victim) = idle_victim(&state, self.limits.min_idle) else {
                return Err(SlotRefusal::Full(self.limits.total));
            };
            if let Some(activity) = state.streams.remove(&victim) {
                state.remove(activity.opener);
                activity.evicted.store(true, Relaxed);
                activity.notify.notify_waiters();
            }
        }
        state.add(opener);
        state.next_id += 1;
        let id = state.next_id;
        let activity = Arc::new(Activity {
            opener,
            born: Instant::now(),
            last: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            evicted: AtomicBool::new(false),
            notify: Notify::new(),
        });
        state.streams.insert(id, Arc::clone(&activity));
        Ok(Slot {
            slots: Arc::clone(self),
            id,
            activity,
        })
    }

    /// Streams open now.
    pub fn open_now(&self) -> usize {
        self.state.lock().map_or(0, |s| s.open)
    }
}

/// The stream whose slot goes to a new one: among those idle for `min_idle`, one of the peer
/// holding the most streams, the longest idle.
fn idle_victim(state: &State, min_idle: Duration) -> Option<u64> {
    state
        .streams
        .iter()
        .filter_map(|(id, activity)| {
            let idle = activity.idle_for().filter(|idle| *idle >= min_idle)?;
            let held = state
                .by_peer
                .get(&activity.opener.peer)
                .copied()
                .unwrap_or(0);
            Some(((held, idle), *id))
        })
        .max()
        .map(|(_, id)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opener(peer: u8, connection: u64) -> Opener {
        Opener {
            peer: IpAddr::from([10, 0, 0, peer]),
            connection,
        }
    }

    fn slots(total: usize, per_peer: usize, per_connection: usize) -> Arc<StreamSlots> {
        slots_idle(total, per_peer, per_connection, MIN_IDLE)
    }

    fn slots_idle(
        total: usize,
        per_peer: usize,
        per_connection: usize,
        min_idle: Duration,
    ) -> Arc<StreamSlots> {
        Arc::new(StreamSlots::new(SlotLimits {
            total,
            per_peer,
            per_connection,
            min_idle,
        }))
    }

    #[test]
    fn a_connection_and_a_peer_hold_at_most_their_shares() {
        let slots = slots(10, 4, 3);
        let held: Vec<_> = (0..3).map(|_| slots.open(opener(1, 1)).unwrap()).collect();
        assert_eq!(
            slots.open(opener(1, 1)).unwrap_err(),
            SlotRefusal::Connection(3)
        );
        let fourth = slots.open(opener(1, 2)).unwrap();
        assert!(matches!(
            slots.open(opener(1, 3)),
            Err(SlotRefusal::Peer { open: 4, .. })
        ));
        // Another peer still opens streams, and a slot given back is free again.
        let other = slots.open(opener(2, 4)).unwrap();
        drop(fourth);
        let again = slots.open(opener(1, 3)).unwrap();
        assert_eq!(slots.open_now(), 5);
        drop((held, other, again));
        assert_eq!(slots.open_now(), 0);
    }

    #[test]
    fn a_full_set_of_streams_none_idle_long_enough_refuses_a_new_one() {
        let slots = slots_idle(2, 2, 2, Duration::from_secs(3600));
        let _held: Vec<_> = (0..2).map(|_| slots.open(opener(1, 1)).unwrap()).collect();
        assert_eq!(slots.open(opener(2, 2)).unwrap_err(), SlotRefusal::Full(2));
    }

    #[tokio::test]
    async fn when_every_slot_is_taken_an_idle_stream_of_the_greediest_peer_makes_room() {
        let slots = slots_idle(3, 3, 3, Duration::ZERO);
        let greedy: Vec<_> = (0..2).map(|_| slots.open(opener(1, 1)).unwrap()).collect();
        let modest = slots.open(opener(2, 2)).unwrap();
        // A busy stream is never taken, however long ago its last message.
        let busy = greedy[1].activity.busy();
        let newcomer = slots.open(opener(3, 3)).unwrap();
        assert!(greedy[0].activity.evicted.load(Relaxed));
        tokio::time::timeout(Duration::from_secs(1), greedy[0].activity.evicted())
            .await
            .unwrap();
        assert!(!greedy[1].activity.evicted.load(Relaxed));
        assert!(!modest.activity.evicted.load(Relaxed));
        assert_eq!(slots.open_now(), 3);
        drop(busy);
        // The evicted stream's end gives back nothing more.
        drop(greedy);
        assert_eq!(slots.open_now(), 2);
        drop((modest, newcomer));
        assert_eq!(slots.open_now(), 0);
    }
}

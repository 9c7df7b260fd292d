//! Which offsets of each partition may be committed: a message's offset is committable once it
//! and every earlier message read from its partition were handled (accepted by every sink,
//! or skipped as malformed), whatever order they finish in.

use std::collections::{HashMap, VecDeque};

/// A message being handled: its partition, offset, and the partition's generation when it
/// was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The partition.
    pub partition: i32,
    /// The message's offset.
    pub offset: i64,
    generation: u64,
}

/// The messages of one partition read and not yet committable, oldest first.
#[derive(Debug, Default)]
struct Partition {
    /// Bumped when the partition is read again from an earlier offset (after a rebalance),
    /// so that messages of the earlier reading no longer count.
    generation: u64,
    pending: VecDeque<(i64, bool)>,
    /// The last offset read.
    last: Option<i64>,
}

/// The messages read and not yet committable, per partition.
#[derive(Debug, Default)]
pub struct Offsets {
    partitions: HashMap<i32, Partition>,
    /// The last generation given out: generations are never reused, so the tickets of a
    /// partition forgotten (taken back by the group) never count for a later reading of it.
    generations: u64,
}

impl Offsets {
    /// Records that the message at `offset` of `partition` was read.
    pub fn read(&mut self, partition: i32, offset: i64) -> Ticket {
        let generations = &mut self.generations;
        let p = self.partitions.entry(partition).or_insert_with(|| {
            *generations += 1;
            Partition {
                generation: *generations,
                ..Partition::default()
            }
        });
        if p.last.is_some_and(|last| offset <= last) {
            // Read again from an earlier offset: what was pending is read again too.
            *generations += 1;
            p.generation = *generations;
            p.pending.clear();
        }
        p.last = Some(offset);
        p.pending.push_back((offset, false));
        Ticket {
            partition,
            offset,
            generation: p.generation,
        }
    }

    /// Records that the message of `ticket` was handled; returns the partition's highest
    /// offset that is now committable (every message up to it handled), if it moved.
    pub fn handled(&mut self, ticket: Ticket) -> Option<i64> {
        let p = self.partitions.get_mut(&ticket.partition)?;
        if p.generation != ticket.generation {
            return None;
        }
        let at = p.pending.iter().position(|(o, _)| *o == ticket.offset)?;
        p.pending[at].1 = true;
        let mut committable = None;
        while let Some(&(offset, true)) = p.pending.front() {
            committable = Some(offset);
            p.pending.pop_front();
        }
        committable
    }

    /// Forgets a partition no longer assigned: its messages being handled no longer count,
    /// and the next reading of it starts afresh (from the group's last commit).
    pub fn forget(&mut self, partition: i32) {
        self.partitions.remove(&partition);
    }

    /// Messages read and not yet committable.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.partitions.values().map(|p| p.pending.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_is_committable_once_everything_before_it_was_handled() {
        let mut offsets = Offsets::default();
        let a = offsets.read(0, 10);
        let b = offsets.read(0, 11);
        let c = offsets.read(0, 12);
        let other = offsets.read(1, 5);
        assert_eq!(offsets.handled(b), None);
        assert_eq!(offsets.handled(other), Some(5));
        assert_eq!(offsets.handled(a), Some(11));
        assert_eq!(offsets.handled(c), Some(12));
        assert_eq!(offsets.pending(), 0);
    }

    #[test]
    fn a_partition_read_again_forgets_the_earlier_reading() {
        let mut offsets = Offsets::default();
        let old = offsets.read(3, 100);
        let _older_pending = offsets.read(3, 101);
        let again = offsets.read(3, 100);
        assert_eq!(
            offsets.handled(old),
            None,
            "a ticket of the earlier reading"
        );
        assert_eq!(offsets.handled(again), Some(100));
        assert_eq!(offsets.pending(), 0);
    }

    #[test]
    fn a_partition_taken_back_and_given_again_starts_afresh() {
        let mut offsets = Offsets::default();
        let stuck = offsets.read(2, 7);
        offsets.forget(2);
        // Given back later, past what another member committed meanwhile.
        let later = offsets.read(2, 50);
        assert_eq!(offsets.handled(stuck), None);
        assert_eq!(offsets.handled(later), Some(50));
    }
}

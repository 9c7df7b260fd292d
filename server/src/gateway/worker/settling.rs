//! Which deliveries of a worker are still unsettled: a journal of held spans releases rows
//! only once everything handed to sinks before their traces were decided settled, so that
//! what was kept of them is never in neither place.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

/// The deliveries a worker handed to sinks and that have not settled yet (one thread).
#[derive(Clone, Default)]
pub(super) struct Settling(Rc<RefCell<State>>);

#[derive(Default)]
struct State {
    /// The number the next delivery gets.
    next: u64,
    /// Deliveries not settled yet.
    open: BTreeSet<u64>,
}

/// One delivery, unsettled until dropped.
pub(super) struct Unsettled {
    settling: Settling,
    id: u64,
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        self.settling.0.borrow_mut().open.remove(&self.id);
    }
}

impl Settling {
    /// A new delivery, settled when the returned guard is dropped.
    pub fn begin(&self) -> Unsettled {
        let mut state = self.0.borrow_mut();
        let id = state.next;
        state.next += 1;
        state.open.insert(id);
        Unsettled {
            settling: self.clone(),
            id,
        }
    }

    /// A mark: every delivery begun before now is below it.
    pub fn mark(&self) -> u64 {
        self.0.borrow().next
    }

    /// Whether every delivery begun before `mark` settled.
    pub fn settled(&self, mark: u64) -> bool {
        self.0
            .borrow()
            .open
            .first()
            .is_none_or(|first| *first >= mark)
    }
}

#[cfg(test)]
mod tests {
    use super::Settling;

    #[test]
    fn a_mark_is_settled_once_every_delivery_begun_before_it_is() {
        let settling = Settling::default();
        let first = settling.begin();
        let second = settling.begin();
        let mark = settling.mark();
        let later = settling.begin();
        assert!(!settling.settled(mark));
        drop(second);
        assert!(!settling.settled(mark));
        drop(first);
        assert!(settling.settled(mark), "a later delivery does not count");
        assert!(!settling.settled(settling.mark()));
        drop(later);
        assert!(settling.settled(settling.mark()));
    }
}

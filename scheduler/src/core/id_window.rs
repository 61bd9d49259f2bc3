//! Maps keyed by task id that stay cheap at hundreds of thousands of running tasks.
//!
//! The scheduler hands out task ids in increasing order, and tasks end roughly in the
//! order they were launched. A hash map scatters those ids over a table larger than the
//! caches, so that every launch and every status update misses. [`IdWindow`] keeps a
//! `u32` per id of the span from the oldest live id to the newest, in a ring buffer: ids
//! are inserted at its back and removed mostly near its front, both on warm memory.
//! [`Attempts`] puts values of any size in a slab of reused slots, indexed by a window.
//!
//! The cost is 4 bytes per id in the span, live or not: a straggler that runs while a
//! million other tasks come and go holds a 4 MB window until it ends.

use std::collections::VecDeque;

/// The value of an id that is not in the window.
const EMPTY: u32 = u32::MAX;

/// A map from task ids (inserted in increasing order) to `u32` values below
/// `u32::MAX`.
#[derive(Debug, Default, Clone)]
pub(crate) struct IdWindow {
    /// The id of `slots[0]`.
    base: u64,
    slots: VecDeque<u32>,
    live: usize,
}

impl IdWindow {
    /// Live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn index(&self, id: u64) -> Option<usize> {
        let offset = id.checked_sub(self.base)?;
        let offset = usize::try_from(offset).ok()?;
        (offset < self.slots.len()).then_some(offset)
    }

    /// Sets the value of `id`; returns the one it replaces. Ids below the window's
    /// start widen it at the front, so any order works, increasing order best.
    pub fn insert(&mut self, id: u64, value: u32) -> Option<u32> {
        debug_assert_ne!(value, EMPTY, "u32::MAX is the empty marker");
        if self.slots.is_empty() {
            self.base = id;
        }
        if id < self.base {
            let grow = usize::try_from(self.base - id).expect("a window fits in memory");
            for _ in 0..grow {
                self.slots.push_front(EMPTY);
            }
            self.base = id;
        }
        let offset = usize::try_from(id - self.base).expect("a window fits in memory");
        if offset == self.slots.len() {
            self.slots.push_back(EMPTY);
        } else if offset > self.slots.len() {
            self.slots.resize(offset + 1, EMPTY);
        }
        let previous = std::mem::replace(&mut self.slots[offset], value);
        if previous == EMPTY {
            self.live += 1;
            None
        } else {
            Some(previous)
        }
    }

    pub fn get(&self, id: u64) -> Option<u32> {
        let value = self.slots[self.index(id)?];
        (value != EMPTY).then_some(value)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.get(id).is_some()
    }

    /// Removes `id`; the window then drops the empty slots at its ends.
    pub fn remove(&mut self, id: u64) -> Option<u32> {
        let offset = self.index(id)?;
        let value = std::mem::replace(&mut self.slots[offset], EMPTY);
        if value == EMPTY {
            return None;
        }
        self.live -= 1;
        while self.slots.front() == Some(&EMPTY) {
            self.slots.pop_front();
            self.base += 1;
        }
        while self.slots.back() == Some(&EMPTY) {
            self.slots.pop_back();
        }
        Some(value)
    }

    /// Live entries, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, &value)| value != EMPTY)
            .map(move |(offset, &value)| (base + offset as u64, value))
    }

    /// Room for `additional` more ids at the back without reallocating.
    pub fn reserve(&mut self, additional: usize) {
        self.slots.reserve(additional);
    }
}

/// A map from task ids (inserted in increasing order) to values, in reused slots.
#[derive(Debug)]
pub(crate) struct Attempts<T> {
    window: IdWindow,
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Attempts<T> {
    fn default() -> Self {
        Attempts {
            window: IdWindow::default(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Attempts<T> {
    pub fn len(&self) -> usize {
        self.window.len()
    }

    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    pub fn insert(&mut self, id: u64, value: T) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(value);
                slot
            }
            None => {
                self.slots.push(Some(value));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 - 1 attempts")
            }
        };
        if let Some(replaced) = self.window.insert(id, slot) {
            self.slots[replaced as usize] = None;
            self.free.push(replaced);
        }
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.slots[self.window.get(id)? as usize].as_ref()
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        let slot = self.window.remove(id)?;
        self.free.push(slot);
        self.slots[slot as usize].take()
    }

    /// Live entries, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.window
            .iter()
            .filter_map(|(id, slot)| Some((id, self.slots[slot as usize].as_ref()?)))
    }

    /// Room for `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        self.window.reserve(additional);
        self.slots
            .reserve(additional.saturating_sub(self.free.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_window_follows_the_live_ids() {
        let mut w = IdWindow::default();
        for id in 10..20 {
            assert_eq!(w.insert(id, id as u32), None);
        }
        assert_eq!(w.len(), 10);
        assert_eq!(w.remove(10), Some(10));
        assert_eq!(w.remove(10), None);
        assert_eq!(w.remove(15), Some(15));
        assert_eq!(w.get(15), None);
        assert_eq!(w.get(16), Some(16));
        assert_eq!(w.base, 11, "the empty front is dropped");
        for id in [11, 12, 13, 14, 16, 17, 18, 19] {
            w.remove(id);
        }
        assert!(w.is_empty() && w.slots.is_empty());
        assert_eq!(
            w.insert(5, 1),
            None,
            "an id below the old window starts a new one"
        );
        assert_eq!(
            w.insert(3, 2),
            None,
            "and one below that widens it at the front"
        );
        assert_eq!(w.iter().collect::<Vec<_>>(), [(3, 2), (5, 1)]);
    }

    #[test]
    fn attempts_reuse_their_slots() {
        let mut a: Attempts<String> = Attempts::default();
        for id in 0..100u64 {
            a.insert(id, id.to_string());
            if id >= 2 {
                assert_eq!(
                    a.remove(id - 2).as_deref(),
                    Some((id - 2).to_string().as_str())
                );
            }
        }
        assert_eq!(a.len(), 2);
        assert!(
            a.slots.len() <= 3,
            "{} slots for at most 3 live entries",
            a.slots.len()
        );
        assert_eq!(
            a.iter().map(|(id, v)| (id, v.clone())).collect::<Vec<_>>(),
            [(98, "98".to_owned()), (99, "99".to_owned())]
        );
    }

    #[test]
    fn pipelined_launches_and_results_keep_the_window_small() {
        // Two executors with 65 tasks in flight each, results in batches of 16.
        let mut w = IdWindow::default();
        let mut in_flight: [VecDeque<u64>; 2] = Default::default();
        let mut next = 0u64;
        let mut widest = 0;
        for round in 0..10_000 {
            for queue in &mut in_flight {
                while queue.len() < 65 {
                    w.insert(next, 1);
                    queue.push_back(next);
                    next += 1;
                }
            }
            let queue = &mut in_flight[round % 2];
            for _ in 0..16 {
                let id = queue.pop_front().unwrap();
                assert_eq!(w.remove(id), Some(1));
            }
            widest = widest.max(w.slots.len());
        }
        assert!(
            widest < 1_000,
            "the window grew to {widest} slots for 130 live ids"
        );
    }

    proptest! {
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((any::<bool>(), 0u64..64, 0u32..1000), 0..300)) {
            let mut window = IdWindow::default();
            let mut attempts: Attempts<u32> = Attempts::default();
            let mut model = BTreeMap::new();
            for (insert, id, value) in ops {
                if insert {
                    prop_assert_eq!(window.insert(id, value), model.insert(id, value));
                    attempts.insert(id, value);
                } else {
                    let expected = model.remove(&id);
                    prop_assert_eq!(window.remove(id), expected);
                    prop_assert_eq!(attempts.remove(id), expected);
                }
                prop_assert_eq!(window.len(), model.len());
                prop_assert_eq!(attempts.len(), model.len());
                prop_assert_eq!(window.iter().collect::<Vec<_>>(), model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
                prop_assert_eq!(attempts.iter().map(|(k, &v)| (k, v)).collect::<Vec<_>>(), model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
            }
        }
    }
}

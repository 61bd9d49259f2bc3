//! The executor's shuffle memory: one bound (`shuffle.maxMemory`) on the bytes that map
//! tasks' buffers and the map outputs kept in memory take together.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of shuffle data held in memory, against a limit.
///
/// Reservations that do not fit are refused ([`ShuffleMemory::try_reserve`]); the holder
/// then makes room (spilling to disk) or, when nothing can be spilled, overdraws by what it
/// must have to make progress ([`ShuffleMemory::force_reserve`]).
#[derive(Debug)]
pub struct ShuffleMemory {
    limit: u64,
    used: AtomicU64,
}

impl ShuffleMemory {
    /// A pool of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        ShuffleMemory {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` if they fit under the limit.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= self.limit)
            })
            .is_ok()
    }

    /// Takes `bytes` whether or not they fit.
    pub fn force_reserve(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives `bytes` back.
    pub fn release(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(
            before >= bytes,
            "released more shuffle memory than was reserved"
        );
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_under_the_limit_unless_forced() {
        let memory = ShuffleMemory::new(100);
        assert!(memory.try_reserve(60));
        assert!(!memory.try_reserve(41));
        assert!(memory.try_reserve(40));
        assert_eq!(memory.used(), 100);
        memory.force_reserve(10);
        assert_eq!(memory.used(), 110);
        memory.release(110);
        assert_eq!(memory.used(), 0);
        assert!(!memory.try_reserve(u64::MAX));
    }
}

//! The receive budget: a bound on the bytes that large frames, partly received, hold
//! across all of an environment's connections (`rpc.io.maxReceiveBytes`).
//!
//! Each connection's receive buffer is bounded by `rpc.message.maxSize`, but a process
//! with thousands of connections could still be made to hold thousands of such frames at
//! once, by peers that each send most of one. So a connection whose next frame is large
//! reserves the whole frame here, and one read beyond it, before it reads on; when the
//! budget cannot cover it, the connection waits, unread (TCP holds its peer back
//! meanwhile), until frames of other connections have arrived, first come first served. Frames up to [`UNBUDGETED_FRAME`]
//! need no reservation: a connection's buffer holds at most one read beyond them.
//!
//! This is a pure state machine: the event loop tells it of reservations, releases and
//! closed connections, and reads the connections it admits.
//!
//! ```
//! use flint_rpc::receive_budget::ReceiveBudget;
//!
//! let mut budget = ReceiveBudget::new(10 << 20);
//! assert!(budget.reserve(1, 8 << 20));
//! assert!(!budget.reserve(2, 4 << 20), "waits: 12 MiB would be over the budget");
//! let mut admitted = Vec::new();
//! budget.release(8 << 20, &mut admitted);
//! assert_eq!(admitted, [(2, 4 << 20)], "admitted, its bytes reserved");
//! assert_eq!(budget.in_use(), 4 << 20);
//! ```

use std::collections::VecDeque;

use crate::outbox::ConnKey;

/// Frames up to this length (header and padding included) are read without a
/// reservation. flint_wire's decoder reads at most 256 KiB at a time too, so a
/// connection's buffer holds at most about twice this without a reservation.
pub const UNBUDGETED_FRAME: usize = 256 << 10;

/// The bytes reserved for large frames being received, and the connections waiting for
/// room, in the order they asked.
#[derive(Debug)]
pub struct ReceiveBudget {
    limit: usize,
    in_use: usize,
    waiting: VecDeque<(ConnKey, usize)>,
}

impl ReceiveBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        ReceiveBudget {
            limit,
            in_use: 0,
            waiting: VecDeque::new(),
        }
    }

    /// Bytes reserved now.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Connections waiting for room.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Reserves `bytes` for the frame connection `key` is receiving: `true` if they are
    /// reserved, `false` if the connection now waits to be admitted by a
    /// [`ReceiveBudget::release`] or [`ReceiveBudget::forget`]. It waits when the bytes do
    /// not fit, or when others already wait, so that a stream of smaller frames cannot
    /// starve a large one. A frame larger than the whole budget is admitted when nothing
    /// else is reserved, so that no frame waits for good.
    pub fn reserve(&mut self, key: ConnKey, bytes: usize) -> bool {
        if self.waiting.is_empty() && self.fits(bytes) {
            self.in_use += bytes;
            true
        } else {
            self.waiting.push_back((key, bytes));
            false
        }
    }

    /// Gives back `bytes` reserved earlier (the frame arrived, or its connection closed),
    /// and admits the waiting connections that now fit, in order, into `admitted`, with
    /// the bytes each reserved.
    pub fn release(&mut self, bytes: usize, admitted: &mut Vec<(ConnKey, usize)>) {
        debug_assert!(bytes <= self.in_use, "released more than was reserved");
        self.in_use = self.in_use.saturating_sub(bytes);
        self.admit(admitted);
    }

    /// Takes connection `key` out of the queue (it closed while it waited), and admits
    /// those behind it that now fit, into `admitted`.
    pub fn forget(&mut self, key: ConnKey, admitted: &mut Vec<(ConnKey, usize)>) {
        self.waiting.retain(|&(waiting, _)| waiting != key);
        self.admit(admitted);
    }

    fn fits(&self, bytes: usize) -> bool {
        self.in_use == 0 || self.in_use.saturating_add(bytes) <= self.limit
    }

    fn admit(&mut self, admitted: &mut Vec<(ConnKey, usize)>) {
        while let Some(&(key, bytes)) = self.waiting.front() {
            if !self.fits(bytes) {
                return;
            }
            self.waiting.pop_front();
            self.in_use += bytes;
            admitted.push((key, bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_that_fit_are_reserved_at_once() {
        let mut budget = ReceiveBudget::new(100);
        assert!(budget.reserve(1, 60));
        assert!(budget.reserve(2, 40));
        assert_eq!(budget.in_use(), 100);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn waiting_connections_are_admitted_in_the_order_they_asked() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, 90));
        assert!(!budget.reserve(2, 50));
        assert!(!budget.reserve(3, 30));
        // 3 would fit beside 1 now, but 2 asked first.
        budget.release(0, &mut admitted);
        assert!(admitted.is_empty());
        assert!(
            !budget.reserve(4, 5),
            "nobody overtakes a waiting connection"
        );
        budget.release(90, &mut admitted);
        assert_eq!(admitted, [(2, 50), (3, 30), (4, 5)]);
        assert_eq!(budget.in_use(), 85);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn a_frame_larger_than_the_budget_waits_until_nothing_else_is_reserved() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, 10));
        assert!(!budget.reserve(2, 500));
        budget.release(10, &mut admitted);
        assert_eq!(admitted, [(2, 500)]);
        assert!(
            !budget.reserve(3, 1),
            "over the budget while the large one is in"
        );
        admitted.clear();
        budget.release(500, &mut admitted);
        assert_eq!(admitted, [(3, 1)]);
        let mut empty = ReceiveBudget::new(100);
        assert!(empty.reserve(1, 500), "alone, it is admitted at once");
    }

    #[test]
    fn a_connection_closed_while_it_waits_lets_those_behind_it_in() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, 60));
        assert!(!budget.reserve(2, 80));
        assert!(!budget.reserve(3, 40));
        budget.forget(2, &mut admitted);
        assert_eq!(admitted, [(3, 40)]);
        assert_eq!(budget.in_use(), 100);
        assert_eq!(budget.waiting(), 0);
    }
}

//! The receive budget: a bound on the bytes that large frames, partly received, hold
//! across all of an environment's connections (`rpc.io.maxReceiveBytes`).
//!
//! Each connection's receive buffer is bounded by `rpc.message.maxSize`, but a process
//! with thousands of connections could still be made to hold thousands of such frames at
//! once, by peers that each send most of one. So a connection whose next frame is large
//! reserves the whole frame here, and one read beyond it, before it reads on; when the
//! budget cannot cover it, the connection waits, unread (TCP holds its peer back
//! meanwhile), until frames of other connections have arrived. Frames up to
//! [`UNBUDGETED_FRAME`] need no reservation: a connection's buffer holds at most one read
//! beyond them.
//!
//! Who waits goes in turns by the peer's address (an IPv6 address's /64 prefix), first
//! come first served for one address: a host that opens many connections gets one turn
//! in each round, as does every other address waiting, so that it cannot put all its
//! connections ahead of another's.
//!
//! What this costs: a host that holds a turn can hold up other hosts' large frames, and
//! what follows them on their connections (an executor's heartbeats). Without
//! authentication, that is `network.timeout` a turn at no cost (a frame's first bytes,
//! then silence, is cut off after it), and longer only by sending its frames at the
//! frame clock's 1 MiB/s (248 s for a 128 MiB frame with the defaults), however many
//! connections it opens, since its connections share one turn. That is the price of not
//! being made to hold `rpc.io.maxConnections` frames of `rpc.message.maxSize` at once;
//! where peers may be hostile, `authenticate=true` keeps strangers out of the budget
//! altogether (a peer that has not authenticated sends no frame above 512 bytes).
//!
//! This is a pure state machine: the event loop tells it of reservations, releases and
//! closed connections, and reads the connections it admits (see the first unit test
//! for a walk through it).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::outbox::ConnKey;

/// Frames up to this length (header and padding included) are read without a
/// reservation. flint_wire's decoder reads at most 256 KiB at a time too, so a
/// connection's buffer holds at most about twice this without a reservation.
pub const UNBUDGETED_FRAME: usize = 256 << 10;

/// Whether `bytes` more fit beside `in_use` of a budget of `limit`: always when nothing
/// is reserved, so that a frame larger than the budget does not wait for good.
fn fits(in_use: usize, limit: usize, bytes: usize) -> bool {
    in_use == 0 || in_use.saturating_add(bytes) <= limit
}

/// Whose turn a peer's connections wait for: its IPv4 address (an IPv4-mapped IPv6
/// address is one), or its IPv6 address's /64 prefix, the least a site is given, so that
/// a host cannot take more turns by cycling through the addresses of its own network.
fn turn_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// The bytes reserved for large frames being received, and the connections waiting for
/// room, by their peers' addresses.
#[derive(Debug)]
pub struct ReceiveBudget {
    limit: usize,
    in_use: usize,
    /// Addresses (see [`turn_of`]) with connections waiting, in the order their turns
    /// come.
    turns: VecDeque<IpAddr>,
    /// Each of those addresses' waiting connections and the bytes they ask for, in the
    /// order they asked; never an empty queue.
    queues: HashMap<IpAddr, VecDeque<(ConnKey, usize)>>,
}

impl ReceiveBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        ReceiveBudget {
            limit,
            in_use: 0,
            turns: VecDeque::new(),
            queues: HashMap::new(),
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
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    /// Reserves `bytes` for the frame connection `key`, from `peer`, is receiving: `true`
    /// if they are reserved, `false` if the connection now waits to be admitted by a
    /// [`ReceiveBudget::release`] or [`ReceiveBudget::forget`]. It waits when the bytes
    /// do not fit, or when others already wait, so that a stream of smaller frames
    /// cannot starve a large one. A frame larger than the whole budget is admitted when
    /// nothing else is reserved, so that no frame waits for good.
    pub fn reserve(&mut self, key: ConnKey, peer: IpAddr, bytes: usize) -> bool {
        if self.turns.is_empty() && fits(self.in_use, self.limit, bytes) {
            self.in_use += bytes;
            return true;
        }
        let turn = turn_of(peer);
        let queue = self.queues.entry(turn).or_default();
        if queue.is_empty() {
            self.turns.push_back(turn);
        }
        queue.push_back((key, bytes));
        false
    }

    /// Gives back `bytes` reserved earlier (the frame arrived, or its connection closed),
    /// and admits the waiting connections that now fit, turn by turn, into `admitted`,
    /// with the bytes each reserved.
    pub fn release(&mut self, bytes: usize, admitted: &mut Vec<(ConnKey, usize)>) {
        debug_assert!(bytes <= self.in_use, "released more than was reserved");
        self.in_use = self.in_use.saturating_sub(bytes);
        self.admit(admitted);
    }

    /// Takes connection `key`, from `peer`, out of the queue (it closed while it waited),
    /// and admits those that now fit, into `admitted`.
    pub fn forget(&mut self, key: ConnKey, peer: IpAddr, admitted: &mut Vec<(ConnKey, usize)>) {
        let turn = turn_of(peer);
        if let Some(queue) = self.queues.get_mut(&turn) {
            if let Some(at) = queue.iter().position(|&(waiting, _)| waiting == key) {
                queue.remove(at);
                if queue.is_empty() {
                    self.queues.remove(&turn);
                    self.turns.retain(|&waiting| waiting != turn);
                }
            }
        }
        self.admit(admitted);
    }

    /// Admits the connection whose turn it is while it fits, then the next: one who
    /// does not fit holds up the rest, so that a large frame is not starved.
    fn admit(&mut self, admitted: &mut Vec<(ConnKey, usize)>) {
        while let Some(&peer) = self.turns.front() {
            let Some(queue) = self.queues.get_mut(&peer) else {
                debug_assert!(false, "a turn without a queue");
                self.turns.pop_front();
                continue;
            };
            let Some(&(key, bytes)) = queue.front() else {
                debug_assert!(false, "an empty queue kept");
                self.queues.remove(&peer);
                self.turns.pop_front();
                continue;
            };
            if !fits(self.in_use, self.limit, bytes) {
                return;
            }
            queue.pop_front();
            self.turns.pop_front();
            if queue.is_empty() {
                self.queues.remove(&peer);
            } else {
                self.turns.push_back(peer);
            }
            self.in_use += bytes;
            admitted.push((key, bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

    /// The walk through that was the module's example.
    #[test]
    fn a_release_admits_the_first_waiting_connection_of_each_address_in_turn() {
        let mut budget = ReceiveBudget::new(10 << 20);
        assert!(budget.reserve(1, A, 8 << 20));
        assert!(
            !budget.reserve(2, A, 4 << 20),
            "waits: 12 MiB would be over the budget"
        );
        assert!(!budget.reserve(3, A, 4 << 20));
        assert!(!budget.reserve(4, B, 4 << 20));
        let mut admitted = Vec::new();
        budget.release(8 << 20, &mut admitted);
        assert_eq!(
            admitted,
            [(2, 4 << 20), (4, 4 << 20)],
            "a's first, then b's turn"
        );
        assert_eq!(budget.in_use(), 8 << 20);
    }

    #[test]
    fn frames_that_fit_are_reserved_at_once() {
        let mut budget = ReceiveBudget::new(100);
        assert!(budget.reserve(1, A, 60));
        assert!(budget.reserve(2, A, 40));
        assert_eq!(budget.in_use(), 100);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn waiting_connections_are_admitted_in_the_order_they_asked() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, A, 90));
        assert!(!budget.reserve(2, A, 50));
        assert!(!budget.reserve(3, A, 30));
        // 3 would fit beside 1 now, but 2 asked first.
        budget.release(0, &mut admitted);
        assert!(admitted.is_empty());
        assert!(
            !budget.reserve(4, A, 5),
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
        assert!(budget.reserve(1, A, 10));
        assert!(!budget.reserve(2, A, 500));
        budget.release(10, &mut admitted);
        assert_eq!(admitted, [(2, 500)]);
        assert!(
            !budget.reserve(3, A, 1),
            "over the budget while the large one is in"
        );
        admitted.clear();
        budget.release(500, &mut admitted);
        assert_eq!(admitted, [(3, 1)]);
        let mut empty = ReceiveBudget::new(100);
        assert!(empty.reserve(1, A, 500), "alone, it is admitted at once");
    }

    #[test]
    fn a_connection_closed_while_it_waits_lets_those_behind_it_in() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, A, 60));
        assert!(!budget.reserve(2, A, 80));
        assert!(!budget.reserve(3, A, 40));
        budget.forget(2, A, &mut admitted);
        assert_eq!(admitted, [(3, 40)]);
        assert_eq!(budget.in_use(), 100);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn hosts_take_turns_however_many_connections_each_has() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, A, 100));
        // A queues five connections before B and C ask for one each.
        for key in 10..15 {
            assert!(!budget.reserve(key, A, 100));
        }
        assert!(!budget.reserve(20, B, 100));
        assert!(!budget.reserve(30, C, 100));
        let mut order = Vec::new();
        let mut holding = 100;
        while budget.waiting() > 0 {
            budget.release(holding, &mut admitted);
            assert_eq!(admitted.len(), 1, "one frame of 100 at a time");
            let (key, bytes) = admitted.pop().unwrap();
            order.push(key);
            holding = bytes;
        }
        assert_eq!(order, [10, 20, 30, 11, 12, 13, 14]);
        assert_eq!(budget.in_use(), 100);
    }

    #[test]
    fn a_host_whose_last_connection_closes_loses_its_turn() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        assert!(budget.reserve(1, A, 100));
        assert!(!budget.reserve(10, A, 60));
        assert!(!budget.reserve(20, B, 60));
        assert!(!budget.reserve(11, A, 40));
        budget.forget(10, A, &mut admitted);
        assert!(admitted.is_empty(), "nothing fits yet");
        budget.forget(20, B, &mut admitted);
        budget.release(100, &mut admitted);
        assert_eq!(admitted, [(11, 40)]);
        assert_eq!(budget.waiting(), 0);
        assert!(budget.reserve(2, B, 60), "no queue left behind");
        budget.forget(99, A, &mut admitted);
        assert_eq!(budget.in_use(), 100);
    }

    #[test]
    fn an_ipv6_network_of_64_bits_and_a_mapped_ipv4_address_take_one_turn() {
        let mut budget = ReceiveBudget::new(100);
        let mut admitted = Vec::new();
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_net: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_net: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let mapped_a: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(budget.reserve(1, one, 100));
        assert!(!budget.reserve(10, one, 100));
        assert!(!budget.reserve(11, same_net, 100));
        assert!(!budget.reserve(20, other_net, 100));
        assert!(!budget.reserve(30, A, 100));
        assert!(!budget.reserve(31, mapped_a, 100));
        let mut order = Vec::new();
        while budget.waiting() > 0 {
            budget.release(100, &mut admitted);
            order.extend(admitted.drain(..).map(|(key, _)| key));
        }
        assert_eq!(order, [10, 20, 30, 11, 31]);
        budget.forget(31, mapped_a, &mut admitted);
        assert!(admitted.is_empty());
    }
}

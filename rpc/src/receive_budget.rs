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
//! Who waits goes in turns by host (see [`host_of`]: an IPv6 address's /64 prefix is one
//! host), first come first served for one host: a host that opens many connections gets
//! one turn in each round, as does every other host waiting, so that it cannot put all
//! its connections ahead of another's. A frame that waits for room holds up those behind
//! it, so that a stream of smaller frames cannot starve a large one. Two rules keep one
//! host from holding the budget itself:
//!
//! - **a share per host**: while another host waits, a host holds at most half the
//!   budget ([`SHARE_DIVISOR`]; its first frame always counts as within it, so that a
//!   frame larger than half can arrive). It is passed over, not waited for, while it is
//!   at its share, so that another host's frame that fits goes in at once. With nobody
//!   else waiting it may use the whole budget: many executors on one host sending
//!   results at once are not held back for nothing.
//! - **probation**: a host whose connection was cut off while its frame held room or
//!   waited for it (it sent nothing for `network.timeout` in the middle of a frame, or
//!   the frame came slower than 1 MiB/s after that) is on probation for
//!   [`PROBATION_TIMEOUTS`] times `network.timeout` from its last such cut. Its
//!   connections wait behind those of every host not on probation, the hosts on
//!   probation together hold at most half the budget, and it never holds more than its
//!   share. The one exception is a frame larger than half the budget (when
//!   `rpc.message.maxSize` is): it goes in only when its host is the only one waiting
//!   and no host on probation holds anything (else it would never go in), and is passed
//!   over, holding up nobody, until then. Probation goes by host, not by connection:
//!   reconnecting does not end it.
//!   A connection its peer ends itself (it closes or resets it, or breaks the protocol)
//!   with its frame unfinished, while that frame holds room or waits for it, counts as
//!   cut off too ([`ReceiveBudget::ended_unfinished`]) when the frame was under way for
//!   half of `network.timeout` or more (from its first bytes, or from when the budget
//!   let it in), or when another host waits for room as it ends: otherwise a host could
//!   hold room for just under `network.timeout`, close, reconnect and hold it again,
//!   never cut off. What is spared is a peer that fails early in a frame while no other
//!   host waits (an executor that crashes mid-result on a quiet driver): its frame held
//!   nobody up. A connection this side ends for its own reasons (it stops, or evicts the
//!   connection to make room for another, which a third party can bring about) never
//!   counts.
//!
//! What this costs: a host holding room can hold up other hosts' large frames, and what
//! follows them on their connections (an executor's heartbeats). Without authentication
//! a hostile host can hold room at no cost for `network.timeout` (a frame's first bytes,
//! then a trickle, is cut off after it), and longer only by sending its frames at the
//! frame clock's 1 MiB/s (248 s for a 128 MiB frame with the defaults), however many
//! connections it opens. So it holds up another host's frame by at most
//! `network.timeout` (or the time its own frames take at 1 MiB/s) per turn, and a host
//! that only trickles gets that turn once, whether it waits to be cut off or closes its
//! connections itself: from its first cut on, it is on probation,
//! behind everyone else and within half the budget, for as long as it keeps attacking
//! (each cut renews it), and half the budget stays open to the others. Each further
//! host an attacker controls (each IPv4 address, each IPv6 /64) buys it one more turn.
//! That is the price of not being made to hold `rpc.io.maxConnections` frames of
//! `rpc.message.maxSize` at once; where peers may be hostile, `authenticate=true` keeps
//! strangers out of the budget altogether (a peer that has not authenticated sends no
//! frame above 512 bytes).
//!
//! This is a pure state machine: the event loop tells it of reservations, releases, cuts
//! and closed connections, with the time they happened, and reads the connections it
//! admits (see the first unit test for a walk through it).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::host::host_of;
use crate::outbox::ConnKey;

/// Frames up to this length (header and padding included) are read without a
/// reservation. flint_wire's decoder reads at most 256 KiB at a time too, so a
/// connection's buffer holds at most about twice this without a reservation.
pub const UNBUDGETED_FRAME: usize = 256 << 10;

/// A host's share of the budget while others wait, and what the hosts on probation hold
/// together: the budget divided by this. Half leaves the other half to everyone else,
/// whatever one host (or every host on probation) does.
pub const SHARE_DIVISOR: usize = 2;

/// How long a host cut off for a stalled or trickled frame stays on probation, in
/// `network.timeout`s from its last cut: long beside the `network.timeout` a trickling
/// connection holds its room, so that a host that keeps attacking is cut again, and
/// stays on probation, long before it ends.
pub const PROBATION_TIMEOUTS: u32 = 10;

/// How a connection whose frame held room in the budget, or waited for it, ended before
/// the frame was whole: what decides whether its host goes on probation (see
/// [`ReceiveBudget::ended_unfinished`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// This side cut it off for its frame's pace: nothing came for `network.timeout` in
    /// the middle of it, or it came slower than 1 MiB/s after that.
    CutOff,
    /// Its peer ended it (closed or reset it, or sent what breaks the protocol), the
    /// frame having been under way for `under_way`: since its first bytes, or since the
    /// budget let it in after a wait.
    PeerEnded { under_way: Duration },
    /// This side ended it for reasons of its own: it stops, or it made room for another
    /// connection. Not held against the peer.
    NotThePeers,
}

/// Whether `bytes` more fit beside `in_use` of a budget of `limit`: always when nothing
/// is reserved, so that a frame larger than the budget does not wait for good.
fn fits(in_use: usize, limit: usize, bytes: usize) -> bool {
    in_use == 0 || in_use.saturating_add(bytes) <= limit
}

/// Where a connection stands in the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// It holds `bytes` for its frame.
    Holds { host: IpAddr, bytes: usize },
    /// It waits in its host's queue.
    Waits { host: IpAddr },
}

/// The bytes reserved for large frames being received, by host, the connections waiting
/// for room, by host, and the hosts on probation.
#[derive(Debug)]
pub struct ReceiveBudget {
    limit: usize,
    in_use: usize,
    /// `network.timeout`: a frame its peer ends after half of it counts as cut off.
    network_timeout: Duration,
    /// How long a cut puts its host on probation.
    probation: Duration,
    /// Hosts (see [`host_of`]) with connections waiting, in the order their turns come.
    turns: VecDeque<IpAddr>,
    /// Each of those hosts' waiting connections and the bytes they ask for, in the order
    /// they asked; never an empty queue.
    queues: HashMap<IpAddr, VecDeque<(ConnKey, usize)>>,
    /// What each host holds; never 0.
    held: HashMap<IpAddr, usize>,
    /// Every connection that holds room or waits for it.
    places: HashMap<ConnKey, Place>,
    /// When each host's probation ends (some may have ended: they are purged now and
    /// then, see [`ReceiveBudget::cut_off`]).
    probation_ends: HashMap<IpAddr, Instant>,
    /// How many hosts `probation_ends` may hold before ended probations are purged.
    purge_at: usize,
}

impl ReceiveBudget {
    /// A budget of `limit` bytes, whose hosts cut off stay on probation for
    /// [`PROBATION_TIMEOUTS`] times `network_timeout` (`network.timeout`).
    pub fn new(limit: usize, network_timeout: Duration) -> Self {
        ReceiveBudget {
            limit,
            in_use: 0,
            network_timeout,
            probation: network_timeout.saturating_mul(PROBATION_TIMEOUTS),
            turns: VecDeque::new(),
            queues: HashMap::new(),
            held: HashMap::new(),
            places: HashMap::new(),
            probation_ends: HashMap::new(),
            purge_at: 64,
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

    /// Bytes the host of `peer` holds.
    #[cfg(test)]
    pub fn held_by(&self, peer: IpAddr) -> usize {
        self.held.get(&host_of(peer)).copied().unwrap_or(0)
    }

    /// Whether the host of `peer` is on probation at `now`.
    #[cfg(test)]
    pub fn on_probation(&self, peer: IpAddr, now: Instant) -> bool {
        self.host_on_probation(&host_of(peer), now)
    }

    fn host_on_probation(&self, host: &IpAddr, now: Instant) -> bool {
        self.probation_ends.get(host).is_some_and(|&end| end > now)
    }

    /// Reserves `bytes` at `now` for the frame connection `key`, from `peer`, is
    /// receiving: `true` if they are reserved, `false` if the connection now waits to be
    /// admitted by a later [`ReceiveBudget::release`]. It waits when the bytes do not
    /// fit, when its host is at its share while others wait, when it is on probation and
    /// others (or the hosts on probation) hold up, or when a connection ahead of it waits
    /// for room, so that a stream of smaller frames cannot starve a large one. A frame
    /// larger than the whole budget is admitted when nothing else is reserved, so that no
    /// frame waits for good. Others that asking admits (their host's probation ended
    /// meanwhile) go into `admitted`.
    pub fn reserve(
        &mut self,
        key: ConnKey,
        peer: IpAddr,
        bytes: usize,
        now: Instant,
        admitted: &mut Vec<(ConnKey, usize)>,
    ) -> bool {
        debug_assert!(
            !self.places.contains_key(&key),
            "a connection reserved twice"
        );
        let host = host_of(peer);
        let queue = self.queues.entry(host).or_default();
        if queue.is_empty() {
            self.turns.push_back(host);
        }
        queue.push_back((key, bytes));
        self.places.insert(key, Place::Waits { host });
        let before = admitted.len();
        self.admit(now, admitted);
        match admitted[before..].iter().position(|&(done, _)| done == key) {
            Some(at) => {
                admitted.remove(before + at);
                true
            }
            None => false,
        }
    }

    /// Connection `key` is done with the budget at `now`: its frame arrived, or it closed.
    /// What it held is given back (the bytes are returned; 0 if it held nothing), or its
    /// place in the queue given up; then the waiting connections that now may go in are
    /// admitted, turn by turn, into `admitted`, with the bytes each reserved.
    pub fn release(
        &mut self,
        key: ConnKey,
        now: Instant,
        admitted: &mut Vec<(ConnKey, usize)>,
    ) -> usize {
        let released = match self.places.remove(&key) {
            Some(Place::Holds { host, bytes }) => {
                debug_assert!(bytes <= self.in_use, "released more than was reserved");
                self.in_use = self.in_use.saturating_sub(bytes);
                if let Some(held) = self.held.get_mut(&host) {
                    *held = held.saturating_sub(bytes);
                    if *held == 0 {
                        self.held.remove(&host);
                    }
                }
                bytes
            }
            Some(Place::Waits { host }) => {
                if let Some(queue) = self.queues.get_mut(&host) {
                    if let Some(at) = queue.iter().position(|&(waiting, _)| waiting == key) {
                        queue.remove(at);
                    }
                    if queue.is_empty() {
                        self.queues.remove(&host);
                        self.turns.retain(|&waiting| waiting != host);
                    }
                }
                0
            }
            None => 0,
        };
        self.admit(now, admitted);
        released
    }

    /// A connection from `peer` was cut off at `now` for a frame that stalled or came too
    /// slowly while it held room or waited for it: its host is on probation until
    /// `now` + the probation (see the module's docs). Call [`ReceiveBudget::release`]
    /// for the connection after this, so that what it gives back goes to the others
    /// first. Returns whether the host was in good standing until now.
    pub fn cut_off(&mut self, peer: IpAddr, now: Instant) -> bool {
        if self.probation_ends.len() >= self.purge_at {
            self.probation_ends.retain(|_, &mut end| end > now);
            // Purged again only once as many more are on probation as are left: each
            // purge is paid for by the cuts since the last, however many hosts there are.
            self.purge_at = (self.probation_ends.len() * 2).max(64);
        }
        let end = now.checked_add(self.probation).unwrap_or(now);
        self.probation_ends
            .insert(host_of(peer), end)
            .is_none_or(|ended| ended <= now)
    }

    /// A connection from `peer`, whose frame held room or waited for it, ended at `now`
    /// before the frame was whole, as `how` says: whether that counts as a cut (see the
    /// module's docs), which [`ReceiveBudget::cut_off`] is then called for. Call it
    /// before [`ReceiveBudget::release`], while the connection still holds its room or
    /// place, so that whether another host waits is seen as it was. Returns whether the
    /// host was in good standing until now and is on probation from now.
    pub fn ended_unfinished(&mut self, peer: IpAddr, how: Unfinished, now: Instant) -> bool {
        let counts = match how {
            Unfinished::CutOff => true,
            Unfinished::NotThePeers => false,
            Unfinished::PeerEnded { under_way } => {
                under_way >= self.network_timeout / 2 || self.another_host_waits(peer)
            }
        };
        counts && self.cut_off(peer, now)
    }

    /// Whether a host other than `peer`'s has a connection waiting for room.
    fn another_host_waits(&self, peer: IpAddr) -> bool {
        let host = host_of(peer);
        self.turns.iter().any(|&waiting| waiting != host)
    }

    /// Admits the waiting connections that may go in at `now`, one at a time, each time
    /// the first of them in the order of [`ReceiveBudget::next_admissible`]; the host
    /// admitted goes to the back of the turns.
    fn admit(&mut self, now: Instant, admitted: &mut Vec<(ConnKey, usize)>) {
        while let Some(at) = self.next_admissible(now) {
            let Some(host) = self.turns.remove(at) else {
                debug_assert!(false, "a turn out of range");
                return;
            };
            let Some(queue) = self.queues.get_mut(&host) else {
                debug_assert!(false, "a turn without a queue");
                continue;
            };
            let Some((key, bytes)) = queue.pop_front() else {
                debug_assert!(false, "an empty queue kept");
                self.queues.remove(&host);
                continue;
            };
            if queue.is_empty() {
                self.queues.remove(&host);
            } else {
                self.turns.push_back(host);
            }
            self.in_use = self.in_use.saturating_add(bytes);
            *self.held.entry(host).or_default() += bytes;
            self.places.insert(key, Place::Holds { host, bytes });
            admitted.push((key, bytes));
        }
    }

    /// The turn (its index in `turns`) whose first connection goes in next at `now`, if
    /// any may. Hosts not on probation come first, in turn order: one at its share while
    /// another of them waits is passed over; the first other one goes in if its frame
    /// fits, and holds up everyone behind it if not. Then the hosts on probation, in turn
    /// order, within half the budget among them; a frame larger than that half is passed
    /// over unless its host is the only one waiting and no host on probation holds any.
    fn next_admissible(&self, now: Instant) -> Option<usize> {
        let share = self.limit / SHARE_DIVISOR;
        let front = |host: &IpAddr| {
            self.queues
                .get(host)
                .and_then(VecDeque::front)
                .map_or(0, |&(_, bytes)| bytes)
        };
        let held = |host: &IpAddr| self.held.get(host).copied().unwrap_or(0);
        let in_good_standing = self
            .turns
            .iter()
            .filter(|host| !self.host_on_probation(host, now))
            .count();
        for (at, host) in self.turns.iter().enumerate() {
            if self.host_on_probation(host, now) {
                continue;
            }
            let (bytes, holds) = (front(host), held(host));
            let within_share =
                holds == 0 || holds.saturating_add(bytes) <= share || in_good_standing == 1;
            if !within_share {
                continue;
            }
            return fits(self.in_use, self.limit, bytes).then_some(at);
        }
        if in_good_standing == self.turns.len() {
            return None;
        }
        let on_probation: usize = self
            .held
            .iter()
            .filter(|(host, _)| self.host_on_probation(host, now))
            .map(|(_, &bytes)| bytes)
            .sum();
        for (at, host) in self.turns.iter().enumerate() {
            if !self.host_on_probation(host, now) {
                continue;
            }
            let bytes = front(host);
            if bytes > share {
                // More than the hosts on probation may hold together: only alone, with
                // nothing else waiting and nothing on probation held, or it would never
                // go in. Passed over otherwise, so that it holds up nobody.
                if self.turns.len() == 1 && on_probation == 0 {
                    return fits(self.in_use, self.limit, bytes).then_some(at);
                }
                continue;
            }
            // Within what the hosts on probation hold together, the host's own share too;
            // the first that does not fit holds up those behind it.
            return (on_probation.saturating_add(bytes) <= share
                && fits(self.in_use, self.limit, bytes))
            .then_some(at);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
    const H: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
    const SEC: Duration = Duration::from_secs(1);
    const MIB: usize = 1 << 20;

    /// A budget of `limit` whose `network.timeout` is 10 s (so its probation lasts
    /// 100 s), and the instant its tests start.
    fn budget(limit: usize) -> (ReceiveBudget, Instant) {
        (ReceiveBudget::new(limit, 10 * SEC), Instant::now())
    }

    /// Reserves at `now`, expecting nobody else to be admitted by it.
    fn reserve(
        budget: &mut ReceiveBudget,
        key: ConnKey,
        peer: IpAddr,
        bytes: usize,
        now: Instant,
    ) -> bool {
        let mut others = Vec::new();
        let reserved = budget.reserve(key, peer, bytes, now, &mut others);
        assert_eq!(others, [], "asking admitted others");
        reserved
    }

    /// Releases `key` at `now`; returns those admitted.
    fn release(budget: &mut ReceiveBudget, key: ConnKey, now: Instant) -> Vec<(ConnKey, usize)> {
        let mut admitted = Vec::new();
        budget.release(key, now, &mut admitted);
        admitted
    }

    /// The walk through that was the module's example.
    #[test]
    fn a_release_admits_the_first_waiting_connection_of_each_host_in_turn() {
        let (mut budget, t0) = budget(10 * MIB);
        assert!(reserve(&mut budget, 1, A, 8 * MIB, t0));
        assert!(
            !reserve(&mut budget, 2, A, 4 * MIB, t0),
            "waits: 12 MiB would be over the budget"
        );
        assert!(!reserve(&mut budget, 3, A, 4 * MIB, t0));
        assert!(!reserve(&mut budget, 4, B, 4 * MIB, t0));
        assert_eq!(budget.held_by(A), 8 * MIB);
        assert_eq!(
            release(&mut budget, 1, t0),
            [(2, 4 * MIB), (4, 4 * MIB)],
            "a's first, then b's turn"
        );
        assert_eq!(budget.in_use(), 8 * MIB);
        assert_eq!(budget.held_by(A), 4 * MIB);
        assert_eq!(budget.held_by(B), 4 * MIB);
    }

    #[test]
    fn frames_that_fit_are_reserved_at_once() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 60, t0));
        assert!(reserve(&mut budget, 2, A, 40, t0));
        assert_eq!(budget.in_use(), 100);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn waiting_connections_are_admitted_in_the_order_they_asked() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 90, t0));
        assert!(!reserve(&mut budget, 2, A, 50, t0));
        assert!(!reserve(&mut budget, 3, A, 30, t0));
        assert!(
            !reserve(&mut budget, 4, A, 5, t0),
            "nobody overtakes a waiting connection"
        );
        assert_eq!(release(&mut budget, 1, t0), [(2, 50), (3, 30), (4, 5)]);
        assert_eq!(budget.in_use(), 85);
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn a_frame_larger_than_the_budget_waits_until_nothing_else_is_reserved() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 10, t0));
        assert!(!reserve(&mut budget, 2, A, 500, t0));
        assert_eq!(release(&mut budget, 1, t0), [(2, 500)]);
        assert!(
            !reserve(&mut budget, 3, A, 1, t0),
            "over the budget while the large one is in"
        );
        assert_eq!(release(&mut budget, 2, t0), [(3, 1)]);
        let (mut empty, _) = self::budget(100);
        assert!(
            reserve(&mut empty, 1, A, 500, t0),
            "alone, it is admitted at once"
        );
    }

    #[test]
    fn a_connection_closed_while_it_waits_lets_those_behind_it_in() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 60, t0));
        assert!(!reserve(&mut budget, 2, A, 80, t0));
        assert!(!reserve(&mut budget, 3, A, 40, t0));
        assert_eq!(release(&mut budget, 2, t0), [(3, 40)]);
        assert_eq!(budget.in_use(), 100);
        assert_eq!(budget.waiting(), 0);
        assert_eq!(release(&mut budget, 2, t0), [], "released once");
        assert_eq!(budget.in_use(), 100);
    }

    #[test]
    fn hosts_take_turns_however_many_connections_each_has() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 100, t0));
        // A queues five connections before B and C ask for one each.
        for key in 10..15 {
            assert!(!reserve(&mut budget, key, A, 100, t0));
        }
        assert!(!reserve(&mut budget, 20, B, 100, t0));
        assert!(!reserve(&mut budget, 30, C, 100, t0));
        let mut order = Vec::new();
        let mut holding = 1;
        while budget.waiting() > 0 {
            let admitted = release(&mut budget, holding, t0);
            assert_eq!(admitted.len(), 1, "one frame of 100 at a time");
            holding = admitted[0].0;
            order.push(holding);
        }
        assert_eq!(order, [10, 20, 30, 11, 12, 13, 14]);
        assert_eq!(budget.in_use(), 100);
    }

    #[test]
    fn a_host_whose_last_connection_closes_loses_its_turn() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 100, t0));
        assert!(!reserve(&mut budget, 10, A, 60, t0));
        assert!(!reserve(&mut budget, 20, B, 60, t0));
        assert!(!reserve(&mut budget, 11, A, 40, t0));
        assert_eq!(release(&mut budget, 10, t0), [], "nothing fits yet");
        assert_eq!(release(&mut budget, 20, t0), []);
        assert_eq!(release(&mut budget, 1, t0), [(11, 40)]);
        assert_eq!(budget.waiting(), 0);
        assert!(reserve(&mut budget, 2, B, 60, t0), "no queue left behind");
        assert_eq!(release(&mut budget, 99, t0), [], "never seen");
        assert_eq!(budget.in_use(), 100);
    }

    #[test]
    fn an_ipv6_network_of_64_bits_and_a_mapped_ipv4_address_take_one_turn() {
        let (mut budget, t0) = budget(100);
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_net: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_net: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let mapped_a: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(reserve(&mut budget, 1, one, 100, t0));
        assert!(!reserve(&mut budget, 10, one, 100, t0));
        assert!(!reserve(&mut budget, 11, same_net, 100, t0));
        assert!(!reserve(&mut budget, 20, other_net, 100, t0));
        assert!(!reserve(&mut budget, 30, A, 100, t0));
        assert!(!reserve(&mut budget, 31, mapped_a, 100, t0));
        let mut order = Vec::new();
        let mut holding = 1;
        while budget.waiting() > 0 {
            let admitted = release(&mut budget, holding, t0);
            holding = admitted[0].0;
            order.push(holding);
        }
        assert_eq!(order, [10, 20, 30, 11, 31]);
        // One host's probation is its whole network's.
        budget.cut_off(same_net, t0);
        assert!(budget.on_probation(one, t0));
        assert!(!budget.on_probation(other_net, t0));
        budget.cut_off(A, t0);
        assert!(budget.on_probation(mapped_a, t0));
    }

    #[test]
    fn a_host_alone_may_use_the_whole_budget() {
        let (mut budget, t0) = budget(100);
        for key in 1..=4 {
            assert!(reserve(&mut budget, key, A, 25, t0));
        }
        assert_eq!(budget.held_by(A), 100);
    }

    #[test]
    fn a_host_past_its_share_is_passed_over_while_another_host_waits() {
        let (mut budget, t0) = budget(100);
        // Alone, A takes 75 and queues more.
        for key in 1..=3 {
            assert!(reserve(&mut budget, key, A, 25, t0));
        }
        assert!(!reserve(&mut budget, 4, A, 30, t0));
        assert!(!reserve(&mut budget, 5, A, 10, t0));
        // B's frame fits beside A's: it goes in at once, though A waits ahead of it.
        assert!(reserve(&mut budget, 10, B, 20, t0));
        // While B waits, A is held to half the budget: what A gives back goes to B.
        assert!(!reserve(&mut budget, 11, B, 30, t0));
        assert_eq!(release(&mut budget, 1, t0), [(11, 30)]);
        assert_eq!(release(&mut budget, 2, t0), [], "A holds 25 and asks 30");
        // With nobody else waiting A may go past its share again.
        assert_eq!(release(&mut budget, 10, t0), [(4, 30), (5, 10)]);
        assert_eq!(budget.held_by(A), 65);
    }

    #[test]
    fn a_host_s_first_frame_counts_as_within_its_share_however_large() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, B, 30, t0));
        assert!(!reserve(&mut budget, 2, B, 80, t0), "does not fit");
        // While A waits, B is at its share and passed over; A's 60, above half the
        // budget, is its first frame.
        assert!(reserve(&mut budget, 3, A, 60, t0));
        assert_eq!(budget.held_by(A), 60);
        assert!(
            !reserve(&mut budget, 4, A, 10, t0),
            "A's second is held to its share"
        );
        assert_eq!(release(&mut budget, 1, t0), [], "B's 80 does not fit yet");
        assert_eq!(release(&mut budget, 3, t0), [(2, 80), (4, 10)]);
    }

    #[test]
    fn a_host_at_its_share_holds_nobody_up_but_one_whose_frame_does_not_fit_does() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 60, t0));
        assert!(!reserve(&mut budget, 2, B, 50, t0), "does not fit");
        assert!(
            !reserve(&mut budget, 3, A, 10, t0),
            "60 + 10 > 50 while B waits"
        );
        // B's frame does not fit: C's, which would, waits behind it rather than starve it.
        assert!(!reserve(&mut budget, 4, C, 10, t0));
        assert_eq!(release(&mut budget, 1, t0), [(2, 50), (3, 10), (4, 10)]);
    }

    #[test]
    fn a_host_cut_off_waits_behind_the_others_and_within_half_the_budget() {
        let (mut budget, t0) = budget(100);
        for key in 1..=4 {
            assert!(reserve(&mut budget, key, A, 25, t0));
        }
        for key in 5..=8 {
            assert!(!reserve(&mut budget, key, A, 25, t0));
        }
        assert!(!reserve(&mut budget, 20, B, 40, t0));
        // A's first connection is cut off for trickling: A is on probation, B goes first.
        budget.cut_off(A, t0 + SEC);
        assert!(budget.on_probation(A, t0 + SEC));
        assert_eq!(release(&mut budget, 1, t0 + SEC), []);
        assert_eq!(release(&mut budget, 2, t0 + SEC), [(20, 40)]);
        // A reconnects: its new connection waits too, within half the budget (it holds
        // 50 already).
        assert!(!reserve(&mut budget, 9, A, 25, t0 + SEC));
        assert_eq!(release(&mut budget, 20, t0 + 2 * SEC), []);
        assert_eq!(budget.in_use(), 50);
        // Alone, a host on probation still gets in, within half the budget.
        assert_eq!(release(&mut budget, 3, t0 + 2 * SEC), [(5, 25)]);
        assert_eq!(budget.held_by(A), 50);
        // Hosts on probation share that half.
        budget.cut_off(B, t0 + 2 * SEC);
        assert!(!reserve(&mut budget, 21, B, 10, t0 + 2 * SEC));
        assert_eq!(release(&mut budget, 4, t0 + 3 * SEC), [(6, 25)]);
        assert_eq!(release(&mut budget, 5, t0 + 3 * SEC), [(21, 10)]);
        // A host in good standing goes ahead of them all.
        assert!(reserve(&mut budget, 30, C, 40, t0 + 3 * SEC));
        // Each cut renews the probation; it ends 100 s after the last: A, in good
        // standing again, may take the room the hosts on probation may not.
        budget.cut_off(A, t0 + 50 * SEC);
        assert!(budget.on_probation(A, t0 + 149 * SEC));
        assert!(!budget.on_probation(A, t0 + 150 * SEC));
        assert!(budget.on_probation(B, t0 + 101 * SEC));
        assert!(!budget.on_probation(B, t0 + 102 * SEC));
        // Alone in its turn and in good standing, it may go past its share again.
        assert_eq!(release(&mut budget, 30, t0 + 150 * SEC), [(7, 25), (8, 25)]);
    }

    #[test]
    fn a_frame_larger_than_half_from_a_host_on_probation_goes_in_only_alone() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, B, 40, t0));
        budget.cut_off(A, t0);
        budget.cut_off(C, t0);
        assert!(!reserve(&mut budget, 2, A, 70, t0), "does not fit");
        // C's frame, within half, goes past A's, which may not go in while another waits
        // and holds up nobody.
        assert!(reserve(&mut budget, 3, C, 20, t0));
        assert!(
            !reserve(&mut budget, 4, C, 40, t0),
            "C holds 20 of the half"
        );
        assert_eq!(
            release(&mut budget, 1, t0),
            [],
            "A's 70 would take the hosts on probation past half the budget"
        );
        assert_eq!(release(&mut budget, 3, t0), [(4, 40)], "A's is passed over");
        // Alone, with nothing on probation held: the one exception, lest it wait for good.
        assert_eq!(release(&mut budget, 4, t0), [(2, 70)]);
        assert_eq!(budget.held_by(A), 70);
        // Beside it, a host on probation gets nothing, one in good standing what fits.
        assert!(!reserve(&mut budget, 5, C, 10, t0));
        assert!(reserve(&mut budget, 6, B, 30, t0));
        assert_eq!(release(&mut budget, 2, t0), [(5, 10)]);
    }

    #[test]
    fn a_host_whose_probation_ended_is_admitted_when_anything_is_asked() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, B, 10, t0));
        budget.cut_off(A, t0);
        assert!(reserve(&mut budget, 2, A, 40, t0), "nobody else waits");
        assert!(
            !reserve(&mut budget, 3, A, 20, t0),
            "it would fit, but not in half the budget"
        );
        // Its probation ends; the next ask admits it, beside the one asking.
        assert!(budget.on_probation(A, t0 + 99 * SEC));
        let mut others = Vec::new();
        assert!(budget.reserve(4, C, 5, t0 + 100 * SEC, &mut others));
        assert_eq!(others, [(3, 20)]);
        assert_eq!(budget.in_use(), 75);
    }

    #[test]
    fn a_frame_its_peer_abandons_counts_as_cut_off_after_half_the_timeout() {
        // network.timeout is 10 s: 5 s under way is half of it.
        let under_way = |secs: u64| Unfinished::PeerEnded {
            under_way: Duration::from_millis(secs),
        };
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 60, t0));
        assert!(
            !budget.ended_unfinished(A, under_way(4_999), t0 + 5 * SEC),
            "an early end, nobody waiting, is spared"
        );
        assert!(!budget.on_probation(A, t0 + 5 * SEC));
        assert!(budget.ended_unfinished(A, under_way(5_000), t0 + 5 * SEC));
        assert!(budget.on_probation(A, t0 + 5 * SEC));
        assert!(
            !budget.ended_unfinished(A, under_way(9_000), t0 + 9 * SEC),
            "already on probation: renewed, not newly put on it"
        );
        assert!(budget.on_probation(A, t0 + 108 * SEC), "renewed at 9 s");
        // This side's own reasons never count, however long the frame took.
        assert!(!budget.ended_unfinished(B, Unfinished::NotThePeers, t0 + 9 * SEC));
        assert!(!budget.on_probation(B, t0 + 9 * SEC));
        // A cut for the frame's pace always does.
        assert!(budget.ended_unfinished(C, Unfinished::CutOff, t0 + 9 * SEC));
        assert!(budget.on_probation(C, t0 + 9 * SEC));
    }

    #[test]
    fn a_frame_its_peer_abandons_while_another_host_waits_counts_however_early() {
        let (mut budget, t0) = budget(100);
        assert!(reserve(&mut budget, 1, A, 60, t0));
        assert!(!reserve(&mut budget, 2, A, 60, t0), "A's own wait");
        let early = Unfinished::PeerEnded { under_way: SEC };
        assert!(
            !budget.ended_unfinished(A, early, t0 + SEC),
            "only A's own connection waits"
        );
        assert!(!reserve(&mut budget, 3, B, 60, t0 + SEC));
        // B waits for the room A holds: A's early end held B up.
        assert!(budget.ended_unfinished(A, early, t0 + SEC));
        assert_eq!(release(&mut budget, 1, t0 + SEC), [(3, 60)], "B goes first");
        assert!(budget.on_probation(A, t0 + SEC));
    }

    /// The honest host of the trickler simulations: 40 frames of `size` bytes from host
    /// `H`, each asked for as soon as the one before is in, each in within the second it
    /// is admitted in.
    struct HonestFrames {
        size: usize,
        delivered: u32,
        /// The second the frame waiting for room was asked for.
        asked_at: Option<u64>,
        /// The seconds each admitted frame waited (0 for one let in at once).
        waits: Vec<u64>,
    }

    impl HonestFrames {
        /// Its one connection's key, apart from the attacker's.
        const KEY: ConnKey = 1 << 40;

        fn new(size: usize) -> Self {
            HonestFrames {
                size,
                delivered: 0,
                asked_at: None,
                waits: Vec::new(),
            }
        }

        /// Second `second` (at `now`): the connections the budget admitted are taken in
        /// (the attacker's start holding room from this second), and the honest host
        /// sends frames until one must wait or all 40 are in.
        fn turn(
            &mut self,
            budget: &mut ReceiveBudget,
            second: u64,
            now: Instant,
            admitted: &mut Vec<(ConnKey, usize)>,
            holding: &mut HashMap<ConnKey, u64>,
        ) {
            loop {
                for (key, _) in std::mem::take(admitted) {
                    if key == Self::KEY {
                        self.waits
                            .push(second - self.asked_at.take().expect("asked"));
                        self.delivered += 1;
                        budget.release(Self::KEY, now, admitted);
                    } else {
                        holding.insert(key, second);
                    }
                }
                if !admitted.is_empty() {
                    continue;
                }
                if self.delivered == 40 || self.asked_at.is_some() {
                    return;
                }
                if budget.reserve(Self::KEY, H, self.size, now, admitted) {
                    self.delivered += 1;
                    budget.release(Self::KEY, now, admitted);
                } else {
                    self.asked_at = Some(second);
                }
            }
        }
    }

    /// The attack of the reconnecting trickler, but closing its own connections just
    /// before `network.timeout` rather than being cut off: on made-up instants, an
    /// attacker that fills a budget of four frames, each connection ending itself 119 s
    /// after it is let in (the timeout is 120 s), against an honest host's frames of
    /// 1 MiB; the honest host is held up once, not per frame.
    #[test]
    fn a_trickler_that_closes_its_own_connections_is_put_on_probation_all_the_same() {
        const TIMEOUT: u64 = 120;
        const LARGE: usize = (128 << 20) + UNBUDGETED_FRAME;
        const SMALL: usize = MIB + UNBUDGETED_FRAME;
        let t0 = Instant::now();
        let limit = 4 * LARGE;
        let mut budget = ReceiveBudget::new(limit, SEC * TIMEOUT as u32);
        let mut holding: HashMap<ConnKey, u64> = HashMap::new();
        let mut admitted = Vec::new();
        let mut next_key: ConnKey = 0;
        for _ in 0..8 {
            next_key += 1;
            if budget.reserve(next_key, A, LARGE, t0, &mut admitted) {
                holding.insert(next_key, 0);
            }
        }
        let mut honest = HonestFrames::new(SMALL);
        let mut now = t0;
        for second in 10..20 * TIMEOUT {
            now = t0 + SEC * second as u32;
            let closing: Vec<ConnKey> = holding
                .iter()
                .filter(|&(_, &since)| second >= since + TIMEOUT - 1)
                .map(|(&key, _)| key)
                .collect();
            for key in closing {
                let since = holding.remove(&key).expect("held");
                let how = Unfinished::PeerEnded {
                    under_way: SEC * (second - since) as u32,
                };
                budget.ended_unfinished(A, how, now);
                budget.release(key, now, &mut admitted);
                next_key += 1;
                if budget.reserve(next_key, A, LARGE, now, &mut admitted) {
                    holding.insert(next_key, second);
                }
            }
            honest.turn(&mut budget, second, now, &mut admitted, &mut holding);
            if honest.delivered == 40 {
                break;
            }
        }
        assert_eq!(honest.delivered, 40);
        let held_up: Vec<u64> = honest.waits.into_iter().filter(|&w| w > 0).collect();
        assert_eq!(held_up.len(), 1, "held up {held_up:?}");
        assert!(held_up[0] <= TIMEOUT, "{held_up:?}");
        assert!(budget.on_probation(A, now));
        assert!(budget.held_by(A) <= limit / 2);
    }

    #[test]
    fn ended_probations_are_purged_as_hosts_are_cut_off() {
        let (mut budget, t0) = budget(100);
        for n in 0..1000u32 {
            let host = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
            budget.cut_off(host, t0 + SEC * n);
        }
        assert!(
            budget.probation_ends.len() <= 256,
            "{} hosts kept",
            budget.probation_ends.len()
        );
        assert!(budget.on_probation(
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 999)),
            t0 + 1000 * SEC
        ));
    }

    /// The attack the receive budget was first found open to, on made-up instants: a host
    /// with 100 connections, each announcing a 128 MiB frame and trickling it (cut off
    /// `network.timeout`, 120 s, after it is admitted), reconnecting at once when cut off,
    /// against another host's 40 frames of 1 MiB, each sent as soon as the one before is
    /// in, from the 10th second. Returns the seconds the honest host's frames waited in
    /// all, and what the attacker held at the end.
    fn reconnecting_trickler_against_frames_of_1_mib(limit: usize) -> (u64, usize) {
        const TIMEOUT: u64 = 120;
        const LARGE: usize = (128 << 20) + UNBUDGETED_FRAME;
        const SMALL: usize = MIB + UNBUDGETED_FRAME;
        let t0 = Instant::now();
        let mut budget = ReceiveBudget::new(limit, SEC * TIMEOUT as u32);
        // The attacker's connections holding room, with the second they were admitted.
        let mut holding: HashMap<ConnKey, u64> = HashMap::new();
        let mut next_key: ConnKey = 1000;
        let mut admitted = Vec::new();
        for key in 0..100 {
            if budget.reserve(key, A, LARGE, t0, &mut admitted) {
                holding.insert(key, 0);
            }
        }
        assert_eq!(holding.len(), limit / LARGE, "alone, it takes what fits");
        let mut honest = HonestFrames::new(SMALL);
        for second in 10..10 * TIMEOUT {
            let now = t0 + SEC * second as u32;
            // Attacker connections trickling for network.timeout are cut off, and open
            // again at once.
            let late: Vec<ConnKey> = holding
                .iter()
                .filter(|&(_, &since)| second >= since + TIMEOUT)
                .map(|(&key, _)| key)
                .collect();
            for key in late {
                holding.remove(&key);
                budget.cut_off(A, now);
                budget.release(key, now, &mut admitted);
                next_key += 1;
                if budget.reserve(next_key, A, LARGE, now, &mut admitted) {
                    holding.insert(next_key, second);
                }
            }
            // The honest host's frame arrives within the second it is admitted in.
            honest.turn(&mut budget, second, now, &mut admitted, &mut holding);
            assert!(budget.in_use() <= budget.limit());
            if honest.delivered == 40 {
                break;
            }
        }
        let waited: u64 = honest.waits.iter().sum();
        assert_eq!(honest.delivered, 40, "waited {waited} s");
        (waited, budget.held_by(A))
    }

    /// With the defaults, the attacker's three frames leave room for the honest host's,
    /// which no longer wait behind its queue of connections. With a budget the attacker
    /// fills, the honest host waits once, for the attacker's first frames to be cut off,
    /// and then no more: from then on the attacker, on probation, holds at most half.
    #[test]
    fn a_reconnecting_trickler_holds_another_host_up_once_not_per_frame() {
        let (waited, _) = reconnecting_trickler_against_frames_of_1_mib(512 * MIB);
        assert_eq!(waited, 0);
        let filled = 4 * ((128 << 20) + UNBUDGETED_FRAME);
        let (waited, attacker_holds) = reconnecting_trickler_against_frames_of_1_mib(filled);
        assert!(
            (100..=120).contains(&waited),
            "the honest host waited {waited} s in all"
        );
        assert!(attacker_holds <= filled / 2, "{attacker_holds}");
    }
}

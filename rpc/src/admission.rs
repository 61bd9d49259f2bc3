//! Which connections from peers are held: at most `rpc.io.maxConnections` in all and
//! `rpc.io.maxConnectionsPerHost` from one host (see [`host_of`]: an IPv6 /64 is one
//! host, an IPv4-mapped address is its IPv4 host), and, when all places are taken, which
//! connection gives up its place for a new one.
//!
//! A connection is *established* once its peer has shown it is one this environment
//! serves: with `authenticate=true`, once it has proved it knows the secret; without, once
//! it has delivered a message to an endpoint here (or a reply to an ask sent on it). The
//! rpc layer knows no more than that (registering an executor is the control plane's
//! business), and needs no more: a stranger that merely connects is never established.
//!
//! At `rpc.io.maxConnections`, a new connection takes the place of the oldest one not yet
//! established, which is closed, saying why; only when every connection is established is
//! the new one refused. So connections that say nothing (or, with authentication on,
//! nothing the peer could not send without the secret) cannot keep an executor, or a new
//! executor with the secret, out: they are the first to go, oldest first. The same holds
//! within one host at `rpc.io.maxConnectionsPerHost`, with the host's own connections:
//! so one host cannot take every place, and a host churning connections takes the
//! places of its own, and of others only while it has fewer than its cap and every
//! place is taken (those others not established within its churn).
//!
//! This is a pure state machine: the event loop asks it what to do with a connection it
//! has just accepted ([`Admission::decide`]) and tells it of connections held, established
//! and closed; it opens, reads and closes no socket.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use crate::host::host_of;
use crate::outbox::ConnKey;

/// Which cap a connection just accepted meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cap {
    /// Its host holds `open` connections, as many as `rpc.io.maxConnectionsPerHost`
    /// allows.
    Host { open: usize },
    /// `open` connections are held, as many as `rpc.io.maxConnections` allows.
    All { open: usize },
}

/// What to do with a connection just accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Hold it.
    Hold,
    /// Close `oldest`, the oldest connection not established yet (of its host, at the
    /// host's cap), then hold it.
    HoldInPlaceOf { oldest: ConnKey, cap: Cap },
    /// Refuse it: every connection the cap counts is established.
    Refuse(Cap),
}

/// The connections from peers held, by host, and those not established yet, oldest first.
#[derive(Debug)]
pub(crate) struct Admission {
    max_connections: usize,
    max_per_host: usize,
    open: usize,
    /// Connections held per host; never 0.
    per_host: HashMap<IpAddr, usize>,
    /// Connections not established yet, by key: keys are handed out in increasing order,
    /// so the first is the oldest.
    unestablished: BTreeMap<ConnKey, IpAddr>,
    /// The same, by host; never an empty set.
    unestablished_by_host: HashMap<IpAddr, BTreeSet<ConnKey>>,
}

impl Admission {
    /// At most `max_connections` connections in all, `max_per_host` from one host.
    pub(crate) fn new(max_connections: usize, max_per_host: usize) -> Self {
        Admission {
            max_connections,
            max_per_host,
            open: 0,
            per_host: HashMap::new(),
            unestablished: BTreeMap::new(),
            unestablished_by_host: HashMap::new(),
        }
    }

    /// Connections held now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open
    }

    /// What to do with a connection from `peer` just accepted: at its host's cap, the
    /// host's oldest connection not established makes room, else it is refused; at the
    /// cap on all connections, the oldest connection not established makes room, else it
    /// is refused.
    pub(crate) fn decide(&self, peer: IpAddr) -> Decision {
        let host = host_of(peer);
        let from_host = self.per_host.get(&host).copied().unwrap_or(0);
        // A host cap no lower than the total is the total's (and named as it).
        if from_host >= self.max_per_host && self.max_per_host < self.max_connections {
            let cap = Cap::Host { open: from_host };
            return match self
                .unestablished_by_host
                .get(&host)
                .and_then(|keys| keys.first())
            {
                Some(&oldest) => Decision::HoldInPlaceOf { oldest, cap },
                None => Decision::Refuse(cap),
            };
        }
        if self.open < self.max_connections {
            return Decision::Hold;
        }
        let cap = Cap::All { open: self.open };
        match self.unestablished.keys().next() {
            Some(&oldest) => Decision::HoldInPlaceOf { oldest, cap },
            None => Decision::Refuse(cap),
        }
    }

    /// Connection `key`, from `peer`, is held, not established yet.
    pub(crate) fn held(&mut self, key: ConnKey, peer: IpAddr) {
        let host = host_of(peer);
        self.open += 1;
        *self.per_host.entry(host).or_default() += 1;
        self.unestablished.insert(key, host);
        self.unestablished_by_host
            .entry(host)
            .or_default()
            .insert(key);
    }

    /// Connection `key` is established: it keeps its place when places run out.
    pub(crate) fn established(&mut self, key: ConnKey) {
        let Some(host) = self.unestablished.remove(&key) else {
            return;
        };
        if let Some(keys) = self.unestablished_by_host.get_mut(&host) {
            keys.remove(&key);
            if keys.is_empty() {
                self.unestablished_by_host.remove(&host);
            }
        }
    }

    /// Connection `key`, from `peer`, held earlier, closed.
    pub(crate) fn closed(&mut self, key: ConnKey, peer: IpAddr) {
        let host = host_of(peer);
        let Some(count) = self.per_host.get_mut(&host) else {
            debug_assert!(false, "a connection closed that was never held");
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.per_host.remove(&host);
        }
        self.open = self.open.saturating_sub(1);
        self.established(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

    /// Does what `decide` says with connection `key` from `peer` (the peer of a
    /// connection closed to make room is its host, which is all `closed` needs); returns
    /// the decision.
    fn arrive(admission: &mut Admission, key: ConnKey, peer: IpAddr) -> Decision {
        let decision = admission.decide(peer);
        match decision {
            Decision::Hold => admission.held(key, peer),
            Decision::HoldInPlaceOf { oldest, .. } => {
                let host = admission.unestablished[&oldest];
                admission.closed(oldest, host);
                admission.held(key, peer);
            }
            Decision::Refuse(_) => {}
        }
        decision
    }

    fn in_place_of_at_all(oldest: ConnKey, open: usize) -> Decision {
        Decision::HoldInPlaceOf {
            oldest,
            cap: Cap::All { open },
        }
    }

    #[test]
    fn connections_are_held_up_to_the_cap_and_established_ones_are_never_replaced() {
        let mut admission = Admission::new(3, 10);
        for key in 1..=3 {
            assert_eq!(arrive(&mut admission, key, A), Decision::Hold);
            admission.established(key);
        }
        assert_eq!(admission.open(), 3);
        assert_eq!(
            arrive(&mut admission, 4, B),
            Decision::Refuse(Cap::All { open: 3 })
        );
        admission.closed(2, A);
        assert_eq!(arrive(&mut admission, 5, B), Decision::Hold);
        assert_eq!(admission.open(), 3);
    }

    #[test]
    fn at_the_cap_the_oldest_connection_not_established_gives_up_its_place() {
        let mut admission = Admission::new(4, 10);
        // An executor (established), then three strangers' connections that say nothing.
        assert_eq!(arrive(&mut admission, 1, C), Decision::Hold);
        admission.established(1);
        for key in 2..=4 {
            assert_eq!(arrive(&mut admission, key, A), Decision::Hold);
        }
        // A new executor takes the oldest stranger's place, and establishes itself.
        assert_eq!(arrive(&mut admission, 5, B), in_place_of_at_all(2, 4));
        admission.established(5);
        // The strangers' churn takes only their own places.
        assert_eq!(arrive(&mut admission, 6, A), in_place_of_at_all(3, 4));
        assert_eq!(arrive(&mut admission, 7, A), in_place_of_at_all(4, 4));
        assert_eq!(arrive(&mut admission, 8, A), in_place_of_at_all(6, 4));
        // Established late, a connection keeps its place from then on.
        admission.established(7);
        assert_eq!(arrive(&mut admission, 9, A), in_place_of_at_all(8, 4));
        assert_eq!(arrive(&mut admission, 10, A), in_place_of_at_all(9, 4));
        admission.established(10);
        assert_eq!(
            arrive(&mut admission, 11, A),
            Decision::Refuse(Cap::All { open: 4 })
        );
        assert_eq!(admission.open(), 4);
    }

    #[test]
    fn a_host_at_its_cap_gives_up_its_own_oldest_place_or_is_refused() {
        let mut admission = Admission::new(10, 2);
        assert_eq!(arrive(&mut admission, 1, A), Decision::Hold);
        assert_eq!(arrive(&mut admission, 2, A), Decision::Hold);
        assert_eq!(arrive(&mut admission, 3, B), Decision::Hold);
        // At its cap, A's next connection takes the place of A's oldest not established,
        // never another host's.
        assert_eq!(
            arrive(&mut admission, 4, A),
            Decision::HoldInPlaceOf {
                oldest: 1,
                cap: Cap::Host { open: 2 }
            }
        );
        admission.established(2);
        admission.established(4);
        assert_eq!(
            arrive(&mut admission, 5, A),
            Decision::Refuse(Cap::Host { open: 2 })
        );
        assert_eq!(arrive(&mut admission, 6, B), Decision::Hold);
        admission.closed(2, A);
        assert_eq!(arrive(&mut admission, 7, A), Decision::Hold);
        assert_eq!(admission.open(), 4);
        // Its cap comes first: at the cap on all, a host at its own is refused rather
        // than take another's place.
        let mut full = Admission::new(2, 1);
        assert_eq!(arrive(&mut full, 1, A), Decision::Hold);
        full.established(1);
        assert_eq!(arrive(&mut full, 2, B), Decision::Hold);
        assert_eq!(
            arrive(&mut full, 3, A),
            Decision::Refuse(Cap::Host { open: 1 })
        );
        assert_eq!(arrive(&mut full, 4, C), in_place_of_at_all(2, 2));
        // A host cap as high as the total is the total.
        let mut one_host = Admission::new(2, 2);
        assert_eq!(arrive(&mut one_host, 1, A), Decision::Hold);
        assert_eq!(arrive(&mut one_host, 2, A), Decision::Hold);
        assert_eq!(arrive(&mut one_host, 3, A), in_place_of_at_all(1, 2));
        one_host.established(2);
        one_host.established(3);
        assert_eq!(
            arrive(&mut one_host, 4, A),
            Decision::Refuse(Cap::All { open: 2 })
        );
    }

    #[test]
    fn an_ipv6_network_of_64_bits_and_a_mapped_ipv4_address_count_as_one_host() {
        let mut admission = Admission::new(10, 2);
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_net: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_net: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let mapped_a: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        for (key, peer) in [
            (1, one),
            (2, same_net),
            (4, other_net),
            (5, A),
            (6, mapped_a),
        ] {
            assert_eq!(arrive(&mut admission, key, peer), Decision::Hold);
            admission.established(key);
        }
        assert_eq!(
            arrive(&mut admission, 3, one),
            Decision::Refuse(Cap::Host { open: 2 })
        );
        assert_eq!(
            arrive(&mut admission, 7, A),
            Decision::Refuse(Cap::Host { open: 2 })
        );
        admission.closed(6, mapped_a);
        assert_eq!(arrive(&mut admission, 8, A), Decision::Hold);
        assert_eq!(admission.open(), 5);
    }
}

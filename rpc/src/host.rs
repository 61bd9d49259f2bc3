//! Which host a peer is, for the limits that go by host: the receive budget's turns and
//! shares (`rpc.io.maxReceiveBytes`), and the connections one host may hold
//! (`rpc.io.maxConnectionsPerHost`).

use std::net::IpAddr;

/// The host a peer at `peer` counts as: its IPv4 address (an IPv4-mapped IPv6 address is
/// one), or its IPv6 address's /64 prefix, the least a site is given, so that a host
/// cannot count as many by cycling through the addresses of its own network.
pub(crate) fn host_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_network_of_64_bits_and_a_mapped_ipv4_address_are_one_host_each() {
        let host = |text: &str| host_of(text.parse().unwrap());
        assert_eq!(host("2001:db8:1:2::1"), host("2001:db8:1:2:ffff::9"));
        assert_eq!(host("2001:db8:1:2::1"), host("2001:db8:1:2::"));
        assert_ne!(host("2001:db8:1:2::1"), host("2001:db8:1:3::1"));
        assert_eq!(host("::ffff:10.0.0.1"), host("10.0.0.1"));
        assert_ne!(host("10.0.0.1"), host("10.0.0.2"));
    }
}

//! Ports on 127.0.0.1 that nothing listens on, for tests that start a server on a port
//! they chose or need a port where no server is.
//!
//! Binding port 0 and dropping the listener gives a port from the kernel's ephemeral
//! range, the range every outgoing connection takes its local port from: a connection
//! another test opens meanwhile may take it (and the server's later bind fails), and a
//! connection to it can even connect to itself (TCP's simultaneous open) when the kernel
//! happens to give the connecting socket that same port, which a client retrying for
//! seconds makes likely enough to fail a suite now and then. These ports come from below
//! that range, where only a server that asked for one by number binds.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out.
const LOWEST: u16 = 20_000;

/// Where the kernel's ephemeral range starts when /proc does not say.
const EPHEMERAL_FROM: u16 = 32_768;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The first port of the kernel's ephemeral range (Linux's `ip_local_port_range`).
fn ephemeral_from() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_FROM)
}

/// A port on 127.0.0.1 nothing listened on a moment ago, outside the kernel's ephemeral
/// range (see the module docs). Each call in a process gives another port; processes
/// start at different places. Falls back to a port the kernel picks when the ephemeral
/// range leaves no room below it.
pub fn unused_port() -> u16 {
    let top = ephemeral_from();
    if top <= LOWEST + 100 {
        return kernel_port();
    }
    let span = u32::from(top - LOWEST);
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOWEST + (start.wrapping_add(step) % span) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    kernel_port()
}

fn kernel_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("bind a port on 127.0.0.1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_free_and_distinct() {
        let top = ephemeral_from();
        let ports: Vec<u16> = (0..5).map(|_| unused_port()).collect();
        for &port in &ports {
            assert!(
                (LOWEST..top).contains(&port),
                "{port} not in {LOWEST}..{top}"
            );
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port));
            assert!(listener.is_ok(), "{port}: {listener:?}");
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }
}

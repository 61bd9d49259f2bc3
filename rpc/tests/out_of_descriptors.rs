//! A listener that ran out of descriptors accepts again once it has some. In a test
//! binary of its own: it lowers the whole process's descriptor limit for a moment.
#![cfg(unix)]

use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flint_rpc::{Conf, RpcEnv};
use rustix::process::{getrlimit, setrlimit, Resource};
use socket2::{Domain, SockAddr, Socket, Type};

/// Held by each test here: they change the process's limit.
static LIMIT: Mutex<()> = Mutex::new(());

/// Sets the soft limit on open descriptors; returns the one it replaces.
fn set_descriptor_limit(soft: Option<u64>) -> Option<u64> {
    let mut limit = getrlimit(Resource::Nofile);
    let old = limit.current;
    limit.current = soft;
    setrlimit(Resource::Nofile, limit).unwrap();
    old
}

/// The descriptor number the next open would take: the lowest free one.
fn lowest_free_descriptor() -> u64 {
    let probe = std::fs::File::open("/dev/null").unwrap();
    u64::try_from(probe.as_raw_fd()).unwrap()
}

#[test]
fn connections_left_in_the_backlog_while_descriptors_ran_out_are_accepted_later() {
    let _limit = LIMIT.lock().unwrap_or_else(|e| e.into_inner());
    let env = RpcEnv::new(&Conf::new()).unwrap();
    let address = SockAddr::from(env.address());
    // Made while descriptors can still be had: connecting takes none.
    let clients: Vec<Socket> = (0..3)
        .map(|_| Socket::new(Domain::IPV4, Type::STREAM, None).unwrap())
        .collect();
    // No descriptor can be opened from here on: the listener's accept fails.
    let old = set_descriptor_limit(Some(lowest_free_descriptor()));
    for client in &clients {
        client.connect(&address).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let accepted_meanwhile = env.handle().stats().accepted;
    set_descriptor_limit(old);
    assert_eq!(accepted_meanwhile, 0, "no descriptor to accept with");
    // No new connection comes to raise another event on the (edge-triggered)
    // listener: the loop must try again by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while env.handle().stats().accepted < 3 {
        assert!(
            Instant::now() < deadline,
            "accepted {} of 3",
            env.handle().stats().accepted
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(clients);
    env.stop();
}

#[test]
fn the_descriptor_limit_is_raised_to_the_hard_limit() {
    let _limit = LIMIT.lock().unwrap_or_else(|e| e.into_inner());
    let hard = getrlimit(Resource::Nofile).maximum.unwrap_or(u64::MAX);
    let old = set_descriptor_limit(Some(hard.min(256)));
    let raised = flint_rpc::raise_descriptor_limit().unwrap();
    assert_eq!(raised, hard.min(1 << 20));
    assert_eq!(getrlimit(Resource::Nofile).current, Some(raised));
    set_descriptor_limit(old);
}

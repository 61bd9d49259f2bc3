//! flint's test helpers: what more than one of the workspace's crates, or more than one
//! test binary, needs in its tests, written once. Unpublished (`publish = false`) and only
//! ever a dev-dependency.
//!
//! - [`logs`]: [`LogCapture`](logs::LogCapture), the log lines of a thread or of the
//!   whole process, for tests that check what was logged;
//! - [`alloc`]: [`CountingAllocator`](alloc::CountingAllocator), a global allocator that
//!   counts, for the tests that prove a path allocates nothing;
//! - [`frames`]: a message as a frame's bytes, or as a decoded frame, in one call;
//! - [`wait`]: bounded waits, so that a test fails rather than hangs;
//! - [`process`]: child processes killed when a test ends, a bounded wait for one to exit,
//!   a process's resident memory, CPU time and open descriptors;
//! - [`attack`]: an attacker's tools: connections from another loopback host, idle
//!   connections held open, bytes that are no frame, huge headers, bad CRCs, a trickler
//!   that reconnects;
//! - [`outcome`]: task outcomes (`ok`, `failed`) for tests that play the executors;
//! - [`peers`]: [`RawPeer`](peers::RawPeer), a raw connection for tests that play an
//!   attacker (one that stops reading, say);
//! - [`samples`]: values more than one test binary gives the code under test (a task
//!   set's local properties);
//! - [`ports`]: a port nothing listens on, outside the range outgoing connections take
//!   theirs from.
//!
//! # What it may depend on
//!
//! Only std, `tracing`, `bytes`, `socket2` and flint-wire. A crate whose own unit tests use this one
//! must not be among its dependencies: the unit tests are a second build of that crate,
//! and the types this crate would name (a `SchedulerListener`, say) would be those of the
//! first, not of the crate under test. So helpers that need the scheduler's, the
//! executor's or the RPC layer's types stay with the tests that use them (the facade's
//! `tests/common/mod.rs`, the scheduler's `tests/common/mod.rs`). flint-wire is a
//! dependency, so flint-wire's own unit tests must not use [`frames`], [`outcome`] or
//! [`samples`]; its integration tests may use anything here.
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! use flint_testkit::logs::LogCapture;
//! use flint_testkit::wait::wait_until;
//! use tracing::Level;
//!
//! // The lines logged on this thread while the closure runs.
//! let logs = LogCapture::default();
//! logs.run(|| tracing::warn!("disk almost full"));
//! assert!(logs.contains(Level::WARN, "almost full"));
//!
//! // Fails the test, naming what it waited for, if it does not hold within 10 s.
//! let started = Instant::now();
//! wait_until("10 ms have passed", Duration::from_secs(10), || {
//!     started.elapsed() >= Duration::from_millis(10)
//! });
//! ```
//!
//! The counting allocator is a test binary's global allocator:
//!
//! ```ignore
//! use flint_testkit::alloc::{counted, CountingAllocator};
//!
//! #[global_allocator]
//! static ALLOCATOR: CountingAllocator = CountingAllocator;
//!
//! #[test]
//! fn decoding_allocates_nothing() {
//!     let (_, allocations) = counted(|| decode(&frame));
//!     assert_eq!(allocations.calls, 0);
//! }
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod alloc;
pub mod attack;
pub mod frames;
pub mod logs;
pub mod outcome;
pub mod peers;
pub mod ports;
pub mod process;
pub mod samples;
pub mod wait;

//! flint-rpc: the transport under flint's driver and executors.
//!
//! This crate is to hold flint's RPC layer over [mio]: the event loop, endpoints, one-way
//! `send` and request/reply `ask`, timers, authentication, and the configuration they
//! read. Only the configuration, [`conf`], exists yet; the frames themselves are
//! [`flint_wire`]'s.
//!
//! [mio]: https://docs.rs/mio
//!
//! ```
//! use std::time::Duration;
//! use flint_rpc::conf::{Conf, SchedulingMode};
//!
//! // As from `--conf` on a command line; the `spark.` prefix is accepted and dropped.
//! let conf = Conf::from_pairs(["spark.network.timeout=60s", "scheduler.mode=fair"])?;
//! assert_eq!(conf.get("network.timeout"), Some("60s"));
//! assert_eq!(conf.network_timeout()?, Duration::from_secs(60));
//! assert_eq!(conf.ask_timeout()?, Duration::from_secs(60)); // falls back to network.timeout
//! assert_eq!(conf.scheduler_mode()?, SchedulingMode::Fair);
//! assert_eq!(conf.message_max_size()?, flint_wire::DEFAULT_MAX_MESSAGE_SIZE); // the default
//!
//! let bad = Conf::from_pairs(["rpc.message.maxSize=4096"])?;
//! assert_eq!(
//!     bad.message_max_size().unwrap_err().to_string(),
//!     "rpc.message.maxSize should not be greater than 2047 MB",
//! );
//! # Ok::<(), flint_rpc::conf::ConfError>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod conf;

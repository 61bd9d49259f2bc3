//! flint-rpc: the transport under flint's driver and executors, and one that can be
//! embedded on its own. A typed "add" service, server and client:
//!
//! ```
//! use flint_rpc::{rkyv, Conf, Request, RpcEnv, Service, UserMessage};
//!
//! #[derive(rkyv::Archive, rkyv::Serialize)]
//! #[rkyv(crate = flint_rpc::rkyv)]
//! struct Add { a: i64, b: i64 }
//!
//! #[derive(rkyv::Archive, rkyv::Serialize)]
//! #[rkyv(crate = flint_rpc::rkyv)]
//! struct Sum(i64);
//!
//! impl UserMessage for Add { const ID: u32 = 1; }
//! impl Request for Add { type Reply = Sum; }
//! impl UserMessage for Sum { const ID: u32 = 2; }
//!
//! let conf = Conf::from_pairs(["spark.rpc.askTimeout=10s"])?;
//! let server = RpcEnv::new(&conf)?;
//! // The request arrives validated and is read in place: `add` is an `&ArchivedAdd`.
//! let adder = Service::new(()).on_ask::<Add>(|_, add| {
//!     Ok(Sum(add.a.to_native() + add.b.to_native()))
//! })?;
//! server.handle().register("adder", adder)?;
//!
//! let client = RpcEnv::new(&conf)?;
//! let adder = client.handle().endpoint_ref(server.address(), "adder");
//! for i in 0..100 {
//!     let sum = adder.ask_typed(&Add { a: i, b: 2 * i })?;
//!     assert_eq!(sum.archived().0.to_native(), 3 * i);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! An [`RpcEnv`] owns one [mio] event loop thread and a listener ([`RpcEnv::client`]: none,
//! for a process that only connects out, as an executor). Endpoints ([`Endpoint`])
//! are registered by name and run in turns of the loop, one message at a time; an
//! [`EndpointRef`] (address and name) offers one-way [`EndpointRef::send`] and
//! request/reply [`EndpointRef::ask`] with a timeout (`rpc.askTimeout`). Endpoints of the
//! same environment are reached without a socket. Frames are [`flint_wire`]'s: messages
//! arrive validated and are read in place.
//!
//! Besides flint's own catalogue of messages ([`Message`]), an embedder's types travel as
//! user messages: any type deriving rkyv's `Archive` and `Serialize` (with
//! `#[rkyv(crate = flint_rpc::rkyv)]`, so that flint-rpc is the only dependency) and
//! implementing [`UserMessage`] is sent with [`EndpointRef::send_typed`], asked with
//! [`EndpointRef::ask_typed`] and handled by a [`Service`] (or read with
//! [`Incoming::typed`] in an endpoint of one's own), validated and read in place on
//! either side. [`RpcEnv::builder`] sets an environment up in code rather than with
//! `key=value` strings, and callers inside an async runtime await
//! [`EndpointRef::ask_async`] or [`EndpointRef::ask_typed_async`], futures the event
//! loop completes through their waker (no runtime in the transport).
//!
//! How it is put together:
//!
//! - any thread encodes a message straight into the connection's bounded outbox
//!   (`outbox.rs`). For an ask, a reply or an explicit flush on a connection this
//!   environment opened, a thread other than the loop's then writes what is queued to
//!   the socket itself if the loop has none of the connection's bytes in flight (one
//!   hand-off between threads fewer; model-checked with loom); otherwise, and for plain
//!   one-way sends (which the loop writes many to a system call), it hands the loop a
//!   wake-up through a queue and a mio `Waker` if nobody did yet (`handoff.rs`,
//!   model-checked with loom);
//! - the loop writes each outbox with vectored writes, reads each socket until it would
//!   block (or, for a peer that sends faster than the loop takes in, 256 KiB per wake-up,
//!   so that it cannot starve the others), and hands every whole frame to its endpoint or
//!   to the ask it answers. Each connection is held to its deadlines (connect,
//!   authentication, a frame under way, idleness), all decided in
//!   `event_loop/deadlines.rs`;
//! - an ask ends exactly once: by its reply, its timeout (a loop timer), or the loss of
//!   its connection (`ask.rs`, model-checked with loom);
//! - the loop's state sits behind a lock, and a turn of it never blocks: the loop thread
//!   turns it, and so can a thread that waits for something the loop brings (an
//!   executor's task runner between tasks), which lends itself to the loop
//!   ([`RpcEnvHandle::lend`], [`LoopLease`]) and takes what it waits for straight off
//!   the socket, without a hand-off from the loop thread. While lent threads turn the
//!   loop, the loop thread leaves the sockets to them (the hand-overs between them are
//!   model-checked with loom);
//! - with `authenticate=true`, a connection delivers nothing before the peer proved it
//!   knows `authenticate.secret`, nor takes a frame larger than a handshake step from it
//!   ([`auth`]); with `network.crypto.enabled=true` as well, every frame after the
//!   handshake is sealed with keys the handshake derived, and one altered, replayed or
//!   reordered on the way closes the connection ([`crypto`]);
//! - the configuration is [`Conf`].
//!
//! [mio]: https://docs.rs/mio

#![warn(missing_docs)]
#![forbid(unsafe_code)]

// The transport's layers. Top to bottom: future (asks as futures, over typed and refs),
// typed (user messages, over endpoint and refs),
// builder (RpcEnv::builder), serve (RpcEnv::serve), env (RpcEnv), turns (who turns the loop),
// event_loop, endpoint (what endpoints implement and are handed), refs (handles and
// endpoint refs), shared (the state every thread shares), settings. Each uses only those
// below it (tests/module_layers.rs holds this), so that each can be read, and tested,
// without the ones above.
mod builder;
mod endpoint;
mod env;
mod event_loop;
mod future;
mod refs;
#[cfg(unix)]
mod serve;
mod service_macro;
mod settings;
mod shared;
mod turns;
mod typed;

// What the layers are built from: state machines and primitives that know none of them.
pub(crate) mod admission;
pub(crate) mod ask;
pub mod auth;
pub mod conf;
pub mod crypto;
mod error;
pub(crate) mod handoff;
pub(crate) mod host;
pub mod log_budget;
pub(crate) mod outbox;
pub(crate) mod receive_budget;
mod socket;
mod sync;
#[doc(hidden)]
pub mod timer;

/// For [`peer_warn!`]: crates using it need not depend on `tracing` themselves.
#[doc(hidden)]
pub use tracing as __tracing;

pub use ask::Reply;
pub use builder::RpcEnvBuilder;
pub use conf::Conf;
pub use endpoint::{Endpoint, EndpointContext, Incoming, ReplyHandle};
pub use env::RpcEnv;
pub use error::{RpcError, Target, TimeoutSource};
pub use future::{AskFuture, TypedAskFuture};
pub use refs::{EndpointRef, RpcEnvHandle, RpcStats, CLIENT_ADDRESS};
#[cfg(unix)]
pub use serve::ServeEnd;
pub use settings::Settings;
#[cfg(unix)]
pub use socket::raise_descriptor_limit;
pub use socket::SocketOptions;
pub use timer::TimerId;
pub use turns::{LentFlushHook, LoopLease};
pub use typed::{
    decode_user_message, encode_user_message, Request, Service, TypedReply, UserMessage,
    MAX_USER_MESSAGE_DEPTH,
};

// What the API exposes, so that one dependency is enough: messages and frames
// (flint-wire), their blobs (bytes), and rkyv, to derive user messages (with
// `#[rkyv(crate = flint_rpc::rkyv)]`) and read their archives.
pub use bytes::{self, Bytes};
pub use flint_wire::{self as wire, ArchivedMessage, CheckError, Frame, Message};
pub use rkyv::{self, Archive, Archived, Deserialize, Serialize};

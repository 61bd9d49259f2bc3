//! The transport over real sockets on 127.0.0.1, a module per topic: asks, one-way
//! sends, hostile peers, authentication, encryption, an environment's life, and threads lent to the
//! loop. The timeout rules themselves are proved by unit tests on made-up instants
//! (`rpc/src/event_loop/deadlines.rs`); these show that the loop holds real sockets to
//! them.
//!
//! Every wait is bounded in time; every environment is stopped by its Drop.

mod common;

mod asks;
mod auth;
mod crypto;
mod hostile_peers;
mod lending;
mod lifecycle;
mod sends;

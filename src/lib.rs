//! flint: a zero-copy task-launch control plane.
//!
//! A driver schedules tasks onto long-lived executor processes over flint's own wire
//! protocol, carried by a mio event loop. This facade re-exports the parts:
//!
//! - [`wire`]: frames, the message catalogue and the codec (no I/O);
//! - [`rpc`]: the transport (event loop, endpoints, send/ask, configuration);
//! - [`conf`]: every crate's configuration keys together, and the checks between them;
//! - [`scheduler`]: the driver side;
//! - [`executor`]: the executor side;
//! - [`status_page`]: the driver's status page, JSON API and metrics over HTTP.
//!
//! ```
//! use flint::wire::{Encoder, FrameDecoder, Message, Route};
//!
//! let mut bytes = bytes::BytesMut::new();
//! let route = Route::OneWay { endpoint: "CoarseGrainedScheduler".into() };
//! Encoder::new(1 << 20).encode(&route, &Message::ReviveOffers, &mut bytes).unwrap();
//! let mut decoder = FrameDecoder::new(1 << 20);
//! decoder.feed(&bytes).unwrap();
//! assert!(decoder.next_frame().unwrap().is_some());
//! ```

#[doc(hidden)]
pub mod bench;
pub mod conf;
pub mod job;
pub mod stages;
pub mod ui;

pub use flint_executor as executor;
pub use flint_rpc as rpc;
pub use flint_scheduler as scheduler;
pub use flint_ui as status_page;
pub use flint_wire as wire;

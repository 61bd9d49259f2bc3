//! The hash maps of the scheduler's hot path.
//!
//! Every task launch inserts into maps keyed by task id; std's SipHash costs more than
//! the rest of the insert. Keys are task ids the scheduler chose itself and executor ids
//! of registered (and, with `authenticate`, authenticated) executors, so hash flooding
//! is not a concern here: the maps use rustc's Fx hash (the `rustc-hash` crate).

pub(crate) use rustc_hash::{FxHashMap, FxHashSet};

//! The synchronisation primitives the hand-over between the executor's endpoint and its
//! runners uses, in one place.

pub(crate) use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

//! The synchronisation primitives the hand-over between the executor's endpoint and its
//! runners uses: std's normally, loom's under `--cfg loom`, so that the same code is
//! model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};
